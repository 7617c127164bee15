// The in-process workloads over the engine (engine/api.h): the context
// ladder, the prefill gradient from empty, the concurrency ladder's target,
// and what the report records about the model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/load.h"
#include "bench/results.h"
#include "bench/roofline.h"
#include "engine/api.h"

namespace sustain::bench {

using ProgressFn =
    std::function<void(const std::string& phase, double fraction, const std::string& detail)>;

// `n` seeded token ids: BOS first when the vocabulary adds one, then ids
// drawn uniformly from the vocabulary, never an end-of-generation token or
// BOS. A longer prompt of the same seed extends a shorter one.
std::vector<int32_t> random_prompt(const engine::Engine& e, int64_t n, uint64_t seed);

// The model's roofline costs, from the weight views the forward reads.
ModelCost model_cost(const engine::Engine& e);
// conditions.model and conditions.kv of the report.
nlohmann::json model_conditions(const engine::Engine& e);
nlohmann::json kv_conditions(const engine::Engine& e);
nlohmann::json engine_conditions(const engine::EngineConfig& c);

// What bench's requests sample with (bench --temp, --top-k, --top-p,
// --min-p): temperature 0 is greedy and the rest unused; above 0 the chain
// named, by default the sampler's own (top_k 40, top_p 0.95, min_p 0.05).
// top_k 0, top_p 1, min_p 0 is what an OpenAI client sends with a
// temperature alone.
// top_logprobs (bench --logprobs N): each request also asks for its
// tokens' logprobs and N alternatives each (what an evaluation harness
// sends); -1: none.
struct BenchChain {
  float temperature = 0.0f;
  int32_t top_k = sampling::SamplerConfig{}.top_k;
  float top_p = sampling::SamplerConfig{}.top_p;
  float min_p = sampling::SamplerConfig{}.min_p;
  int32_t top_logprobs = -1;
};

// The sampler every bench request uses, with ignore_eos, so each request
// generates exactly max_tokens tokens: greedy at temperature 0 (the
// default); above it `chain`, seeded with `seed` (what sampling costs a
// served step).
sampling::SamplerConfig bench_sampler(const BenchChain& chain = {}, uint64_t seed = 0);

struct LadderOptions {
  std::vector<int64_t> ctx;  // ascending
  int n_tokens = 32;         // generated per repetition
  int reps = 3;              // timed repetitions after the warm-up
  uint64_t seed = 1234;
  // When > 0: before each rung, the time it will take is projected from
  // the rungs so far; a rung that would end past the budget is skipped
  // (with a note), and so are the rest.
  double budget_s = 0;
  ProgressFn progress;
  // Every generated token under this constraint (null: none), as a
  // grammar / JSON-schema request would be (--ablate grammar=).
  std::shared_ptr<const sampling::ConstraintFactory> constraint;
  BenchChain chain;  // bench_sampler's
  // --fill random: every request's prompt but its last token gets random
  // K/V instead of a prefill (engine::Request::synthetic_prefix), so a deep
  // rung costs its decode, not minutes of prefill; the rungs' prefill
  // figures are then not measured.
  bool random_fill = false;
};
struct LadderResult {
  std::vector<LadderRung> rungs;
  std::vector<std::string> notes;
};
Expected<LadderResult> run_context_ladder(engine::Engine& e, const LadderOptions& opt);

// A prompt of each length from an empty cache (its own tokens, so nothing is
// shared), `reps` times; TTFT per repetition.
Expected<std::vector<PrefillPoint>> run_prefill_points(engine::Engine& e,
                                                       const std::vector<int64_t>& lengths,
                                                       int reps, uint64_t seed,
                                                       const ProgressFn& progress);

// The concurrency ladder's in-process target: request i is a prompt of
// `prompt_tokens` seeded by (seed, i), `max_tokens` tokens sampled by
// bench_sampler(chain, (seed, i)).
class EngineTarget : public LoadTarget {
 public:
  EngineTarget(engine::Engine& e, int64_t prompt_tokens, int32_t max_tokens, uint64_t seed,
               std::shared_ptr<const sampling::ConstraintFactory> constraint = nullptr,
               BenchChain chain = {})
      : e_(e),
        prompt_tokens_(prompt_tokens),
        max_tokens_(max_tokens),
        seed_(seed),
        constraint_(std::move(constraint)),
        chain_(chain) {}
  RequestTiming run(int64_t index, BenchClock::time_point origin) override;
  std::string last_error() const override;
  // The engine's TPOT-target counters over the level (EngineStats deltas).
  void level_begin() override;
  std::vector<std::pair<std::string, double>> level_counters() override;

 private:
  engine::Engine& e_;
  engine::EngineStats before_;
  int64_t prompt_tokens_;
  int32_t max_tokens_;
  uint64_t seed_;
  std::shared_ptr<const sampling::ConstraintFactory> constraint_;
  BenchChain chain_;
  mutable std::mutex mu_;
  std::string last_error_;
};

}  // namespace sustain::bench

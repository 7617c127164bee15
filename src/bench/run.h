// One whole bench run, from a parsed configuration to the report: the
// speed–context curve (context ladder), the prefill gradient, the
// concurrency ladder (in-process, or any OpenAI endpoint), the ablation
// matrix with its quality cost and the roofline. `sustain bench` parses its
// flags into a BenchConfig and writes what run_bench returns; any other front
// end gets the same report from the same call.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/ablation.h"
#include "bench/bandwidth.h"
#include "bench/observer.h"
#include "bench/workloads.h"
#include "engine/api.h"

namespace sustain::bench {

// The context ladder when none is given; it stops where the budget runs out.
constexpr std::array<int64_t, 5> kDefaultLadder = {512, 2048, 8192, 16384, 32768};
constexpr double kDefaultLadderBudgetS = 300;

struct BenchConfig {
  // The model: a GGUF file, or (when empty) the synthetic `preset` with
  // weights in `type` (model_cache.h), made once and cached. Both given is
  // an error.
  std::string model, preset, type;
  std::vector<int64_t> ctx;  // the context ladder, any order; empty: kDefaultLadder
  // Seconds the ladder may take (0: none); < 0: kDefaultLadderBudgetS for the
  // default ladder, none for an explicit one.
  double budget_s = -1;
  int n_tokens = 32;  // generated per request, >= 2
  // What the ladders' requests sample with (bench_sampler): temperature 0
  // is greedy.
  BenchChain chain;
  int reps = 3;       // timed repetitions per rung, after a warm-up
  // --fill random: the ladders' prompts get random K/V instead of a prefill
  // (LadderOptions::random_fill); their prefill is then not measured.
  bool random_fill = false;
  int threads = 0;    // 0: every core this process may use
  std::string cache_type_k = "f16", cache_type_v = "f16";  // -ctk / -ctv spellings
  bool kv_tiled = true;                                    // KV page layout
  bool swa_full = false;  // sliding-window layers keep the whole context (EngineConfig::swa_full)
  bool repack = false;    // --repack (EngineConfig::repack)
  int64_t batch = 512, ubatch = 512;
  // The scheduler's TPOT target (engine::EngineConfig::tpot_target_ms) and
  // prefill age bound.
  double tpot_target_ms = engine::kTpotAuto;
  double prefill_age_bound_s = 5.0;
  // --batch-invariant (engine::EngineConfig::batch_invariant): what an
  // oracle row at depth needs to keep its first pass's path.
  bool batch_invariant = false;
  // --spec and its flags (cli/spec_flags.h): speculation in the main
  // ladder's engine, and so in every ablation row that does not switch it.
  engine::SpecConfig spec;
  std::vector<int64_t> prefill;  // prefill gradient lengths from an empty cache; empty: none
  // --verify-curve: draft lengths (from 0) whose verify step is timed at
  // every ladder depth (verify_curve.h); empty: none.
  std::vector<int64_t> verify_ks;
  std::vector<int64_t> verify_depths;  // --verify-depths; empty: the ladder's depths
  int prefill_reps = 1;
  std::vector<int64_t> concurrency = {1, 2, 4, 8};  // levels; empty: no concurrency ladder
  int64_t conc_prompt = 256;                        // tokens (words over HTTP)
  int conc_requests = 2;                            // requests per client at each level
  std::vector<double> rates;  // Poisson rates, requests/s; empty: 50 % and 90 % of capacity
  int poisson_requests = 8;
  // Ablation rows, each switching one thing on top of the row above
  // (ablation.h: "kv=q8_0", "batch=256,threads=4", ...).
  std::vector<std::string> ablate;
  // --ablate-bracket: each row switches one thing on row 0's engine alone,
  // and row 0 runs again after every row; each row's speed is also given
  // against the mean of the row-0 runs on either side (ablation.h).
  bool ablate_bracket = false;
  // Compiles an ablation row's grammar= (set by the CLI, which may use the
  // grammar module; bench/ may not).
  MakeConstraint make_constraint;
  // With ablation rows: each row's quality cost against row 0 (ablation_quality.h).
  bool quality = true;
  std::vector<int64_t> quality_ctx = {8192};
  std::string quality_text;  // KL input file; empty: seeded random ids
  double quality_budget_s = 600;
  std::string quality_needle = "default";  // retriever variant, or "off"
  int quality_trials = 1;
  uint64_t seed = 1234;
  int64_t bw_mib = 1024;  // bandwidth buffer, capped at an eighth of the memory
  int bw_reps = 5;
  // An OpenAI-compatible server (http://HOST:PORT): only the concurrency
  // ladder runs, against it, with prompts of conc_prompt words.
  std::string url, api_key, model_name;
  // With url: a JSON schema every request is constrained by (null: none),
  // sent both as OpenAI's response_format and as llama-server's json_schema
  // field, so the same run compares constrained decode across servers.
  nlohmann::json json_schema;
  // Image cost (bench/vision.h): a vision projector and images to measure.
  std::string mmproj;
  std::vector<std::string> images;
  std::string command_line;  // how the run was asked for, recorded in the report
  // One model over the ranks of an mpirun job (engine/ranks.h; null: this
  // process alone): every engine the bench makes runs over them, and the
  // report's conditions.split says what rank 0's transport did. Not with
  // url, nor with the quality columns (they load the model in-process).
  const engine::EngineRanks* ranks = nullptr;
};

// The machine's bandwidth and peak FLOP/s with `threads` (0: every core),
// as the report's roofline uses them.
Expected<BandwidthResult> measure_machine(int threads, int64_t bw_mib, int bw_reps, Observer& obs);

// Runs the bench `c` describes (the HTTP target when c.url is set) and
// returns its report (docs/bench.md), checked against the schema. Every
// flag-like value is checked before anything runs, so a typo costs nothing.
Expected<nlohmann::json> run_bench(const BenchConfig& c, Observer& obs);

}  // namespace sustain::bench

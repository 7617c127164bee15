// The quality column of `sustain bench --ablate`: what each ablation row
// costs in quality against the first row (the baseline), beside its speed.
//   - KL(base‖row), its P99 and the share of positions with the same top-1
//     token, in the bucket (C/2, C] of each quality context C, from ONE
//     lockstep pass (eval::run_kl) over seeded random ids or a text;
//   - needle accuracy of the built-in needle retriever (tools/needle_retriever.h)
//     with the row's KV formats at each C (depths 0.1, 0.5, 0.9).
// Both stop where a time budget is projected to run out, with a note.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/observer.h"
#include "tensor/qtype.h"

namespace sustain::bench {

// One ablation row as the quality pass sees it: what changes the numbers.
struct QualityConfig {
  std::string name;      // the row's name ("baseline", "kv=q4_0", ...)
  std::string model;     // GGUF path
  std::string ctk, ctv;  // KV formats, -ctk spellings
  int64_t batch = 512;   // tokens per forward call (the engine's ubatch)
  int threads = 1;
  bool kv_tiled = true;  // KV page layout (engine::EngineConfig::kv_tiled)
};

struct QualityOptions {
  std::vector<int64_t> ctx;        // quality contexts, checked by check_quality_ctx
  std::vector<int32_t> tokens;     // the KL input (quality_tokens), ctx.back() of them
  std::string input;               // what the tokens are, for the report
  double budget_s = 600;           // 0: no budget
  std::string needle = "default";  // retriever variant (tools::retriever_variant), "off": none
  int needle_trials = 1;           // cases per (context, depth)
  uint64_t seed = 1;
  int threads = 1;  // for the needle retriever
};

// Sorts and checks --quality-ctx: each at least 64 tokens, and the buckets
// (C/2, C] must not overlap (each context at least twice the one below).
Status check_quality_ctx(std::vector<int64_t>& ctx, const std::string& flag_value);

// The KL input: `n` seeded random ids in the vocabulary of `model`, or the
// text of `text_file` tokenized by `model` (BOS added), cut to `n`; a text
// shorter than `n` tokens is an error naming both counts.
Expected<std::vector<int32_t>> quality_tokens(const std::string& model,
                                              const std::string& text_file, int64_t n,
                                              uint64_t seed, std::string* input);

// The -ctk spelling of a KV format ("q4_0").
std::string kv_spelling(QType t);

struct QualityResult {
  std::vector<nlohmann::json> rows;  // one "quality" object per row
  nlohmann::json summary;            // how it was measured (report ablation.quality)
  std::vector<std::string> notes;    // budget stops, skipped rows
};

// rows[0] is the baseline. Progress and projections go to `obs`.
Expected<QualityResult> measure_quality(const QualityOptions& opt,
                                        const std::vector<QualityConfig>& rows, Observer& obs);

}  // namespace sustain::bench

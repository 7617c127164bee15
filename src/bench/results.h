// Raw results of the workloads (engine-free types) and their JSON form in
// the report (docs/bench.md). Every raw sample goes into the JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bandwidth.h"
#include "bench/load.h"
#include "bench/roofline.h"

namespace sustain::bench {

// One rung of the context ladder.
struct LadderRung {
  int64_t ctx = 0;
  // The timed fill: the prompt of `ctx` tokens whose first `fill_from` came
  // from the prefix cache (the previous rung), so fill_new_tokens were computed.
  int64_t fill_from = 0, fill_new_tokens = 0;
  double fill_ttft_s = 0;
  // --fill random: the prompt's K/V were random values, not a prefill, so
  // fill_ttft_s times the random fill and one token's forward.
  bool random_fill = false;
  int n_tokens = 0;                             // tokens generated per repetition
  // Per timed repetition: each token's share of the decode time after the
  // first token (per_token_decode_s: the gaps between tokens, a verify
  // step's time split over the tokens it emitted).
  std::vector<std::vector<double>> rep_gaps_s;
  std::vector<double> rep_tok_s;                // per repetition: (k − 1) / (t_last − t_first)
  std::vector<int64_t> rep_visible_tokens;      // per repetition: visible tokens received
  // Speculative decoding over the timed repetitions (the fill excluded),
  // from each request's usage; `speculative` says the engine had proposers.
  bool speculative = false;
  int64_t spec_drafted = 0, spec_accepted = 0, spec_steps = 0;
  int64_t kv_bytes = 0;            // KV of the sequence at its end: bytes/token × (ctx + n_tokens)
  int64_t kv_pool_used_bytes = 0;  // measured: pool pages in use mid-decode (incl. prefix cache)
  int64_t peak_rss_bytes = 0;
};

// Decode statistics of one rung: TPOT percentiles over every pooled token share,
// tok/s = 1 / TPOT, and the spread of the per-repetition rates.
struct DecodeStats {
  Summary tpot_s, rep_tok_s;
  double tok_s_p50 = 0, tok_s_p95 = 0;
};
DecodeStats decode_stats(const LadderRung& r);

// A rung's speculation: drafted, accepted, verify steps, acceptance, mean
// draft per verify step, and verify_token_share — the share of the decoded
// tokens (each repetition's first token excluded) that came out of verify
// steps (accepted drafts plus each step's own token). Null when the engine
// had no proposers.
nlohmann::json rung_spec_json(const LadderRung& r);

// One measured prefill: `new_tokens` computed on top of `from_ctx` cached ones.
struct PrefillPoint {
  std::string source;  // "ladder" (the rung's fill) or "prefill" (from empty, --prefill)
  int64_t from_ctx = 0, ctx = 0, new_tokens = 0;
  std::vector<double> ttft_s;  // one per repetition
};

// ladder[] of the report. The peak is the fastest rung (tok/s P50) with
// ctx ≤ 2048 (or the first); the bounds use `bw` (best of reps) at the rung's mean decode
// context ctx + n_tokens / 2.
nlohmann::json ladder_json(const std::vector<LadderRung>& rungs, const ModelCost& cost,
                           const BandwidthResult* bw);
// prefill{} of the report: the points, the fit t(depth) = a + b·depth, and
// the projected full re-prefill of each window in `windows`.
nlohmann::json prefill_json(const std::vector<PrefillPoint>& points,
                            const std::vector<int64_t>& windows);
// One level of the concurrency ladder, with every request's raw timestamps.
nlohmann::json load_level_json(const LoadLevel& level);
// Every level, each fixed one with its scheduling efficiency (stats.h
// ideal_time; prefill alone from the concurrency-1 level's median TTFT) and
// what the target counted (LoadLevel::target_counters).
nlohmann::json load_levels_json(const std::vector<LoadLevel>& levels);
nlohmann::json bandwidth_json(const BandwidthResult& bw);

}  // namespace sustain::bench

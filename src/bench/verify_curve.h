// The verify-cost curve (issue 15, `sustain bench --verify-curve`): what a
// speculative verify step of k drafted tokens (k + 1 rows of one sequence,
// logits for each) costs at each ladder depth, next to a one-token decode
// step (k = 0), and the speedup that implies at a per-token acceptance α:
// a chain of k drafts yields (1 − α^(k+1)) / (1 − α) visible tokens a step,
// so speculation pays at (α, k) where that exceeds the step's cost ratio.
// The steps are timed by engine/verify_cost.h on the engine's model, KV
// formats and threads, after the ladder, with the engine idle.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/api.h"
#include "engine/verify_cost.h"

namespace sustain::bench {

// The timing's options (depths, ks from 0, steps, reps, seed), each k at
// most kMaxK.
struct VerifyCurveOptions : engine::VerifyCostOptions {
  static constexpr int64_t kMaxK = 16;
};

struct VerifyCurvePoint {
  int64_t depth = 0;
  std::vector<std::vector<double>> ms;  // [k index][repetition]: ms per step
};

// Times the curve on the engine's model with its KV formats and layout
// (idle: nothing else may run on the engine meanwhile).
Expected<std::vector<VerifyCurvePoint>> measure_verify_curve(const engine::Engine& e,
                                                             ThreadPool& pool,
                                                             const VerifyCurveOptions& opt);

// Expected visible tokens of a verify step with k drafts at acceptance α.
double chain_tokens(double alpha, int64_t k);

// report["verify_curve"]: {"ks", "alphas", "steps", "reps", "points": [{"depth",
// "ms_p50": [per k], "ratio": [per k, ms_p50 / ms_p50 at k = 0], "ms": [[per
// rep]...], "best": [per α: {"alpha", "k", "speedup"}]}]}.
nlohmann::json verify_curve_json(const std::vector<VerifyCurvePoint>& points,
                                 const VerifyCurveOptions& opt);

// Parses "0,1,2,4,8,16": ascending, 0 first (added when missing), each in
// 0..kMaxK; errors name --verify-curve.
Expected<std::vector<int64_t>> parse_verify_ks(const std::string& list);

}  // namespace sustain::bench

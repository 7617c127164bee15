// Timing a speculative verify step of k drafts (k + 1 rows of one sequence,
// logits for each) at given depths: the verify-cost curve that `sustain
// bench --verify-curve` reports (bench/verify_curve.h) and that the gate's
// price (spec/gate.h) stands for. The model runs one sequence over a KV
// cache of its own in the given formats and layout, filled with random rows
// to each depth (kv/random_fill.h: attention's cost does not depend on the
// values), each step rewound to the depth (a hybrid's state too). Each
// repetition times every k in turn, so a slow moment of a shared machine
// falls on all of them rather than on one k.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace sustain::engine {

struct VerifyCostOptions {
  std::vector<int64_t> depths;  // ascending
  std::vector<int64_t> ks;      // ascending, k = 0 the decode step
  int steps = 8;                // forward passes per (k, repetition)
  int reps = 3;
  uint64_t seed = 1;
};

// ms[d][i][r]: ms a step at depths[d] for ks[i] in repetition r. `geo`: the
// KV formats, page size and layout to use (an engine's kv_geometry());
// sliding windows are kept whole, as every step is rewound to its depth.
Expected<std::vector<std::vector<std::vector<double>>>> time_verify_steps(
    const Model& m, const kv::KvGeometry& geo, ThreadPool& pool, const VerifyCostOptions& opt);

}  // namespace sustain::engine

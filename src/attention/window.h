// Sliding-window attention (Gemma 3's local layers): query t attends to the
// keys [max(0, n_visible - window), n_visible) only, the last `window`
// positions including its own. Called by attend() when a query's context is
// longer than the window, unless every such query is alone in its block
// (decode): the fused kernel then takes the key range from the window's
// first key (attention.cc). Shorter contexts see every key anyway and
// take the fused kernel.
//
// This first version reads the window's K and V rows out of the pages, turns
// them into f32 and runs an exact softmax per (query, KV head): O(window) per
// query whatever the context length, but without the fused kernel's tiling,
// in-place block formats and prefetching (attention.h). Work items are
// (query, KV head) pairs spread over the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/attention.h"

namespace sustain::attention {

// Scratch for attend_window with n_threads threads (64-byte aligned at the
// start): per thread, the window's K and V rows in f32, their scores, and one
// stored row.
size_t window_scratch_bytes(const AttnParams& p, int n_threads);

void attend_window(const kv::KvCache& cache, int layer, const AttnParams& p,
                   const std::vector<QueryInfo>& queries, const float* q, float* out,
                   ThreadPool& pool, void* scratch);

}  // namespace sustain::attention

// Sliding-window attention (Gemma 3's local layers): query t attends to the
// keys [max(0, n_visible - window), n_visible) only, the last `window`
// positions including its own. The fused kernel takes every block whose
// queries' window starts lie within a few keys of each other (decode
// queries, prefill chunks and verify blocks of consecutive positions) as a
// key range from the block's latest window start, folding each row's
// earlier keys in afterwards (attention.cc). attend() calls this path for a
// batch with any other block.
//
// It reads the window's K and V rows out of the pages, turns them into f32
// and runs an exact softmax per (query, KV head): O(window) per query
// whatever the context length, but without the fused kernel's tiling,
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

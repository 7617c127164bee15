// Fused attention over the paged KV cache (DESIGN.md §4): online softmax (no
// L×L matrix), the query heads of a GQA group processed together so each K/V
// row is read once per group, causal masking by position. Reads K/V in their
// stored format.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"

namespace sustain::attention {

// One query token of the batch: which sequence's pages it attends over and
// how many of that sequence's tokens it may see (causal: its position + 1).
struct QueryInfo {
  const kv::PageTable* pages = nullptr;
  int64_t n_visible = 0;
  // Sliding window: the keys from max(0, window_end - window) on, up to
  // n_visible; 0 means window_end = n_visible (a causal query). A query of a
  // non-causal block sets its own position + 1 here: the window counts back
  // from the query while it still sees the block's later keys.
  int64_t window_end = 0;

  int64_t window_first(int window) const {
    const int64_t end = window_end > 0 ? window_end : n_visible;
    return window > 0 ? std::max<int64_t>(0, end - window) : 0;
  }
};

// Split-KV (flash-decoding): with few query blocks per thread (decode of one
// or a few sequences), a sequence's keys are cut into page-aligned chunks on
// different threads and the partial softmax states merged. kAuto splits when
// there are fewer than 4 blocks per thread, more than one thread, and a
// query sees at least kSplitMinKeys keys; kForce splits whenever there are
// fewer than 4 blocks per thread, however short the context (tests).
enum class SplitKv { kAuto, kOff, kForce };
inline constexpr int64_t kSplitMinKeys = 512;

struct AttnParams {
  int n_head = 0;     // query heads
  int n_head_kv = 0;  // KV heads; n_head % n_head_kv == 0
  int head_dim_k = 0;
  int head_dim_v = 0;
  float scale = 0.0f;  // usually 1/sqrt(head_dim_k)
  SplitKv split_kv = SplitKv::kAuto;
  // Sliding window: > 0 limits each query to its last `window` keys (itself
  // included; QueryInfo::window_end moves the window's end); see window.h.
  // attention_scratch_bytes sizes for it.
  int window = 0;
};

// out[t, h, :] = sum_j softmax_j(scale * q[t,h] · K[j, kvh]) V[j, kvh] over the
// n_visible keys of query t, for `layer`; query head h reads KV head
// h / (n_head / n_head_kv). q is [n_q, n_head, head_dim_k] f32, out is
// [n_q, n_head, head_dim_v] f32; a query with n_visible == 0 gets zeros.
// Consecutive queries of one sequence (same page table, e.g. a prefill
// chunk) form blocks of up to 16 / group queries, so each K/V row is read
// once per block and GQA group. A work item is (block, all KV heads) — so it
// streams each page's layer data front to back — split further over key
// chunks for long contexts (flash-decoding, see SplitKv) or over KV heads
// for short ones; items are handed to threads dynamically, longest first.
// `scratch` (64-byte aligned) must hold
// attention_scratch_bytes(p, queries.size(), pool.size()); attend() itself
// allocates nothing.
size_t attention_scratch_bytes(const AttnParams& p, int64_t n_q, int n_threads);
void attend(const kv::KvCache& cache, int layer, const AttnParams& p,
            const std::vector<QueryInfo>& queries, const float* q, float* out, ThreadPool& pool,
            void* scratch);

}  // namespace sustain::attention

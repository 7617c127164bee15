// Internal: the per-work-item attention kernel (attend_dispatch.cc, Highway,
// dynamic dispatch) and the layout of its workspace. attention.cc plans the
// work items, runs them on the pool and merges split states.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/attention.h"
#include "kv/kv_cache.h"

namespace sustain::attention::detail {

// Keys per tile: scores for a tile of keys are computed, exponentiated and
// applied to V before the next tile, so a tile's K and V rows are still in L1.
// A tile of the row readers lies within one page.
inline constexpr int kTile = 32;
// Keys per tile where both K and V pages are tiled (kv/tiled.h) and read by
// the tiled kernels (block formats and FP8): up to four 16-key groups, which
// may lie on different pages. Twice kTile halves the per-tile work (the
// softmax maximum, the V weights' bound, split and scales).
inline constexpr int kTileTiled = 64;
inline constexpr int kTileMax = kTileTiled;
// Query rows per KV head of a block (queries × heads of a GQA group).
inline constexpr int kMaxBlockRows = 16;

// Float counts rounded to 64-byte multiples, so workspace pieces stay aligned.
inline size_t round_up_floats(size_t n) {
  return (n + 15) / 16 * 16;
}

// One work item: the query rows of a block of consecutive queries of one
// sequence × the query heads of KV heads [head_begin, head_end), over keys
// [k_begin, k_end). Produces the unnormalized softmax state of each row r =
// ((kv head - head_begin) * n_queries + query) * group + head in group:
// m[r] the running maximum score, l[r] = sum exp(s - m), o[r * dv ..] =
// sum exp(s - m) v. Taking all KV heads of a layer in one item reads the
// layer's pages front to back (see kv_cache.h).
struct Item {
  const kv::KvCache* cache = nullptr;
  int layer = 0;
  int head_begin = 0, head_end = 0;
  const int32_t* pages = nullptr;
  int64_t k_begin = 0, k_end = 0;
  const QueryInfo* queries = nullptr;  // the block's queries (n_visible limits)
  int n_queries = 0;
  int group = 0;             // query heads per KV head
  const float* q = nullptr;  // the block's first query, query head 0
  size_t q_stride = 0;       // floats from one query token to the next
  int dk = 0, dv = 0;
  float scale = 0.0f;
  float* m = nullptr;
  float* l = nullptr;
  float* o = nullptr;
  float* work = nullptr;  // work_floats(dk, dv) floats, 64-byte aligned
  // The integer V kernels bound each row's weights by the keys that row
  // weighs, not every key of the tile, so a row of a block is quantized as
  // it is alone (batch invariance; ~7 % of a q8_0 verify block's attention,
  // so only in the mode).
  bool row_bounds = false;
};

// Rows whose scores are computed together (kernel registers allow 4).
inline constexpr int kScoreRows = 4;

// Floats per state row of the int8 copy of the queries (AVX-512 VNNI path for
// Q8_0 K): the codes padded to an even number of 32-element blocks, then per
// block the scale (q's × the softmax scale) and 128 × the block's code sum.
inline size_t q8_row_floats(int dk) {
  const size_t pairs = (size_t(dk) + 63) / 64;
  return pairs * (64 / sizeof(float) + 4);
}

// Floats per state row of the queries a VNNI target converts once per item:
// the int8 layout above, or dk bf16 (tiled FP8 K).
inline size_t int_query_floats(int dk) {
  return std::max(q8_row_floats(dk), (size_t(dk) + 1) / 2);
}

// Floats that hold a tile of K and V rows of a block format (at most 34
// bytes per 32 elements) put back from the tiled layout.
inline size_t untiled_floats(int dk, int dv) {
  return round_up_floats(size_t(kTile) * (dk + dv) * 34 / 32 / sizeof(float) + 2 * kTile);
}

// Lanes of a state row's running softmax sum l, kept as a vector while an
// item runs (one horizontal sum per item, not per tile).
inline constexpr int kLsumLanes = 16;

// Workspace floats the kernel needs beside its outputs: a tile of scores
// per row of a row group (kTileMax apart), a tile of K and V rows converted to f32 (formats
// other than F32/F16 are dequantized a tile at a time, never the whole
// cache), a tile of rows untiled (where no tiled kernel reads the format),
// the int8 (or bf16) queries of up to `rows` state rows, and their sums l.
inline size_t work_floats(int dk, int dv, int rows) {
  return round_up_floats(size_t(kScoreRows) * kTileMax) + round_up_floats(size_t(kTile) * dk) +
         round_up_floats(size_t(kTile) * dv) + untiled_floats(dk, dv) +
         round_up_floats(size_t(rows) * int_query_floats(dk)) +
         round_up_floats(size_t(rows) * kLsumLanes);
}

// The lines of the next (tile, KV head) unit of an item, asked for one at a
// time from inside the current unit's loops (the tiled kernels step once
// per 64-byte load, so a unit's worth of lines is in flight one unit
// ahead). A burst of more prefetches than the core has fill buffers stalls
// it; one line per load keeps a steady number in flight. The lines go to L2
// (prefetcht1), not L1: a unit's K and V are 8-32 KB, so the next unit's
// lines asked into L1 pushed out the current unit's before they were read.
// On the 2-core Zen 4 VM at 32K (docs/long_context.md) this took the tiled
// q8_0 kernel from 18.3 to 14.4 ms a token over smollm2's heads and fp8
// from 14.7 to 11.1.
struct LineCursor {
  static constexpr int kMaxRanges = 8;
  const uint8_t* p[kMaxRanges];
  int lines[kMaxRanges];
  int n = 0, i = 0;
  // The current range's next line and its end. A kernel steps with a local
  // copy of the cursor (`LineCursor c = next; ... next = c;`), so these two
  // live in registers: stepping the arrays through memory made each step
  // wait on the last one's store (about 6 cycles a step, more than a tile's
  // integer dot products took at 15 rows).
  const uint8_t* cur = nullptr;
  const uint8_t* end = nullptr;

  void add(const uint8_t* ptr, size_t bytes) {
    if (bytes == 0 || n == kMaxRanges) return;
    p[n] = ptr;
    lines[n++] = static_cast<int>((bytes + 63) / 64);
  }
  // Outside any target namespace, so every kernel target may inline it.
  inline __attribute__((always_inline)) void step() {
    if (cur == end) {
      if (i >= n) return;
      cur = p[i];
      end = cur + size_t(lines[i]) * 64;
      ++i;
    }
    __builtin_prefetch(cur, 0, 2);
    cur += 64;
  }
};

void run_item(const Item& it);

}  // namespace sustain::attention::detail

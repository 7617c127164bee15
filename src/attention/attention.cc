// attend(): plans the work items (query blocks × KV heads × key chunks), runs
// them on the pool (each by the kernel of kernel.h), and merges the partial
// softmax states of split items (merge.h).
#include "attention/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/kernel.h"
#include "attention/merge.h"
#include "attention/window.h"
#include "base/batch_invariant.h"
#include "tensor/qtype.h"

namespace sustain::attention {
namespace {

using detail::State;
using detail::state_at;
using detail::state_floats;

int group_size(const AttnParams& p) {
  return p.n_head / p.n_head_kv;
}
// Consecutive queries per block: enough to fill kMaxBlockRows rows per KV
// head. (Scratch is sized for it in every mode; batch invariance may take
// fewer, block_limit.)
int block_queries(const AttnParams& p) {
  return std::max(1, detail::kMaxBlockRows / group_size(p));
}

// The most queries of one block in this call. Batch invariance: where a
// sliding window is, one, as a one-query call has it (a block's rows fold
// their own window starts); elsewhere a verify step's or a prefill chunk's
// consecutive queries of equal chunk size (invariant_chunk_tokens) share a
// block and read each K/V tile once. Every kernel computes each row of a
// block bit for bit as that row alone: each row its own scores, softmax
// and sums over the same key tiles; a key's score the same whatever the
// tile's length (the score kernels' last keys are a padded group, not a
// tail summed another way); keys past a row's length weigh exact zeros;
// and the integer V kernels bound a row's weights by the keys it weighs.
int block_limit(const AttnParams& p) {
  if (batch_invariant() && p.window > 0) return 1;
  return block_queries(p);
}

// Batch invariance: a query's keys are cut into at most kInvariantChunks
// chunks at multiples of invariant_chunk_tokens(its length), so how they
// are cut, and the order the partial states merge in, depend on the
// query's own length alone, not on the thread count: the same bits on one
// thread as on sixteen. (They were cut into split_count(1, threads)
// chunks, so --batch-invariant output changed with -t.)
constexpr int64_t kInvariantChunks = 8;
int64_t invariant_chunk_tokens(int64_t n_visible, int page_tokens) {
  int64_t c = page_tokens;
  while (c * kInvariantChunks < n_visible) c *= 2;
  return c;
}
// State rows of one item at most: a full block × every query head.
int item_rows(const AttnParams& p) {
  return block_queries(p) * p.n_head;
}

// The largest spread of window starts within a block that the fused kernel
// takes (its rows fold the keys between their own start and the block's
// latest one, fold_keys); a prefill or verify block of consecutive positions
// spreads by fewer than kMaxBlockRows.
constexpr int64_t kMaxFoldSpread = 2 * detail::kMaxBlockRows;

bool may_split(const AttnParams& p, int n_threads) {
  // Batch invariance: the same chunks on one thread as on many.
  if (batch_invariant()) return p.split_kv != SplitKv::kOff;
  return p.split_kv == SplitKv::kForce || (p.split_kv == SplitKv::kAuto && n_threads > 1);
}

// Key chunks per block when splitting: at least 4 items per thread, and a
// multiple of the thread count, so equal chunks end together.
int64_t split_count(int64_t blocks, int n_threads) {
  int64_t s = (4 * int64_t(n_threads) + blocks - 1) / blocks;
  while ((blocks * s) % n_threads != 0) ++s;
  return s;
}

struct Layout {
  size_t work_off = 0, work_floats = 0;        // per thread: kernel work + one state
  size_t partial_off = 0, partial_floats = 0;  // per split item: one state
  size_t blocks_off = 0;                       // int32 block starts [n_q + 1]
  size_t total = 0;
};

Layout layout(const AttnParams& p, int64_t n_q, int n_threads) {
  const int rows = item_rows(p);
  Layout L;
  L.work_floats =
      detail::work_floats(p.head_dim_k, p.head_dim_v, rows) + state_floats(rows, p.head_dim_v);
  L.partial_floats = state_floats(rows, p.head_dim_v);
  int64_t max_partials = 0;
  if (batch_invariant()) {
    if (may_split(p, n_threads)) max_partials = n_q * kInvariantChunks;
  } else if (may_split(p, n_threads)) {
    const int64_t max_blocks = std::min<int64_t>(n_q, 4 * int64_t(n_threads) - 1);
    for (int64_t blocks = 1; blocks <= max_blocks; ++blocks)
      max_partials = std::max(max_partials, blocks * split_count(blocks, n_threads));
  }
  L.work_off = 0;
  L.partial_off = L.work_off + sizeof(float) * L.work_floats * n_threads;
  L.blocks_off = L.partial_off + sizeof(float) * L.partial_floats * max_partials;
  L.total = L.blocks_off + (sizeof(int32_t) * (n_q + 1) + 63) / 64 * 64;
  return L;
}

// Everything an item needs, in one place so the pool's callable captures a
// single pointer (no allocation in std::function).
struct Run {
  const kv::KvCache* cache;
  int layer;
  const AttnParams* p;
  const std::vector<QueryInfo>* queries;
  const float* q;
  float* out;
  const int32_t* block_start;
  int64_t n_blocks;
  int64_t n_head_groups;  // KV heads split over items (short contexts only)
  int64_t n_split;        // key chunks per block (flash-decoding)
  int group;
  int page_tokens;
  float* work;
  size_t work_floats;
  float* partials;
  size_t partial_floats;
};

// Where an item's work lies: block, KV heads, key chunk.
struct Unit {
  int64_t blk, q0;
  int n_queries;
  int head_begin, head_end;
  int64_t chunk;
};
Unit unit_of(const Run& R, int64_t item) {
  Unit u;
  u.chunk = item % R.n_split;
  const int64_t rest = item / R.n_split;
  const int64_t hg = rest % R.n_head_groups;
  // Later blocks first: in a prefill chunk they see the most keys, and
  // starting the longest items first evens out the threads' finish times.
  u.blk = R.n_blocks - 1 - rest / R.n_head_groups;
  u.q0 = R.block_start[u.blk];
  u.n_queries = static_cast<int>(R.block_start[u.blk + 1] - u.q0);
  const int h = R.p->n_head_kv;
  u.head_begin = static_cast<int>(hg * h / R.n_head_groups);
  u.head_end = static_cast<int>((hg + 1) * h / R.n_head_groups);
  return u;
}

// Writes o / l of each row of a unit to `out` (zeros where nothing was visible).
void finalize_rows(const Run& R, const Unit& u, const float* o, const float* l) {
  const AttnParams& p = *R.p;
  int r = 0;
  for (int hk = u.head_begin; hk < u.head_end; ++hk) {
    for (int b = 0; b < u.n_queries; ++b) {
      for (int i = 0; i < R.group; ++i, ++r) {
        float* dst =
            R.out + (size_t(u.q0 + b) * p.n_head + size_t(hk) * R.group + i) * p.head_dim_v;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        const float* src = o + size_t(r) * p.head_dim_v;
        for (int c = 0; c < p.head_dim_v; ++c) dst[c] = src[c] * inv;
      }
    }
  }
}

// Folds into the state of a unit each row's keys below the fused kernel's
// range: query b's keys [window_first_b, min(k_start, n_visible_b)), one key
// at a time in f32 (the online-softmax update; the order of keys does not
// change the result). Each key is read once for the rows that see it. The
// kernel's range starts at the block's latest window start, rounded up to a
// 16-key group where K or V is tiled (run_one), so a row folds at most the
// block's spread of window starts plus 15 keys.
void fold_keys(const Run& R, const Unit& u, const State& st, int64_t k_start) {
  const AttnParams& p = *R.p;
  const kv::KvGeometry& g = R.cache->geometry();
  const QueryInfo* qi = R.queries->data() + u.q0;
  const DequantizeFn k_deq = qtype_traits(g.k_type).dequantize;
  const DequantizeFn v_deq = qtype_traits(g.v_type).dequantize;
  SUSTAIN_CHECK(k_deq != nullptr && v_deq != nullptr);
  int64_t k0 = k_start;
  for (int b = 0; b < u.n_queries; ++b) k0 = std::min(k0, qi[b].window_first(p.window));
  thread_local std::vector<float> kf, vf;
  thread_local std::vector<uint8_t> raw;
  kf.resize(size_t(p.head_dim_k));
  vf.resize(size_t(p.head_dim_v));
  raw.resize(std::max(g.k_row_bytes(), g.v_row_bytes()));
  const int head_rows = u.n_queries * R.group;
  for (int64_t key = k0; key < k_start; ++key) {
    for (int hk = u.head_begin; hk < u.head_end; ++hk) {
      bool loaded = false;
      for (int b = 0; b < u.n_queries; ++b) {
        if (key < qi[b].window_first(p.window) || key >= qi[b].n_visible) continue;
        if (!loaded) {
          R.cache->copy_k_row(*qi[b].pages, R.layer, hk, key, raw.data());
          k_deq(raw.data(), kf.data(), p.head_dim_k);
          R.cache->copy_v_row(*qi[b].pages, R.layer, hk, key, raw.data());
          v_deq(raw.data(), vf.data(), p.head_dim_v);
          loaded = true;
        }
        for (int i = 0; i < R.group; ++i) {
          const int r = (hk - u.head_begin) * head_rows + b * R.group + i;
          const float* q = R.q + size_t(u.q0 + b) * p.n_head * p.head_dim_k +
                           (size_t(hk) * R.group + i) * p.head_dim_k;
          float s = 0.0f;
          for (int c = 0; c < p.head_dim_k; ++c) s += q[c] * kf[c];
          s *= p.scale;
          float* o = st.o + size_t(r) * p.head_dim_v;
          if (s > st.m[r]) {
            const float keep = st.l[r] > 0.0f ? std::exp(st.m[r] - s) : 0.0f;
            for (int c = 0; c < p.head_dim_v; ++c) o[c] *= keep;
            st.l[r] *= keep;
            st.m[r] = s;
          }
          const float w = std::exp(s - st.m[r]);
          for (int c = 0; c < p.head_dim_v; ++c) o[c] += w * vf[c];
          st.l[r] += w;
        }
      }
    }
  }
}

void run_one(const Run& R, int64_t item, int thread) {
  const AttnParams& p = *R.p;
  const Unit u = unit_of(R, item);
  const QueryInfo* qi = R.queries->data() + u.q0;
  int64_t k_max = 0;
  for (int b = 0; b < u.n_queries; ++b) k_max = std::max(k_max, qi[b].n_visible);

  detail::Item it;
  it.cache = R.cache;
  it.layer = R.layer;
  it.head_begin = u.head_begin;
  it.head_end = u.head_end;
  it.pages = R.cache->page_ids(*qi->pages, R.layer);
  it.queries = qi;
  it.n_queries = u.n_queries;
  it.group = R.group;
  it.q = R.q + size_t(u.q0) * p.n_head * p.head_dim_k;
  it.q_stride = size_t(p.n_head) * p.head_dim_k;
  it.dk = p.head_dim_k;
  it.dv = p.head_dim_v;
  it.scale = p.scale;
  it.row_bounds = batch_invariant();
  float* work = R.work + R.work_floats * thread;
  it.work = work;
  const int max_rows = item_rows(p);
  State st = state_at(work + detail::work_floats(p.head_dim_k, p.head_dim_v, max_rows), max_rows,
                      p.head_dim_v);
  // Sliding window: the kernel's range starts at the block's latest window
  // start, which every row's window holds (with tiled K or V at the next
  // 16-key group, as the tiled kernels walk whole groups); each row's keys
  // before that are folded into the state afterwards (fold_keys). Without a
  // window every row starts at key 0.
  int64_t k_hi = 0;
  bool fold = false;
  for (int b = 0; b < u.n_queries; ++b) k_hi = std::max(k_hi, qi[b].window_first(p.window));
  const kv::KvGeometry& g = R.cache->geometry();
  const int64_t align = g.k_tiled() || g.v_tiled() ? kv::kTileKeys : 1;
  const int64_t k_start = std::min(k_max, (k_hi + align - 1) / align * align);
  for (int b = 0; b < u.n_queries; ++b)
    fold = fold || qi[b].window_first(p.window) < std::min(k_start, qi[b].n_visible);
  if (R.n_split == 1) {
    it.k_begin = k_start;
    it.k_end = k_max;
  } else if (batch_invariant()) {
    // Chunk c holds keys [c·C, (c + 1)·C) of the block's C (every query of
    // a block has the same), page-aligned, so a chunk never splits a tile;
    // the last ends at the block's longest query.
    const int64_t c = invariant_chunk_tokens(k_max, R.page_tokens);
    it.k_begin = std::clamp(u.chunk * c, k_start, k_max);
    it.k_end = u.chunk + 1 == R.n_split ? k_max : std::clamp((u.chunk + 1) * c, k_start, k_max);
    it.k_end = std::max(it.k_begin, it.k_end);
    st = state_at(R.partials + R.partial_floats * item, max_rows, p.head_dim_v);
    fold = fold && u.chunk == 0;
  } else {
    // Page-aligned chunks of [k_start, k_max) (the first starts at
    // k_start), so a chunk boundary never splits a tile.
    const int64_t first = k_start / R.page_tokens;
    const int64_t n_pages = (k_max + R.page_tokens - 1) / R.page_tokens - first;
    auto bound = [&](int64_t c) {
      return std::clamp((first + c * n_pages / R.n_split) * R.page_tokens, k_start, k_max);
    };
    it.k_begin = bound(u.chunk);
    it.k_end = std::max(it.k_begin, bound(u.chunk + 1));
    st = state_at(R.partials + R.partial_floats * item, max_rows, p.head_dim_v);
    fold = fold && u.chunk == 0;
  }
  it.o = st.o;
  it.m = st.m;
  it.l = st.l;
  detail::run_item(it);
  if (fold) fold_keys(R, u, st, k_start);
  if (R.n_split == 1) finalize_rows(R, u, st.o, st.l);
}

// Combines the n_split partial states of one block (split items cover all
// KV heads) in chunk order (merge.h).
void merge_block(const Run& R, int64_t unit) {
  const AttnParams& p = *R.p;
  const int max_rows = item_rows(p);
  const Unit u = unit_of(R, unit * R.n_split);
  const int rows = u.n_queries * p.n_head;
  // The first chunk's state accumulates the merge.
  State acc = state_at(R.partials + R.partial_floats * (unit * R.n_split), max_rows, p.head_dim_v);
  for (int64_t c = 1; c < R.n_split; ++c) {
    const State s =
        state_at(R.partials + R.partial_floats * (unit * R.n_split + c), max_rows, p.head_dim_v);
    detail::merge_state(acc, s, rows, p.head_dim_v);
  }
  finalize_rows(R, u, acc.o, acc.l);
}

}  // namespace

size_t attention_scratch_bytes(const AttnParams& p, int64_t n_q, int n_threads) {
  const size_t fused = layout(p, n_q, std::max(1, n_threads)).total;
  return std::max(fused, p.window > 0 ? window_scratch_bytes(p, n_threads) : 0);
}

void attend(const kv::KvCache& cache, int layer, const AttnParams& p,
            const std::vector<QueryInfo>& queries, const float* q, float* out, ThreadPool& pool,
            void* scratch) {
  const kv::KvGeometry& g = cache.geometry();
  SUSTAIN_CHECK(p.n_head_kv == g.n_head_kv && p.n_head % p.n_head_kv == 0);
  SUSTAIN_CHECK(p.head_dim_k == g.head_dim_k && p.head_dim_v == g.head_dim_v);
  SUSTAIN_CHECK(layer >= 0 && layer < g.n_layer);
  const int64_t n_q = static_cast<int64_t>(queries.size());
  if (n_q == 0) return;
  const int n_threads = pool.size();
  const Layout L = layout(p, n_q, n_threads);
  auto* base = static_cast<uint8_t*>(scratch);

  // Blocks of consecutive queries that share a page table.
  auto* block_start = reinterpret_cast<int32_t*>(base + L.blocks_off);
  const int max_block = block_limit(p);
  int64_t n_blocks = 0, k_max = 0;
  for (int64_t t = 0; t < n_q; ++t) {
    const QueryInfo& qi = queries[t];
    SUSTAIN_CHECK(qi.pages != nullptr && qi.n_visible >= 0 &&
                  qi.n_visible <= static_cast<int64_t>(qi.pages->pages.size()) * g.page_tokens);
    k_max = std::max(k_max, qi.n_visible);
    if (n_blocks == 0 || qi.pages != queries[block_start[n_blocks - 1]].pages ||
        t - block_start[n_blocks - 1] >= max_block ||
        (batch_invariant() &&
         invariant_chunk_tokens(qi.n_visible, g.page_tokens) !=
             invariant_chunk_tokens(queries[block_start[n_blocks - 1]].n_visible, g.page_tokens))) {
      block_start[n_blocks++] = static_cast<int32_t>(t);
    }
  }
  block_start[n_blocks] = static_cast<int32_t>(n_q);
  // Sliding window: a block whose queries' window starts lie far apart (not
  // consecutive positions) would fold many keys one at a time (fold_keys);
  // the window path of window.h takes such a batch instead.
  if (p.window > 0) {
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
      for (int32_t t = block_start[blk]; t < block_start[blk + 1]; ++t) {
        lo = std::min(lo, queries[size_t(t)].window_first(p.window));
        hi = std::max(hi, queries[size_t(t)].window_first(p.window));
      }
      if (hi - lo > kMaxFoldSpread) {
        attend_window(cache, layer, p, queries, q, out, pool, scratch);
        return;
      }
    }
  }

  // Long contexts with few blocks: split keys (all KV heads per item, so
  // each item streams its pages front to back). Otherwise, with few blocks,
  // split KV heads instead to give every thread work.
  const int64_t min_items = 4 * int64_t(n_threads);
  int64_t n_split = 1, n_head_groups = 1;
  if (batch_invariant()) {
    // Every block (one query) split as one decode row is, whatever else is
    // in the call and however long it is: the chunks follow the query's own
    // length (an empty chunk merges as nothing).
    if (may_split(p, n_threads)) n_split = kInvariantChunks;
  } else if (may_split(p, n_threads) && n_blocks < min_items &&
             (p.split_kv == SplitKv::kForce || k_max >= kSplitMinKeys)) {
    n_split = split_count(n_blocks, n_threads);
  } else if (n_blocks < min_items && n_threads > 1) {
    n_head_groups = std::min<int64_t>(p.n_head_kv, (min_items + n_blocks - 1) / n_blocks);
  }

  Run R{&cache,
        layer,
        &p,
        &queries,
        q,
        out,
        block_start,
        n_blocks,
        n_head_groups,
        n_split,
        group_size(p),
        g.page_tokens,
        reinterpret_cast<float*>(base + L.work_off),
        L.work_floats,
        reinterpret_cast<float*>(base + L.partial_off),
        L.partial_floats};
  const Run* rp = &R;
  const int64_t n_items = n_blocks * n_head_groups * n_split;
  pool.parallel_for_dynamic(size_t(n_items), 1, [rp](size_t b, size_t e, int t) {
    for (size_t i = b; i < e; ++i) run_one(*rp, static_cast<int64_t>(i), t);
  });
  if (n_split > 1) {
    for (int64_t unit = 0; unit < n_blocks; ++unit) merge_block(R, unit);
  }
}

}  // namespace sustain::attention

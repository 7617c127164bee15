// Paged KV cache (DESIGN.md §3): one pool of fixed-size pages allocated once
// from the context size (or a byte budget); each sequence owns a page table.
// A page holds `page_tokens` tokens of K and V for every layer; for one
// (page, layer) the rows are laid out [kv_head][K|V][token][head_dim], so
// attention for one (layer, head) scans contiguous rows. kv/ knows geometry,
// never the model (it takes a KvGeometry, not an ArchConfig).
//
// The pool is ordered [layer][page], not [page][layer]: a sequence whose
// pages have consecutive ids (what a fresh reservation gets) has each
// layer's K and V in one contiguous run, which attention streams at about
// 3x the bandwidth of 4 KiB blocks scattered a page apart (measured, see
// bench/bench_attention.cc). Rows are stored in k_type / v_type (quantized on
// append with the tensor/ quantizers), so head_dim must be a multiple of the
// format's block size. The 32-element block formats and FP8 are stored
// tiled (16 keys interleaved, kv/tiled.h) when `tiled` is set, page_tokens
// is a multiple of 16 and the head dim of 32: the same bytes per page, read
// 16 keys per vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kv/state_pool.h"
#include "kv/tiled.h"
#include "tensor/qtype.h"

namespace sustain::kv {

struct KvGeometry {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  QType k_type = QType::F16;
  QType v_type = QType::F16;
  int page_tokens = 32;
  // Store the block formats and FP8 in the tiled layout (kv/tiled.h) where
  // the head dim is a multiple of 32.
  bool tiled = true;
  // Hybrid models: the recurrent state each sequence carries beside its
  // pages (empty for attention-only models), and how many sequences can
  // hold one at a time.
  StateGeometry state;
  int32_t state_slots = 1;
  // Sliding-window layers (Gemma 3's local blocks): a nonzero
  // window_layers[l] marks KV layer l as attending to its last `window`
  // keys only (empty: every layer is global). Those layers live in a pool
  // of their own, whose pages a sequence holds only while its window still
  // reaches them (KvCache::reserve hands the others back). That pool is
  // sized for window_seqs sequences that each reserve at most window_step
  // tokens at a time, plus window_snapshots windows the prefix cache keeps
  // (PrefixCache::save_state).
  std::vector<uint8_t> window_layers;
  int32_t window = 0;
  int32_t window_seqs = 1;
  int32_t window_step = 512;
  int32_t window_snapshots = 0;

  // Whether K (or V) pages are stored tiled.
  bool k_tiled() const {
    return tiled && page_tokens % kTileKeys == 0 && head_dim_k % kTileElems == 0 && tileable(k_type);
  }
  bool v_tiled() const {
    return tiled && page_tokens % kTileKeys == 0 && head_dim_v % kTileElems == 0 && tileable(v_type);
  }
  // Bytes of K (or V) for one token of one head of one layer.
  size_t k_row_bytes() const { return qtype_row_bytes(k_type, head_dim_k); }
  size_t v_row_bytes() const { return qtype_row_bytes(v_type, head_dim_v); }
  // Whether KV layer l is a sliding-window layer kept in the window pool.
  bool is_window_layer(int l) const {
    return window > 0 && size_t(l) < window_layers.size() && window_layers[size_t(l)] != 0;
  }
  int n_window_layers() const {
    int n = 0;
    for (int l = 0; l < n_layer; ++l) n += is_window_layer(l);
    return n;
  }
  bool windowed() const { return n_window_layers() > 0; }
  // Bytes of one token in one layer, K plus V over the heads.
  size_t layer_bytes_per_token() const { return size_t(n_head_kv) * (k_row_bytes() + v_row_bytes()); }
  // Bytes per token of the main pool: every layer but the window layers.
  size_t bytes_per_token() const {
    return size_t(n_layer - n_window_layers()) * layer_bytes_per_token();
  }
  size_t page_bytes() const { return bytes_per_token() * page_tokens; }
  size_t window_page_bytes() const {
    return size_t(n_window_layers()) * layer_bytes_per_token() * page_tokens;
  }
  // Pages and bytes KvCache::create allocates for max_tokens tokens (the
  // pool is whole pages): what a memory plan must predict exactly.
  int64_t pool_pages(int64_t max_tokens) const {
    return (max_tokens + page_tokens - 1) / page_tokens;
  }
  // Window pages one sequence holds at most: those of the window before the
  // tokens it reserves, and of those tokens.
  int64_t window_pages_per_seq() const {
    return (int64_t{window} - 1 + window_step + page_tokens - 1) / page_tokens + 1;
  }
  // Window pages a prefix-cache snapshot holds: the window before a page
  // boundary.
  int64_t window_pages_per_snapshot() const {
    return (int64_t{window} - 1 + page_tokens - 1) / page_tokens;
  }
  // The window pool: no more pages than the main pool's (plus a partial one
  // a sequence), and no more than the sequences and snapshots can hold.
  int64_t window_pool_pages(int64_t max_tokens) const {
    if (!windowed()) return 0;
    return std::min(pool_pages(max_tokens) + window_seqs, window_seqs * window_pages_per_seq()) +
           int64_t{window_snapshots} * window_pages_per_snapshot();
  }
  size_t window_pool_bytes(int64_t max_tokens) const {
    return size_t(window_pool_pages(max_tokens)) * window_page_bytes();
  }
  // Both pools.
  size_t pool_bytes(int64_t max_tokens) const {
    return size_t(pool_pages(max_tokens)) * page_bytes() + window_pool_bytes(max_tokens);
  }
};

// kInvalidArgument naming the field when `g` cannot back a cache: a count
// out of range, or a type without a quantizer/dequantizer or whose block
// does not divide the head dimension.
Status validate(const KvGeometry& g);

// A sequence's pages in order; token i lives in pages[i / page_tokens] at
// slot i % page_tokens. n_tokens counts the tokens reserved so far (those
// already stored plus those the current step is about to store).
//
// Sliding-window layers (KvGeometry::window_layers) have pages of their own:
// window_pages[i] holds those layers' K/V of the same tokens as pages[i],
// -1 for i < window_from, pages the window no longer reaches and which went
// back to the pool. Both vectors have one entry per page of tokens.
struct PageTable {
  std::vector<int32_t> pages;
  int64_t n_tokens = 0;
  int32_t state = -1;  // hybrid models: the sequence's recurrent-state slot
  std::vector<int32_t> window_pages;
  int64_t window_from = 0;
};

// A page's contents copied to another page of the same pool (copy on
// write), as KvCache logs it for a cache that mirrors this one.
struct PageCopy {
  int32_t from = 0, to = 0;
  bool window = false;  // in the window pool
};

// Unmaps the page pool.
struct PoolDeleter {
  size_t bytes = 0;
  void operator()(uint8_t* p) const;
};

class KvCache {
 public:
  // Allocates ceil(max_tokens / page_tokens) pages once (touched up front, so
  // a cache that does not fit fails here, not mid-generation). Fails with
  // kOutOfMemory naming the bytes needed and the largest token count that
  // would fit when the size overflows or exceeds the memory available.
  static Expected<KvCache> create(const KvGeometry& g, int64_t max_tokens);

  const KvGeometry& geometry() const { return g_; }
  int32_t n_pages() const { return m_.n_pages; }
  int32_t n_free_pages() const { return static_cast<int32_t>(m_.free.size()); }
  size_t bytes_allocated() const { return bytes_; }
  // Tokens `t` can hold without another reserve().
  int64_t capacity(const PageTable& t) const {
    return static_cast<int64_t>(t.pages.size()) * g_.page_tokens;
  }
  // Holders of `page` (0 = free): sequences whose tables list it, plus the
  // prefix cache when it keeps the page for reuse.
  int32_t page_refcount(int32_t page) const { return m_.refcount[size_t(page)]; }
  // Adds / drops one holder of a page in use (prefix sharing). Dropping the
  // last holder returns the page to the pool.
  void retain(int32_t page);
  void unref(int32_t page);
  // Counts every change of a main-pool page's holders other than taking a
  // free page (retain, unref, release, truncation, copy on write): while it
  // stands still, so does every refcount of a page in use.
  uint64_t holder_changes() const { return m_.holder_changes; }
  // The window pool (KvGeometry::window_layers; 0 pages without windows).
  int32_t n_window_pages() const { return w_.n_pages; }
  int32_t n_free_window_pages() const { return static_cast<int32_t>(w_.free.size()); }
  int32_t window_page_refcount(int32_t page) const { return w_.refcount[size_t(page)]; }
  void retain_window(int32_t page);
  void unref_window(int32_t page);
  // The page ids attention reads for `layer` of `t`: t.pages, or
  // t.window_pages for a window layer.
  const int32_t* page_ids(const PageTable& t, int layer) const {
    return layer_window_[size_t(layer)] ? t.window_pages.data() : t.pages.data();
  }

  // Recurrent state of hybrid models (empty pool otherwise).
  StatePool& states() { return states_; }
  const StatePool& states() const { return states_; }
  bool has_state() const { return !g_.state.empty(); }

  // Makes room for `n` more tokens at the end of `t` (allocating pages as
  // needed) and adds n to t.n_tokens. With window layers it first hands back
  // the window pages the queries of those n tokens cannot reach (all of
  // whose tokens lie before t.n_tokens - window + 1). A hybrid model's sequence also gets a
  // recurrent-state slot on its first reserve (kOutOfMemory when none is
  // free). Copy on write: when the next token
  // would land in a partly filled page that another holder shares, that page
  // is first copied to a private one. Fails with kOutOfMemory, leaving `t`
  // unchanged, when the pool is out of pages.
  Status reserve(PageTable& t, int64_t n);
  // Pages reserve(t, n) would take from the pool (including a copy on write).
  int64_t pages_needed(const PageTable& t, int64_t n) const;
  // Shrinks `t` to its first n_tokens tokens (n_tokens <= t.n_tokens),
  // returning pages no longer needed: speculative-decoding rollback. With
  // window layers n_tokens may not go back past the tokens reserved last
  // (the window of the next query must still be held).
  void truncate(PageTable& t, int64_t n_tokens);
  // Whether truncate(t, n_tokens) may be called: always without window
  // layers; with them only while the window before n_tokens is still held.
  bool can_truncate(const PageTable& t, int64_t n_tokens) const {
    return n_tokens >= 0 && n_tokens <= t.n_tokens &&
           (w_.n_layer == 0 || n_tokens == 0 ||
            std::max<int64_t>(0, n_tokens - g_.window + 1) / g_.page_tokens >= t.window_from);
  }
  // Returns all pages of `t` (and its state slot) to the pool.
  void release(PageTable& t);

  // Copies the K / V row of (layer, head) for token slot `pos` of `t` (pos <
  // capacity reserved) to `out` as k_row_bytes (v_row_bytes) of the format's
  // row, whatever the page layout.
  void copy_k_row(const PageTable& t, int layer, int head, int64_t pos, uint8_t* out) const;
  void copy_v_row(const PageTable& t, int layer, int head, int64_t pos, uint8_t* out) const;

  // Start of the K block of (page, layer, head): page_tokens rows of
  // k_row_bytes, row after row or tiled (KvGeometry::k_tiled). `page` is an
  // id of page_ids(t, layer).
  const uint8_t* k_block(int32_t page, int layer, int head) const {
    return layer_base(page, layer) + head_bytes_ * head;
  }
  const uint8_t* v_block(int32_t page, int layer, int head) const {
    return layer_base(page, layer) + head_bytes_ * head + k_block_bytes_;
  }

  // Mirroring (engine over ranks, docs/split.md): another process holds a
  // cache of its own layers or heads with the same page ids, and runs the
  // same steps over the page tables this one hands out. The only contents
  // that change outside a forward step are copy-on-write copies: with
  // logging on, reserve() records them, take_copies() hands them over, and
  // the mirror applies each with apply_copy() before the step.
  // Hybrid models: the state pool's changes the same way (alloc's zeroed
  // slots, copies, and the prefix cache's snapshots, which it logs through
  // states().log()), in order, taken with take_state_ops.
  void log_copies(bool on) {
    log_copies_ = on;
    states_.set_logging(on);
  }
  std::vector<PageCopy> take_copies() { return std::exchange(copies_, {}); }
  std::vector<StateOp> take_state_ops() { return states_.take_log(); }
  // kInvalidArgument for a page id outside the pool.
  Status apply_copy(const PageCopy& c);

  // Quantizes and stores one token's K and V (n_head_kv * head_dim floats
  // each) for `layer` at position `pos` of `t`.
  void store(const PageTable& t, int layer, int64_t pos, const float* k, const float* v);

 private:
  // One pool of pages: the main one (every layer but the window layers) or
  // the window pool.
  struct Pool {
    int32_t n_pages = 0;
    int n_layer = 0;
    size_t layer_stride = 0;  // one layer of every page
    std::unique_ptr<uint8_t[], PoolDeleter> data;
    std::vector<int32_t> free;      // stack of free page ids
    std::vector<int32_t> refcount;  // per page
    uint64_t holder_changes = 0;    // see KvCache::holder_changes
  };
  const Pool& pool_of(int layer) const { return layer_window_[size_t(layer)] ? w_ : m_; }
  // Start of (page, layer): for each head, its K block then its V block.
  const uint8_t* layer_base(int32_t page, int layer) const {
    const Pool& p = pool_of(layer);
    return p.data.get() + layer_bytes_ * static_cast<size_t>(page) +
           p.layer_stride * static_cast<size_t>(layer_slot_[size_t(layer)]);
  }
  static void copy_page(Pool& p, size_t layer_bytes, int32_t from, int32_t to);
  // Copy on write of the partly filled last page of `pages` (t.n_tokens
  // into it) where another holder shares it.
  void unshare_last(Pool& p, std::vector<int32_t>& pages, int64_t n_tokens);
  static int32_t take(Pool& p);
  static void drop(Pool& p, int32_t page);
  // The (page, layer) of token `pos` of `t`, writable (our own pool).
  uint8_t* layer_of(const PageTable& t, int layer, int64_t pos) const;

  KvGeometry g_;
  size_t bytes_ = 0;
  size_t k_block_bytes_ = 0;  // page_tokens K rows of one (layer, head)
  size_t v_block_bytes_ = 0;
  size_t head_bytes_ = 0;    // one head's K block and V block
  size_t layer_bytes_ = 0;  // one (page, layer): every head's blocks
  Pool m_, w_;              // main and window pools
  std::vector<uint8_t> layer_window_;  // per KV layer: kept in w_
  std::vector<int> layer_slot_;        // per KV layer: its index within its pool
  std::vector<uint8_t> row_buf_;       // a quantized row on its way to a tiled block
  StatePool states_;
  bool log_copies_ = false;
  std::vector<PageCopy> copies_;
};

}  // namespace sustain::kv

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

#include <cstdint>
#include <memory>
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
  // Bytes per token over all layers and heads, K plus V.
  size_t bytes_per_token() const {
    return size_t(n_layer) * n_head_kv * (k_row_bytes() + v_row_bytes());
  }
  size_t page_bytes() const { return bytes_per_token() * page_tokens; }
  // Pages and bytes KvCache::create allocates for max_tokens tokens (the
  // pool is whole pages): what a memory plan must predict exactly.
  int64_t pool_pages(int64_t max_tokens) const {
    return (max_tokens + page_tokens - 1) / page_tokens;
  }
  size_t pool_bytes(int64_t max_tokens) const { return size_t(pool_pages(max_tokens)) * page_bytes(); }
};

// kInvalidArgument naming the field when `g` cannot back a cache: a count
// out of range, or a type without a quantizer/dequantizer or whose block
// does not divide the head dimension.
Status validate(const KvGeometry& g);

// A sequence's pages in order; token i lives in pages[i / page_tokens] at
// slot i % page_tokens. n_tokens counts the tokens reserved so far (those
// already stored plus those the current step is about to store).
struct PageTable {
  std::vector<int32_t> pages;
  int64_t n_tokens = 0;
  int32_t state = -1;  // hybrid models: the sequence's recurrent-state slot
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
  int32_t n_pages() const { return n_pages_; }
  int32_t n_free_pages() const { return static_cast<int32_t>(free_.size()); }
  size_t bytes_allocated() const { return bytes_; }
  // Tokens `t` can hold without another reserve().
  int64_t capacity(const PageTable& t) const {
    return static_cast<int64_t>(t.pages.size()) * g_.page_tokens;
  }
  // Holders of `page` (0 = free): sequences whose tables list it, plus the
  // prefix cache when it keeps the page for reuse.
  int32_t page_refcount(int32_t page) const { return refcount_[page]; }
  // Adds / drops one holder of a page in use (prefix sharing). Dropping the
  // last holder returns the page to the pool.
  void retain(int32_t page);
  void unref(int32_t page);

  // Recurrent state of hybrid models (empty pool otherwise).
  StatePool& states() { return states_; }
  const StatePool& states() const { return states_; }
  bool has_state() const { return !g_.state.empty(); }

  // Makes room for `n` more tokens at the end of `t` (allocating pages as
  // needed) and adds n to t.n_tokens. A hybrid model's sequence also gets a
  // recurrent-state slot on its first reserve (kOutOfMemory when none is
  // free). Copy on write: when the next token
  // would land in a partly filled page that another holder shares, that page
  // is first copied to a private one. Fails with kOutOfMemory, leaving `t`
  // unchanged, when the pool is out of pages.
  Status reserve(PageTable& t, int64_t n);
  // Pages reserve(t, n) would take from the pool (including a copy on write).
  int64_t pages_needed(const PageTable& t, int64_t n) const;
  // Shrinks `t` to its first n_tokens tokens (n_tokens <= t.n_tokens),
  // returning pages no longer needed: speculative-decoding rollback.
  void truncate(PageTable& t, int64_t n_tokens);
  // Returns all pages of `t` (and its state slot) to the pool.
  void release(PageTable& t);

  // Copies the K / V row of (layer, head) for token slot `pos` of `t` (pos <
  // capacity reserved) to `out` as k_row_bytes (v_row_bytes) of the format's
  // row, whatever the page layout.
  void copy_k_row(const PageTable& t, int layer, int head, int64_t pos, uint8_t* out) const;
  void copy_v_row(const PageTable& t, int layer, int head, int64_t pos, uint8_t* out) const;

  // Start of the K block of (page, layer, head): page_tokens rows of
  // k_row_bytes, row after row or tiled (KvGeometry::k_tiled).
  const uint8_t* k_block(int32_t page, int layer, int head) const {
    return layer_base(page, layer) + head_bytes_ * head;
  }
  const uint8_t* v_block(int32_t page, int layer, int head) const {
    return layer_base(page, layer) + head_bytes_ * head + k_block_bytes_;
  }

  // Quantizes and stores one token's K and V (n_head_kv * head_dim floats
  // each) for `layer` at position `pos` of `t`.
  void store(const PageTable& t, int layer, int64_t pos, const float* k, const float* v);

 private:
  // Start of (page, layer): for each head, its K block then its V block.
  const uint8_t* layer_base(int32_t page, int layer) const {
    return data_.get() + layer_bytes_ * static_cast<size_t>(page) +
           layer_stride_ * static_cast<size_t>(layer);
  }
  void copy_page(int32_t from, int32_t to);
  // The (page, layer) of token `pos` of `t`, writable (our own pool).
  uint8_t* layer_of(const PageTable& t, int layer, int64_t pos) const;

  KvGeometry g_;
  int32_t n_pages_ = 0;
  size_t bytes_ = 0;
  size_t k_block_bytes_ = 0;  // page_tokens K rows of one (layer, head)
  size_t v_block_bytes_ = 0;
  size_t head_bytes_ = 0;    // one head's K block and V block
  size_t layer_bytes_ = 0;   // one (page, layer): every head's blocks
  size_t layer_stride_ = 0;  // one layer of every page
  std::unique_ptr<uint8_t[], PoolDeleter> data_;
  std::vector<int32_t> free_;      // stack of free page ids
  std::vector<int32_t> refcount_;  // per page
  std::vector<uint8_t> row_buf_;   // a quantized row on its way to a tiled block
  StatePool states_;
};

}  // namespace sustain::kv

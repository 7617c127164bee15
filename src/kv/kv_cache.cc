#include "kv/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "base/checked_math.h"
#include "kernels/ops.h"

namespace sustain::kv {
namespace {

// MemAvailable from /proc/meminfo (what can be committed without swapping),
// falling back to free physical pages.
uint64_t available_memory_bytes() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (std::fgets(line, sizeof(line), f)) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        found = true;
        break;
      }
    }
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

Status out_of_memory(const KvGeometry& g, int64_t max_tokens, const char* bytes_needed,
                     const char* why) {
  const uint64_t avail = available_memory_bytes();
  const uint64_t fit = g.page_bytes() ? avail / g.page_bytes() * g.page_tokens : 0;
  return error(Code::kOutOfMemory,
               "KV cache for {} tokens needs {} bytes ({} per token, pages of {} tokens): {}; "
               "{} bytes are available, enough for at most {} tokens",
               max_tokens, bytes_needed, g.bytes_per_token(), g.page_tokens, why, avail, fit);
}

}  // namespace

Status validate(const KvGeometry& g) {
  // No KV layer at all only beside recurrent state: a pipeline stage of a
  // hybrid model that holds only DeltaNet blocks (its pages hold 0 bytes).
  if (g.n_layer < 0 || (g.n_layer == 0 && g.state.empty()))
    return error(Code::kInvalidArgument, "KV geometry: n_layer = {}", g.n_layer);
  if (g.n_head_kv <= 0)
    return error(Code::kInvalidArgument, "KV geometry: n_head_kv = {}", g.n_head_kv);
  if (g.page_tokens <= 0)
    return error(Code::kInvalidArgument, "KV geometry: page_tokens = {}", g.page_tokens);
  if (g.window < 0)
    return error(Code::kInvalidArgument, "KV geometry: window = {}", g.window);
  if (!g.window_layers.empty() && g.window_layers.size() != size_t(g.n_layer))
    return error(Code::kInvalidArgument,
                 "KV geometry: window_layers names {} layers, the cache has {}",
                 g.window_layers.size(), g.n_layer);
  if (g.windowed() && (g.window_seqs < 1 || g.window_step < 1 || g.window_snapshots < 0))
    return error(Code::kInvalidArgument,
                 "KV geometry: the window pool's sizing is out of range (window_seqs = {}, "
                 "window_step = {}, window_snapshots = {})",
                 g.window_seqs, g.window_step, g.window_snapshots);
  const struct {
    const char* what;
    QType type;
    int dim;
  } parts[] = {{"K", g.k_type, g.head_dim_k}, {"V", g.v_type, g.head_dim_v}};
  for (const auto& p : parts) {
    if (p.dim <= 0)
      return error(Code::kInvalidArgument, "KV geometry: {} head_dim = {}", p.what, p.dim);
    const QTypeTraits& tr = qtype_traits(p.type);
    if (!tr.quantize || !tr.dequantize)
      return error(Code::kUnsupported, "KV cache: {} type {} cannot be written and read", p.what,
                   tr.name);
    if (p.dim % tr.block_elems != 0)
      return error(
          Code::kInvalidArgument,
          "KV cache: {} type {} has blocks of {} elements, which do not divide head_dim {}", p.what,
          tr.name, tr.block_elems, p.dim);
  }
  return Status::ok();
}

void PoolDeleter::operator()(uint8_t* p) const {
  if (p) munmap(p, bytes);
}

namespace {

// Maps `bytes` of zeroed, committed memory (nullptr for 0 bytes).
Expected<uint8_t*> map_pool(const KvGeometry& g, int64_t max_tokens, uint64_t bytes) {
  if (bytes == 0) return static_cast<uint8_t*>(nullptr);
  const std::string need = std::to_string(bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return out_of_memory(g, max_tokens, need.c_str(), "mmap failed");
  // Attention reads pages scattered over the pool: huge pages cut TLB misses.
  madvise(p, bytes, MADV_HUGEPAGE);
  // Commit every page now, so running out of memory shows here and the
  // decode loop never page-faults.
  std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

}  // namespace

Expected<KvCache> KvCache::create(const KvGeometry& g, int64_t max_tokens) {
  SUSTAIN_TRY(validate(g));
  if (max_tokens <= 0)
    return error(Code::kInvalidArgument, "KV cache: max_tokens = {}", max_tokens);
  const uint64_t n_pages = (static_cast<uint64_t>(max_tokens) + g.page_tokens - 1) / g.page_tokens;
  const auto main_bytes = checked_mul(n_pages, g.page_bytes());
  const auto n_window = static_cast<uint64_t>(g.window_pool_pages(max_tokens));
  const auto window_bytes = checked_mul(n_window, g.window_page_bytes());
  const auto bytes = main_bytes && window_bytes ? checked_add(*main_bytes, *window_bytes)
                                                : std::optional<uint64_t>{};
  if (!bytes) return out_of_memory(g, max_tokens, "more than 2^64", "the size overflows");
  const std::string need = std::to_string(*bytes);
  if (std::max(n_pages, n_window) > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    return out_of_memory(g, max_tokens, need.c_str(), "more pages than int32 page ids can name");
  if (*bytes > available_memory_bytes())
    return out_of_memory(g, max_tokens, need.c_str(), "more than the memory available");

  KvCache c;
  c.g_ = g;
  c.bytes_ = *bytes;
  c.k_block_bytes_ = g.k_row_bytes() * g.page_tokens;
  c.v_block_bytes_ = g.v_row_bytes() * g.page_tokens;
  c.head_bytes_ = c.k_block_bytes_ + c.v_block_bytes_;
  c.layer_bytes_ = c.head_bytes_ * g.n_head_kv;
  c.layer_window_.assign(size_t(g.n_layer), 0);
  c.layer_slot_.assign(size_t(g.n_layer), 0);
  for (int l = 0; l < g.n_layer; ++l) {
    const bool w = g.is_window_layer(l);
    c.layer_window_[size_t(l)] = w;
    c.layer_slot_[size_t(l)] = w ? c.w_.n_layer++ : c.m_.n_layer++;
  }
  const struct {
    Pool* pool;
    uint64_t pages, bytes;
  } pools[] = {{&c.m_, n_pages, *main_bytes}, {&c.w_, n_window, *window_bytes}};
  for (const auto& [pool, pages, pool_bytes] : pools) {
    SUSTAIN_ASSIGN_OR_RETURN(uint8_t* p, map_pool(g, max_tokens, pool_bytes));
    pool->data = std::unique_ptr<uint8_t[], PoolDeleter>(p, PoolDeleter{pool_bytes});
    pool->n_pages = static_cast<int32_t>(pages);
    pool->layer_stride = c.layer_bytes_ * pages;
    pool->refcount.assign(pages, 0);
    // Pop order hands out low page ids first: a fresh sequence's pages ascend.
    pool->free.resize(pages);
    for (uint64_t i = 0; i < pages; ++i) pool->free[i] = static_cast<int32_t>(pages - 1 - i);
  }
  if (!g.state.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(c.states_, StatePool::create(g.state, std::max(1, g.state_slots)));
  }
  return c;
}

int64_t KvCache::pages_needed(const PageTable& t, int64_t n) const {
  const int64_t want = t.n_tokens + n;
  const int64_t pages = (want + g_.page_tokens - 1) / g_.page_tokens;
  int64_t more = std::max<int64_t>(0, pages - static_cast<int64_t>(t.pages.size()));
  if (n > 0 && t.n_tokens % g_.page_tokens != 0 &&
      m_.refcount[size_t(t.pages[static_cast<size_t>(t.n_tokens / g_.page_tokens)])] > 1)
    ++more;  // copy on write of the shared, partly filled page
  return more;
}

int32_t KvCache::take(Pool& p) {
  const int32_t page = p.free.back();
  p.free.pop_back();
  p.refcount[size_t(page)] = 1;
  return page;
}

void KvCache::drop(Pool& p, int32_t page) {
  SUSTAIN_CHECK(page >= 0 && page < p.n_pages && p.refcount[size_t(page)] > 0);
  ++p.holder_changes;
  if (--p.refcount[size_t(page)] == 0) p.free.push_back(page);
}

void KvCache::unshare_last(Pool& p, std::vector<int32_t>& pages, int64_t n_tokens) {
  if (n_tokens % g_.page_tokens == 0) return;
  int32_t& last = pages[static_cast<size_t>(n_tokens / g_.page_tokens)];
  if (p.refcount[size_t(last)] <= 1) return;
  const int32_t copy = take(p);
  copy_page(p, layer_bytes_, last, copy);
  if (log_copies_) copies_.push_back({last, copy, &p == &w_});
  --p.refcount[size_t(last)];
  ++p.holder_changes;
  last = copy;
}

Status KvCache::reserve(PageTable& t, int64_t n) {
  if (n < 0) return error(Code::kInvalidArgument, "KV reserve: n = {}", n);
  const int64_t more = pages_needed(t, n);
  if (more > static_cast<int64_t>(m_.free.size())) {
    return error(Code::kOutOfMemory,
                 "KV cache out of pages: {} more tokens need {} more pages of {} tokens, {} of {} "
                 "are free",
                 n, more, g_.page_tokens, m_.free.size(), m_.n_pages);
  }
  const int64_t want = t.n_tokens + n;
  const size_t pages = static_cast<size_t>((want + g_.page_tokens - 1) / g_.page_tokens);
  if (w_.n_layer > 0) {
    // The window pages the queries of these n tokens still reach start at
    // token t.n_tokens - window + 1; those wholly before it go back.
    const int64_t from = std::max<int64_t>(0, t.n_tokens - g_.window + 1) / g_.page_tokens;
    for (int64_t i = t.window_from; i < from && i < int64_t(t.window_pages.size()); ++i) {
      int32_t& wp = t.window_pages[size_t(i)];
      if (wp >= 0) drop(w_, wp);
      wp = -1;
    }
    t.window_from = std::max(t.window_from, from);
    int64_t w_more = std::max<int64_t>(0, int64_t(pages) - int64_t(t.window_pages.size()));
    if (n > 0 && t.n_tokens % g_.page_tokens != 0 &&
        w_.refcount[size_t(t.window_pages[size_t(t.n_tokens / g_.page_tokens)])] > 1)
      ++w_more;
    if (w_more > static_cast<int64_t>(w_.free.size()))
      return error(Code::kOutOfMemory,
                   "KV cache: the sliding-window layers' pool is out of pages: {} more tokens need "
                   "{} more pages, {} of {} are free (it is sized for {} sequences reserving up "
                   "to {} tokens at a time)",
                   n, w_more, w_.free.size(), w_.n_pages, g_.window_seqs, g_.window_step);
  }
  if (has_state() && t.state < 0) {
    t.state = states_.alloc();
    if (t.state < 0)
      return error(Code::kOutOfMemory,
                   "recurrent state: all {} slots are in use (one per running sequence)",
                   states_.n_slots());
  }
  if (n > 0) {
    unshare_last(m_, t.pages, t.n_tokens);
    if (w_.n_layer > 0) unshare_last(w_, t.window_pages, t.n_tokens);
  }
  while (t.pages.size() < pages) t.pages.push_back(take(m_));
  if (w_.n_layer > 0)
    while (t.window_pages.size() < pages) t.window_pages.push_back(take(w_));
  t.n_tokens = want;
  return Status::ok();
}

void KvCache::retain(int32_t page) {
  SUSTAIN_CHECK(page >= 0 && page < m_.n_pages && m_.refcount[size_t(page)] > 0);
  ++m_.refcount[size_t(page)];
  ++m_.holder_changes;
}

void KvCache::unref(int32_t page) {
  drop(m_, page);
}

void KvCache::retain_window(int32_t page) {
  SUSTAIN_CHECK(page >= 0 && page < w_.n_pages && w_.refcount[size_t(page)] > 0);
  ++w_.refcount[size_t(page)];
}

void KvCache::unref_window(int32_t page) {
  drop(w_, page);
}

void KvCache::copy_page(Pool& p, size_t layer_bytes, int32_t from, int32_t to) {
  for (int l = 0; l < p.n_layer; ++l)
    std::memcpy(p.data.get() + layer_bytes * size_t(to) + p.layer_stride * size_t(l),
                p.data.get() + layer_bytes * size_t(from) + p.layer_stride * size_t(l),
                layer_bytes);
}

Status KvCache::apply_copy(const PageCopy& c) {
  Pool& p = c.window ? w_ : m_;
  if (c.from < 0 || c.from >= p.n_pages || c.to < 0 || c.to >= p.n_pages)
    return error(Code::kInvalidArgument, "KV page copy {} -> {} outside a pool of {} pages", c.from,
                 c.to, p.n_pages);
  copy_page(p, layer_bytes_, c.from, c.to);
  return Status::ok();
}

void KvCache::truncate(PageTable& t, int64_t n_tokens) {
  // With window layers the next query's window must still be held.
  SUSTAIN_CHECK(can_truncate(t, n_tokens));
  const size_t keep = static_cast<size_t>((n_tokens + g_.page_tokens - 1) / g_.page_tokens);
  while (t.pages.size() > keep) {
    drop(m_, t.pages.back());
    t.pages.pop_back();
  }
  if (w_.n_layer > 0) {
    while (t.window_pages.size() > keep) {
      if (t.window_pages.back() >= 0) drop(w_, t.window_pages.back());
      t.window_pages.pop_back();
    }
    if (keep == 0) t.window_from = 0;
  }
  t.n_tokens = n_tokens;
}

void KvCache::release(PageTable& t) {
  truncate(t, 0);
  t.pages.clear();
  t.window_pages.clear();
  t.window_from = 0;
  if (t.state >= 0) states_.free(t.state);
  t.state = -1;
}

uint8_t* KvCache::layer_of(const PageTable& t, int layer, int64_t pos) const {
  SUSTAIN_CHECK(pos >= 0 && pos < capacity(t));
  SUSTAIN_CHECK(layer >= 0 && layer < g_.n_layer);
  const int32_t page = page_ids(t, layer)[static_cast<size_t>(pos / g_.page_tokens)];
  SUSTAIN_CHECK(page >= 0);  // a window layer's key the window no longer reaches
  // const_cast: writable blocks of our own pool, for store().
  return const_cast<uint8_t*>(layer_base(page, layer));
}

void KvCache::copy_k_row(const PageTable& t, int layer, int head, int64_t pos,
                         uint8_t* out) const {
  const uint8_t* block = layer_of(t, layer, pos) + head_bytes_ * head;
  const int s = static_cast<int>(pos % g_.page_tokens);
  if (g_.k_tiled())
    untile_row(g_.k_type, TileRole::kKey, g_.head_dim_k, block, s, out);
  else
    std::memcpy(out, block + g_.k_row_bytes() * s, g_.k_row_bytes());
}

void KvCache::copy_v_row(const PageTable& t, int layer, int head, int64_t pos,
                         uint8_t* out) const {
  const uint8_t* block = layer_of(t, layer, pos) + head_bytes_ * head + k_block_bytes_;
  const int s = static_cast<int>(pos % g_.page_tokens);
  if (g_.v_tiled())
    untile_row(g_.v_type, TileRole::kValue, g_.head_dim_v, block, s, out);
  else
    std::memcpy(out, block + g_.v_row_bytes() * s, g_.v_row_bytes());
}

namespace {

// The row quantizer of a K/V format: tensor/'s, or for f16 the vectorised
// conversion that writes the same bits (the append of every decode step).
QuantizeFn store_quantizer(QType t) {
  if (t == QType::F16) return &kernels::to_f16;
  return qtype_traits(t).quantize;
}

}  // namespace

void KvCache::store(const PageTable& t, int layer, int64_t pos, const float* k, const float* v) {
  const QuantizeFn qk = store_quantizer(g_.k_type);
  const QuantizeFn qv = store_quantizer(g_.v_type);
  uint8_t* base = layer_of(t, layer, pos);
  const int s = static_cast<int>(pos % g_.page_tokens);
  row_buf_.resize(std::max(g_.k_row_bytes(), g_.v_row_bytes()));
  for (int h = 0; h < g_.n_head_kv; ++h) {
    uint8_t* kb = base + head_bytes_ * h;
    uint8_t* vb = kb + k_block_bytes_;
    const float* kh = k + static_cast<size_t>(h) * g_.head_dim_k;
    const float* vh = v + static_cast<size_t>(h) * g_.head_dim_v;
    if (g_.k_tiled()) {
      qk(kh, row_buf_.data(), g_.head_dim_k);
      tile_row(g_.k_type, TileRole::kKey, g_.head_dim_k, row_buf_.data(), s, kb);
    } else {
      qk(kh, kb + g_.k_row_bytes() * s, g_.head_dim_k);
    }
    if (g_.v_tiled()) {
      qv(vh, row_buf_.data(), g_.head_dim_v);
      tile_row(g_.v_type, TileRole::kValue, g_.head_dim_v, row_buf_.data(), s, vb);
    } else {
      qv(vh, vb + g_.v_row_bytes() * s, g_.head_dim_v);
    }
  }
}

}  // namespace sustain::kv

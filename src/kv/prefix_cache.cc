#include "kv/prefix_cache.h"

#include <algorithm>
#include <tuple>

#include "base/fnv1a.h"

namespace sustain::kv {

PrefixCache::PrefixCache(KvCache& cache, int32_t state_snapshots) : cache_(cache) {
  if (cache.has_state() && state_snapshots > 0) {
    auto pool = StatePool::create(cache.geometry().state, state_snapshots);
    if (pool) snaps_ = std::move(pool).value();  // no memory: prefix reuse is off for hybrids
    max_snapshots_ = snaps_.n_slots();
  } else if (cache.n_window_pages() > 0) {
    // The window pool was sized for the snapshots (KvGeometry::window_snapshots).
    max_snapshots_ = std::min(std::max(0, state_snapshots), cache.geometry().window_snapshots);
  }
}

bool PrefixCache::needs_snapshot() const {
  return cache_.has_state() || cache_.n_window_pages() > 0;
}

void PrefixCache::drop_snapshot(Entry& e) {
  if (!e.has_snapshot) return;
  if (e.snapshot >= 0) snaps_.free(e.snapshot);
  for (int32_t p : e.window_pages)
    if (p >= 0) cache_.unref_window(p);
  e.window_pages.clear();
  e.snapshot = -1;
  e.has_snapshot = false;
  --n_snapshots_;
}

uint64_t PrefixCache::key_of(uint64_t parent, std::span<const int32_t> page_tokens) {
  // FNV-1a over the parent key and the token ids, then a final avalanche
  // (splitmix64) so nearby prefixes spread over the map. Collisions are ruled
  // out by comparing tokens and parent on lookup; 0 is reserved for "no parent".
  uint64_t h = fnv1a_u64(parent);
  for (int32_t t : page_tokens) h = fnv1a_u64(static_cast<uint32_t>(t), h);
  h += 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h ? h : 1;
}

const PrefixCache::Entry* PrefixCache::find(uint64_t parent, std::span<const int32_t> page_tokens,
                                            uint64_t* key) const {
  *key = key_of(parent, page_tokens);
  auto it = map_.find(*key);
  if (it == map_.end() || it->second.parent != parent ||
      !std::equal(page_tokens.begin(), page_tokens.end(), it->second.tokens.begin(),
                  it->second.tokens.end()))
    return nullptr;
  return &it->second;
}

int64_t PrefixCache::attach(PageTable& t, std::span<const int32_t> tokens, int64_t limit) {
  SUSTAIN_CHECK(t.pages.empty() && t.n_tokens == 0);
  const int pt = cache_.geometry().page_tokens;
  limit = std::min<int64_t>(limit, static_cast<int64_t>(tokens.size()));
  const uint64_t now = ++clock_;
  // The matched path; with recurrent state it is cut back to its deepest
  // snapshot.
  std::vector<uint64_t> path;
  uint64_t parent = 0;
  for (int64_t p = 0; (p + 1) * pt <= limit; ++p) {
    uint64_t key = 0;
    const Entry* e = find(parent, tokens.subspan(static_cast<size_t>(p * pt), pt), &key);
    if (!e) break;
    path.push_back(key);
    parent = key;
  }
  if (needs_snapshot()) {
    while (!path.empty() && !map_[path.back()].has_snapshot) path.pop_back();
    if (path.empty()) return 0;
    Entry& last = map_[path.back()];
    if (cache_.has_state()) {
      if (t.state < 0) t.state = cache_.states().alloc();
      if (t.state < 0) return 0;
      std::copy_n(snaps_.slot_data(last.snapshot), snaps_.slot_floats(),
                  cache_.states().slot_data(t.state));
      cache_.states().set_pos(t.state, static_cast<int64_t>(path.size()) * pt);
      cache_.states().log(
          {StateOp::kRestore, t.state, last.snapshot, static_cast<int64_t>(path.size()) * pt});
    }
    if (cache_.n_window_pages() > 0) {
      // The window's pages before the prefix's end, shared; those before
      // them are not held (-1).
      t.window_pages = last.window_pages;
      t.window_from = 0;
      while (t.window_from < int64_t(t.window_pages.size()) && t.window_pages[size_t(t.window_from)] < 0)
        ++t.window_from;
      for (int32_t p : t.window_pages)
        if (p >= 0) cache_.retain_window(p);
    }
    last.snapshot_use = now;
  }
  for (uint64_t key : path) {
    Entry& e = map_[key];
    e.last_use = now;
    cache_.retain(e.page);
    t.pages.push_back(e.page);
    t.n_tokens += pt;
  }
  return t.n_tokens;
}

bool PrefixCache::save_state(const PageTable& t, std::span<const int32_t> tokens,
                             int64_t n_computed) {
  const KvGeometry& g = cache_.geometry();
  const int pt = g.page_tokens;
  if (max_snapshots_ == 0 || n_computed <= 0 || n_computed % pt != 0 ||
      n_computed > t.n_tokens || n_computed > static_cast<int64_t>(tokens.size()))
    return false;
  if (cache_.has_state() && (t.state < 0 || cache_.states().pos(t.state) != n_computed))
    return false;
  // Sliding window: the pages of the window before n_computed (what the
  // next query reads) must still be held.
  const int64_t n_pages = n_computed / pt;
  const int64_t w_first = std::max<int64_t>(0, n_computed - g.window + 1) / pt;
  if (cache_.n_window_pages() > 0 &&
      (w_first < t.window_from || int64_t(t.window_pages.size()) < n_pages))
    return false;
  insert(t, tokens, n_computed);
  // The entry of the last page of the prefix (absent after a hash collision).
  uint64_t parent = 0, key = 0;
  Entry* last = nullptr;
  for (int64_t p = 0; (p + 1) * pt <= n_computed; ++p) {
    const Entry* e = find(parent, tokens.subspan(static_cast<size_t>(p * pt), pt), &key);
    if (!e) return false;
    last = &map_[key];
    parent = key;
  }
  if (!last) return false;
  const uint64_t now = ++clock_;
  if (!last->has_snapshot) {
    if (n_snapshots_ >= max_snapshots_) {
      // Replace the least recently used snapshot.
      Entry* oldest = nullptr;
      for (auto& [k, e] : map_)
        if (e.has_snapshot && (!oldest || e.snapshot_use < oldest->snapshot_use)) oldest = &e;
      if (!oldest) return false;
      drop_snapshot(*oldest);
    }
    if (cache_.has_state()) {
      last->snapshot = snaps_.alloc();
      if (last->snapshot < 0) return false;
    }
    if (cache_.n_window_pages() > 0) {
      last->window_pages.assign(size_t(n_pages), -1);
      for (int64_t i = w_first; i < n_pages; ++i) {
        last->window_pages[size_t(i)] = t.window_pages[size_t(i)];
        cache_.retain_window(t.window_pages[size_t(i)]);
      }
    }
    last->has_snapshot = true;
    ++n_snapshots_;
  }
  if (cache_.has_state()) {
    std::copy_n(cache_.states().slot_data(t.state), snaps_.slot_floats(),
                snaps_.slot_data(last->snapshot));
    snaps_.set_pos(last->snapshot, n_computed);
    cache_.states().log({StateOp::kSave, t.state, last->snapshot, n_computed});
  }
  last->snapshot_use = now;
  return true;
}

void PrefixCache::insert(const PageTable& t, std::span<const int32_t> tokens, int64_t n_computed) {
  const int pt = cache_.geometry().page_tokens;
  n_computed = std::min<int64_t>({n_computed, static_cast<int64_t>(tokens.size()), t.n_tokens});
  const uint64_t now = ++clock_;
  uint64_t parent = 0;
  for (int64_t p = 0; (p + 1) * pt <= n_computed; ++p) {
    auto block = tokens.subspan(static_cast<size_t>(p * pt), pt);
    const uint64_t key = key_of(parent, block);
    auto it = map_.find(key);
    if (it == map_.end()) {
      Entry e;
      e.page = t.pages[static_cast<size_t>(p)];
      e.parent = parent;
      e.depth = static_cast<int32_t>(p);
      e.last_use = now;
      e.tokens.assign(block.begin(), block.end());
      cache_.retain(e.page);
      map_.emplace(key, std::move(e));
    } else if (it->second.parent == parent &&
               std::equal(block.begin(), block.end(), it->second.tokens.begin(),
                          it->second.tokens.end())) {
      it->second.last_use = now;
    } else {
      break;  // a 64-bit collision with another prefix: keep the entry there, stop here
    }
    parent = key;
  }
}

int32_t PrefixCache::evictable() const {
  // Entries come and go with a retain or an unref of their page, so the
  // pair changes whenever the count can.
  if (cache_.holder_changes() == evictable_changes_ && map_.size() == evictable_entries_)
    return evictable_;
  int32_t n = 0;
  for (const auto& [k, e] : map_) n += cache_.page_refcount(e.page) == 1;
  evictable_ = n;
  evictable_changes_ = cache_.holder_changes();
  evictable_entries_ = map_.size();
  return n;
}

int32_t PrefixCache::evict(int32_t n_free) {
  if (cache_.n_free_pages() >= n_free) return 0;
  // Oldest first; among equally old entries the deepest first, so a prefix's
  // tail goes before its head (a head without its tail is still useful).
  std::vector<std::tuple<uint64_t, int32_t, uint64_t>> order;
  for (const auto& [k, e] : map_)
    if (cache_.page_refcount(e.page) == 1) order.emplace_back(e.last_use, -e.depth, k);
  std::sort(order.begin(), order.end());
  int32_t freed = 0;
  for (const auto& [use, neg_depth, key] : order) {
    if (cache_.n_free_pages() >= n_free) break;
    auto it = map_.find(key);
    drop_snapshot(it->second);
    cache_.unref(it->second.page);
    map_.erase(it);
    ++freed;
  }
  return freed;
}

void PrefixCache::clear() {
  for (auto& [k, e] : map_) {
    drop_snapshot(e);
    cache_.unref(e.page);
  }
  map_.clear();
}

}  // namespace sustain::kv

// Prefix reuse (DESIGN.md §3): full pages of computed tokens are indexed by a
// hash of the whole token prefix they end; a new sequence whose prompt starts
// with a cached prefix takes those pages (ref-counted, shared read-only) and
// computes only the rest. The cache keeps one reference on each page it
// indexes, so a page outlives the sequence that computed it; pages that only
// the cache holds are evicted least-recently-used when the pool needs room.
//
// Only whole pages are shared and sequences append only after them, so a
// shared page is never written; a sequence truncated back into a shared page
// gets a private copy from KvCache::reserve (copy on write).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"

namespace sustain::kv {

class PrefixCache {
 public:
  explicit PrefixCache(KvCache& cache) : cache_(cache) {}
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;
  ~PrefixCache() { clear(); }

  // For an empty table `t`: finds the longest cached page-aligned prefix of
  // tokens[0, limit), appends its pages to `t` (one more holder each) and
  // sets t.n_tokens to its length, which is returned (0 on a miss). Touches
  // the pages it returns (most recently used).
  int64_t attach(PageTable& t, std::span<const int32_t> tokens, int64_t limit);

  // Indexes the full pages of `t`, whose first n_computed positions hold the
  // K/V of tokens[0, n_computed). Pages already indexed under the same
  // prefix are only touched; a prefix indexed with a different page keeps
  // the page it has.
  void insert(const PageTable& t, std::span<const int32_t> tokens, int64_t n_computed);

  // Drops least-recently-used entries whose page only the cache holds (the
  // deepest first among equally recent ones) until `n_free` pages are free
  // in the pool or nothing more can be dropped. Returns the pages freed.
  int32_t evict(int32_t n_free);

  // Drops every entry (pages still used by sequences stay with them).
  void clear();

  int32_t entries() const { return static_cast<int32_t>(map_.size()); }
  // Entries whose page no sequence uses: what evict() can free.
  int32_t evictable() const;

 private:
  struct Entry {
    int32_t page = -1;
    uint64_t parent = 0;          // key of the previous page's prefix (0 for the first)
    int32_t depth = 0;            // page index in the sequence
    uint64_t last_use = 0;
    std::vector<int32_t> tokens;  // this page's tokens, to rule out hash collisions
  };
  static uint64_t key_of(uint64_t parent, std::span<const int32_t> page_tokens);
  const Entry* find(uint64_t parent, std::span<const int32_t> page_tokens, uint64_t* key) const;

  KvCache& cache_;
  std::unordered_map<uint64_t, Entry> map_;
  uint64_t clock_ = 0;
};

}  // namespace sustain::kv

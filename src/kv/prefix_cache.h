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
//
// Hybrid models (a cache with recurrent state): pages alone cannot resume a
// sequence, its DeltaNet state must be at the same position too. The cache
// then keeps snapshots of the state at page boundaries (save_state, in a
// pool of its own with a fixed number of slots, least recently used
// replaced), and attach() resumes only as deep as the deepest snapshot on
// the matched path, copying it into the sequence's own state slot.
//
// Sliding-window models the same way: the window layers' pages before a
// page boundary are all a sequence needs of them to go on from there, so a
// snapshot holds those pages (shared, ref-counted, not copied), and the
// window pool is sized for the snapshots (KvGeometry::window_snapshots).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"

namespace sustain::kv {

class PrefixCache {
 public:
  // `state_snapshots`: slots for recurrent-state snapshots (hybrid models;
  // ignored when the cache holds no state).
  explicit PrefixCache(KvCache& cache, int32_t state_snapshots = 0);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;
  ~PrefixCache() { clear(); }

  // For an empty table `t`: finds the longest cached page-aligned prefix of
  // tokens[0, limit), appends its pages to `t` (one more holder each) and
  // sets t.n_tokens to its length, which is returned (0 on a miss). Touches
  // the pages it returns (most recently used). With recurrent state the
  // prefix ends at a snapshot, which is copied into a state slot the table
  // takes from the cache's pool (no slot free: a miss).
  int64_t attach(PageTable& t, std::span<const int32_t> tokens, int64_t limit);

  // Hybrid models: indexes the pages of `t` up to n_computed (a multiple of
  // page_tokens, where t's state stands) as insert() does and snapshots t's
  // state there. Returns false when nothing was saved (not page-aligned, the
  // state elsewhere, no page or snapshot slot).
  bool save_state(const PageTable& t, std::span<const int32_t> tokens, int64_t n_computed);
  int32_t snapshots() const { return n_snapshots_; }
  // Snapshots it may keep (0: a model that needs them cannot resume).
  int32_t snapshot_capacity() const { return max_snapshots_; }
  // Whether a prefix resumes only where a snapshot was saved: hybrid
  // models (recurrent state) and sliding-window models (the window's pages).
  bool needs_snapshot() const;
  const StatePool& snapshot_pool() const { return snaps_; }

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
  // Entries whose page no sequence uses: what evict() can free. Counted
  // again only when the entries or a page's holders changed (the engine
  // asks every step; a steady decode step changes neither).
  int32_t evictable() const;

 private:
  struct Entry {
    int32_t page = -1;
    uint64_t parent = 0;          // key of the previous page's prefix (0 for the first)
    int32_t depth = 0;            // page index in the sequence
    uint64_t last_use = 0;
    std::vector<int32_t> tokens;  // this page's tokens, to rule out hash collisions
    bool has_snapshot = false;    // attach() may resume after this page
    int32_t snapshot = -1;        // recurrent state after this page (hybrid models)
    // Sliding-window models: the window pool's pages of every page up to
    // this one, -1 for those the window after it does not reach.
    std::vector<int32_t> window_pages;
    uint64_t snapshot_use = 0;
  };
  void drop_snapshot(Entry& e);
  static uint64_t key_of(uint64_t parent, std::span<const int32_t> page_tokens);
  const Entry* find(uint64_t parent, std::span<const int32_t> page_tokens, uint64_t* key) const;

  // evictable()'s last count, and the (holder_changes, entries) it was for.
  mutable int32_t evictable_ = 0;
  mutable uint64_t evictable_changes_ = ~uint64_t{0};
  mutable size_t evictable_entries_ = 0;
  KvCache& cache_;
  std::unordered_map<uint64_t, Entry> map_;
  uint64_t clock_ = 0;
  StatePool snaps_;
  int32_t n_snapshots_ = 0;
  int32_t max_snapshots_ = 0;
};

}  // namespace sustain::kv

// Prefix reuse: whole pages shared by hash of the prefix they end, reference
// counts, least-recently-used eviction and copy on write.
#include <gtest/gtest.h>

#include <numeric>

#include "kv/prefix_cache.h"

namespace sustain::kv {
namespace {

KvGeometry geometry() {
  KvGeometry g;
  g.n_layer = 2;
  g.n_head_kv = 1;
  g.head_dim_k = g.head_dim_v = 4;
  g.k_type = g.v_type = QType::F32;
  g.page_tokens = 4;
  return g;
}

std::vector<int32_t> seq(int n, int start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Fills positions [from, to) of `t` with K = V = token id (every layer).
void store_tokens(KvCache& c, const PageTable& t, const std::vector<int32_t>& tok, int64_t from,
                  int64_t to) {
  for (int64_t p = from; p < to; ++p) {
    const float x[4] = {float(tok[p]), float(tok[p]), float(tok[p]), float(tok[p])};
    for (int l = 0; l < 2; ++l) c.store(t, l, p, x, x);
  }
}

float k_at(const KvCache& c, const PageTable& t, int layer, int64_t pos) {
  float row[4];
  c.copy_k_row(t, layer, 0, pos, reinterpret_cast<uint8_t*>(row));
  return row[0];
}

TEST(PrefixCache, SecondSequenceSharesWholePagesOfTheCommonPrefix) {
  auto c = KvCache::create(geometry(), 64);
  ASSERT_TRUE(c.has_value());
  PrefixCache pc(*c);
  auto a = seq(10);  // pages [0..4) [4..8) and a partial [8..10)
  PageTable ta;
  ASSERT_TRUE(c->reserve(ta, 10).is_ok());
  store_tokens(*c, ta, a, 0, 10);
  pc.insert(ta, a, 10);
  EXPECT_EQ(pc.entries(), 2);  // only full pages are indexed

  auto b = seq(9);  // same first 9 tokens, then different
  b.push_back(99);
  b.push_back(98);
  PageTable tb;
  // The last token is always computed (its logits are needed): limit n - 1.
  EXPECT_EQ(pc.attach(tb, b, static_cast<int64_t>(b.size()) - 1), 8);
  EXPECT_EQ(tb.pages[0], ta.pages[0]);
  EXPECT_EQ(tb.pages[1], ta.pages[1]);
  EXPECT_EQ(c->page_refcount(ta.pages[0]), 3);  // a, b, the cache
  EXPECT_EQ(k_at(*c, tb, 1, 5), 5.0f);
  // A different first page shares nothing, even with identical later pages.
  auto d = seq(12);
  d[0] = 77;
  PageTable td;
  EXPECT_EQ(pc.attach(td, d, 11), 0);
  EXPECT_TRUE(td.pages.empty());

  // evictable() is remembered between calls: every change of a page's
  // holders must show, with the entries unchanged.
  EXPECT_EQ(pc.evictable(), 0);
  c->release(ta);
  EXPECT_EQ(pc.evictable(), 0);  // b still holds both pages
  c->release(tb);
  EXPECT_EQ(pc.evictable(), 2);
  EXPECT_EQ(c->n_free_pages(), c->n_pages() - 2);  // the cache keeps them
  c->retain(ta.pages[1]);
  EXPECT_EQ(pc.evictable(), 1);
  c->unref(ta.pages[1]);
  EXPECT_EQ(pc.evictable(), 2);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedFirstAndNeverAPageInUse) {
  auto c = KvCache::create(geometry(), 32);  // 8 pages
  ASSERT_TRUE(c.has_value());
  PrefixCache pc(*c);
  std::vector<PageTable> t(3);
  std::vector<std::vector<int32_t>> toks = {seq(8, 0), seq(8, 100), seq(8, 200)};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c->reserve(t[i], 8).is_ok());
    pc.insert(t[i], toks[i], 8);
  }
  c->release(t[0]);
  c->release(t[1]);  // t[2] stays in use
  // Touch prefix 0: prefix 1 is now the least recently used.
  PageTable probe;
  EXPECT_EQ(pc.attach(probe, toks[0], 8), 8);
  c->release(probe);
  EXPECT_EQ(c->n_free_pages(), 2);
  EXPECT_EQ(pc.evict(4), 2);  // frees prefix 1's two pages
  EXPECT_EQ(c->n_free_pages(), 4);
  PageTable p1, p0;
  EXPECT_EQ(pc.attach(p1, toks[1], 8), 0);
  EXPECT_EQ(pc.attach(p0, toks[0], 8), 8);
  c->release(p0);
  // Asking for more than can be freed frees what is evictable, not t[2].
  EXPECT_EQ(pc.evict(100), 2);
  EXPECT_EQ(c->page_refcount(t[2].pages[0]), 2);
  EXPECT_EQ(c->n_free_pages(), 6);
}

TEST(PrefixCache, TruncatingIntoASharedPageCopiesItBeforeWriting) {
  auto c = KvCache::create(geometry(), 32);
  ASSERT_TRUE(c.has_value());
  PrefixCache pc(*c);
  auto a = seq(8);
  PageTable ta;
  ASSERT_TRUE(c->reserve(ta, 8).is_ok());
  store_tokens(*c, ta, a, 0, 8);
  pc.insert(ta, a, 8);
  PageTable tb;
  ASSERT_EQ(pc.attach(tb, a, 8), 8);
  c->truncate(tb, 6);  // back into the shared second page
  EXPECT_EQ(c->pages_needed(tb, 1), 1);
  const int32_t shared = tb.pages[1];
  ASSERT_TRUE(c->reserve(tb, 1).is_ok());
  EXPECT_NE(tb.pages[1], shared) << "a shared page is copied before it is written";
  EXPECT_EQ(k_at(*c, tb, 1, 5), 5.0f);  // the copy has the shared rows
  auto b = a;
  b[6] = 42;
  store_tokens(*c, tb, b, 6, 7);
  EXPECT_EQ(k_at(*c, tb, 0, 6), 42.0f);
  EXPECT_EQ(k_at(*c, ta, 0, 6), 6.0f);  // the original is untouched
}

}  // namespace
}  // namespace sustain::kv

namespace sustain::kv {
namespace {

// Layer 1 of 2 slides over a window of 6 tokens (pages of 4).
KvGeometry window_geometry() {
  KvGeometry g = geometry();
  g.window = 6;
  g.window_layers = {0, 1};
  g.window_seqs = 2;
  g.window_step = 4;
  g.window_snapshots = 2;
  return g;
}

// Feeds tokens [t.n_tokens, to) in steps of up to 4, as the engine does.
void feed(KvCache& c, PageTable& t, const std::vector<int32_t>& tok, int64_t to) {
  while (t.n_tokens < to) {
    const int64_t from = t.n_tokens, n = std::min<int64_t>(4, to - from);
    ASSERT_TRUE(c.reserve(t, n).is_ok());
    store_tokens(c, t, tok, from, from + n);
  }
}

// A sliding-window prefix resumes only where a snapshot holds its window's
// pages; the sequence that resumes reads the window's keys, and nothing
// leaks once the sequences and the cache let go.
TEST(PrefixCacheWindow, ResumesAtASnapshotWithTheWindowsPages) {
  auto c = KvCache::create(window_geometry(), 64);
  ASSERT_TRUE(c);
  PrefixCache pc(*c, 2);
  EXPECT_TRUE(pc.needs_snapshot());
  EXPECT_EQ(pc.snapshot_capacity(), 2);
  const auto a = seq(30);
  PageTable ta;
  feed(*c, ta, a, 20);
  // The last step reserved 16..19, whose first query reads keys from
  // 16 - 6 + 1 = 11: the window pages before page 2 (8..11) went back.
  EXPECT_EQ(ta.window_from, 2);
  EXPECT_EQ(ta.window_pages[1], -1);
  EXPECT_GE(ta.window_pages[2], 0);
  // Without a snapshot nothing resumes, though the pages are indexed.
  pc.insert(ta, a, 20);
  PageTable tb;
  EXPECT_EQ(pc.attach(tb, a, 29), 0);
  c->release(tb);
  // A snapshot at 20 needs the pages of tokens 15..19: pages 3 and 4.
  ASSERT_TRUE(pc.save_state(ta, a, 20));
  EXPECT_EQ(pc.snapshots(), 1);
  EXPECT_EQ(c->window_page_refcount(ta.window_pages[3]), 2);
  EXPECT_EQ(c->window_page_refcount(ta.window_pages[4]), 2);
  // Not at 12: its window's page 1 is gone.
  EXPECT_FALSE(pc.save_state(ta, a, 12));
  ASSERT_EQ(pc.attach(tb, a, 29), 20);
  EXPECT_EQ(tb.window_from, 3);
  ASSERT_EQ(tb.window_pages.size(), 5u);
  EXPECT_EQ(tb.window_pages[2], -1);
  EXPECT_EQ(tb.window_pages[3], ta.window_pages[3]);
  // b goes on from 20: the first step's window reads the snapshot's keys
  // 15..19, the next steps their own.
  ASSERT_TRUE(c->reserve(tb, 4).is_ok());
  for (int64_t p = 15; p < 20; ++p) EXPECT_EQ(k_at(*c, tb, 1, p), float(p)) << p;
  store_tokens(*c, tb, a, 20, 24);
  feed(*c, tb, a, 26);
  for (int64_t p = 24 - 5; p < 26; ++p) EXPECT_EQ(k_at(*c, tb, 1, p), float(p)) << p;
  EXPECT_EQ(k_at(*c, tb, 0, 0), 0.0f);
  c->release(ta);
  c->release(tb);
  pc.clear();
  EXPECT_EQ(c->n_free_window_pages(), c->n_window_pages());
  EXPECT_EQ(c->n_free_pages(), c->n_pages());
}

// Snapshots beyond the capacity replace the least recently used one, whose
// window pages go back.
TEST(PrefixCacheWindow, SnapshotsBeyondTheCapacityReplaceTheOldest) {
  auto c = KvCache::create(window_geometry(), 64);
  ASSERT_TRUE(c);
  PrefixCache pc(*c, 1);
  const auto a = seq(12), b = seq(12, 100);
  PageTable ta, tb;
  feed(*c, ta, a, 8);
  feed(*c, tb, b, 8);
  ASSERT_TRUE(pc.save_state(ta, a, 8));
  ASSERT_TRUE(pc.save_state(tb, b, 8));
  EXPECT_EQ(pc.snapshots(), 1);
  c->release(ta);
  c->release(tb);
  PageTable x, y;
  EXPECT_EQ(pc.attach(x, a, 11), 0);
  EXPECT_EQ(pc.attach(y, b, 11), 8);
  c->release(x);
  c->release(y);
  pc.clear();
  EXPECT_EQ(c->n_free_window_pages(), c->n_window_pages());
}

}  // namespace
}  // namespace sustain::kv

namespace sustain::kv {
namespace {

// A hybrid model's cache that logs its recurrent-state changes (an engine
// over ranks: rank 0 hands out the slots), replayed on a mirror with its
// own snapshot pool: a slot handed out zeroed, a snapshot saved at a page
// boundary and restored into another sequence's slot, a slot copied. The
// mirror then holds the same state at the same position in every slot.
TEST(PrefixCacheState, LoggedStateOpsReplayOnAMirror) {
  KvGeometry g = geometry();
  g.state = {1, 2, 3, 1, 2, 2};  // one recurrent layer: conv 2×3, one 2×2 matrix
  g.state_slots = 4;
  auto c = KvCache::create(g, 64);
  auto mirror = KvCache::create(g, 64);
  auto snaps = StatePool::create(g.state, 2);
  ASSERT_TRUE(c && mirror && snaps);
  c->log_copies(true);
  PrefixCache pc(*c, 2);
  auto replay = [&] {
    for (const StateOp& op : c->take_state_ops())
      ASSERT_TRUE(mirror->states().apply(op, &*snaps).is_ok());
  };
  // Sequence a: its slot, handed out zeroed; "a forward" writes the same
  // state on both sides (each rank computes its own layers' state).
  const auto tok = seq(12);
  PageTable a;
  ASSERT_TRUE(c->reserve(a, 8).is_ok());
  ASSERT_GE(a.state, 0);
  std::fill_n(mirror->states().slot_data(a.state), mirror->states().slot_floats(), 9.0f);
  replay();  // the zeroing of a's slot reaches the mirror
  EXPECT_EQ(mirror->states().slot_data(a.state)[0], 0.0f);
  for (StatePool* s : {&c->states(), &mirror->states()}) {
    for (size_t i = 0; i < s->slot_floats(); ++i) s->slot_data(a.state)[i] = float(i + 1);
    s->set_pos(a.state, 8);
  }
  store_tokens(*c, a, tok, 0, 8);
  ASSERT_TRUE(pc.save_state(a, tok, 8));
  // Replayed before the next forward, as the engine sends them with the
  // next step: the snapshot is taken of the state at the page boundary.
  replay();
  // The next forward moves the state on, on both sides.
  for (StatePool* s : {&c->states(), &mirror->states()}) {
    s->slot_data(a.state)[0] = -5.0f;
    s->set_pos(a.state, 9);
  }
  // Sequence b resumes from the snapshot at position 8.
  PageTable b;
  EXPECT_EQ(pc.attach(b, tok, 11), 8);
  ASSERT_GE(b.state, 0);
  ASSERT_NE(b.state, a.state);
  const int32_t spare = c->states().alloc();
  c->states().copy(b.state, spare);
  replay();
  for (int32_t s : {a.state, b.state, spare}) {
    EXPECT_EQ(mirror->states().pos(s), c->states().pos(s)) << "slot " << s;
    for (size_t i = 0; i < c->states().slot_floats(); ++i)
      ASSERT_EQ(mirror->states().slot_data(s)[i], c->states().slot_data(s)[i])
          << "slot " << s << " float " << i;
  }
  EXPECT_EQ(mirror->states().slot_data(b.state)[0], 1.0f);  // the snapshot's, not a's -5
  EXPECT_EQ(mirror->states().pos(b.state), 8);
  EXPECT_FALSE(mirror->states().apply({StateOp::kRestore, 0, 7, 0}, &*snaps).is_ok());
  EXPECT_FALSE(mirror->states().apply({StateOp::kSave, 0, 0, 0}, nullptr).is_ok());
  EXPECT_FALSE(mirror->states().apply({StateOp::kZero, 99, 0, 0}, &*snaps).is_ok());
  c->release(a);
  c->release(b);
}

}  // namespace
}  // namespace sustain::kv

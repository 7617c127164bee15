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

  c->release(ta);
  c->release(tb);
  EXPECT_EQ(pc.evictable(), 2);
  EXPECT_EQ(c->n_free_pages(), c->n_pages() - 2);  // the cache keeps them
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

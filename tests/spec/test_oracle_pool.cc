// The measurement oracle (drafts a recorded greedy continuation, each token
// wrong with probability 1 - alpha) and the n-gram pool all requests share.
#include <gtest/gtest.h>

#include <vector>

#include "base/splitmix.h"
#include "spec/ngram.h"
#include "spec/ngram_pool.h"
#include "spec/oracle.h"

namespace sustain::spec {
namespace {

sampling::SamplerConfig greedy() {
  sampling::SamplerConfig s;
  s.temperature = 0.0f;
  return s;
}

std::vector<int32_t> draft(Proposer& p, uint64_t seq, const std::vector<int32_t>& tokens, int k) {
  Draft d;
  Job j;
  j.seq = seq;
  j.tokens = tokens;
  j.k = k;
  j.out = &d;
  p.propose_batch(std::span<Job>(&j, 1));
  return d.tokens;
}

TEST(Oracle, DraftsTheRecordedContinuation) {
  OracleProposer o(1.0, 1000);
  const std::vector<int32_t> full = {5, 6, 7, 8, 9, 10, 11, 12};
  // Nothing recorded yet: no draft.
  EXPECT_TRUE(draft(o, 1, {5, 6, 7}, 4).empty());
  o.completed(full, greedy());
  EXPECT_EQ(draft(o, 1, {5, 6, 7}, 4), (std::vector<int32_t>{8, 9, 10, 11}));
  // The sequence moves on (its match is kept and checked on the new tokens).
  EXPECT_EQ(draft(o, 1, {5, 6, 7, 8, 9, 10}, 4), (std::vector<int32_t>{11, 12}));
  // At the end of the recording: nothing more.
  EXPECT_TRUE(draft(o, 1, full, 4).empty());
  // A sequence that left the recording's path gets nothing.
  EXPECT_TRUE(draft(o, 2, {5, 6, 7, 99}, 4).empty());
  // Sampled (temperature > 0) answers are not the greedy path: not recorded.
  sampling::SamplerConfig hot;
  hot.temperature = 0.8f;
  o.completed(std::vector<int32_t>{40, 41, 42, 43}, hot);
  EXPECT_TRUE(draft(o, 3, {40, 41}, 2).empty());
  EXPECT_EQ(o.recordings(), 1u);
}

TEST(Oracle, PromptsLongerThanTheKeyAndAmbiguousPrefixes) {
  OracleProposer o(1.0, 1000);
  std::vector<int32_t> a(100), b(100);
  for (int i = 0; i < 100; ++i) a[i] = b[i] = i;
  b[60] = 999;  // b leaves a at position 60
  o.completed(a, greedy());
  o.completed(b, greedy());
  std::vector<int32_t> pa(a.begin(), a.begin() + 61);
  std::vector<int32_t> pb(b.begin(), b.begin() + 61);
  EXPECT_EQ(draft(o, 1, pa, 2), (std::vector<int32_t>{61, 62}));
  EXPECT_EQ(draft(o, 2, pb, 2), (std::vector<int32_t>{61, 62}));
  // Before the fork both match; the newest recording is taken.
  std::vector<int32_t> common(a.begin(), a.begin() + 60);
  EXPECT_EQ(draft(o, 3, common, 1), (std::vector<int32_t>{999}));
}

TEST(Oracle, WrongTokensAtTheRequestedRate) {
  const int n = 20000;
  std::vector<int32_t> full(n);
  SplitMix64 g{3};
  for (auto& t : full) t = static_cast<int32_t>(g.below(50));
  for (double alpha : {0.0, 0.3, 0.8, 1.0}) {
    OracleProposer o(alpha, 50);
    o.completed(full, greedy());
    std::vector<int32_t> prefix(full.begin(), full.begin() + 1);
    int right = 0, total = 0;
    for (int start = 1; start + 16 < n; start += 16) {
      prefix.assign(full.begin(), full.begin() + start);
      const auto d = draft(o, 1, prefix, 16);
      ASSERT_EQ(d.size(), 16u);
      for (size_t i = 0; i < d.size(); ++i) {
        ASSERT_GE(d[i], 0);
        ASSERT_LT(d[i], 50);
        right += d[i] == full[start + i];
        ++total;
      }
    }
    EXPECT_NEAR(static_cast<double>(right) / total, alpha, 0.02) << "alpha " << alpha;
  }
}

TEST(Oracle, AlphaIsParsedAndChecked) {
  auto a = parse_oracle_alpha("oracle:0.8");
  ASSERT_TRUE(a.has_value());
  EXPECT_DOUBLE_EQ(*a, 0.8);
  for (const char* bad :
       {"oracle", "oracle:", "oracle:1.5", "oracle:-0.1", "oracle:x", "oracle:0.5z"})
    EXPECT_FALSE(parse_oracle_alpha(bad).has_value()) << bad;
  Config c;
  c.types = {"ngram", "oracle:0.25"};
  EXPECT_TRUE(validate(c).is_ok());
  EXPECT_TRUE(c.uses("oracle"));
  EXPECT_FALSE(c.uses("oracle:0.2"));
  EXPECT_EQ(c.describe(), "ngram,oracle:0.25");
  auto made = make_proposers(c, 100);
  ASSERT_TRUE(made.has_value());
  ASSERT_EQ(made->size(), 2u);
  EXPECT_STREQ((*made)[1]->name(), "oracle");
  EXPECT_NE(parse_types("oracle:2").status().message().find("oracle:2"), std::string::npos);
  c.ngram_pool_mb = -1;
  EXPECT_NE(validate(c).message().find("--spec-ngram-pool-mb"), std::string::npos);
}

TEST(NgramPool, ChainsWhatOtherRequestsSaw) {
  NgramPool pool(1 << 16, 2, 4);
  const std::vector<int32_t> doc = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  pool.insert(doc);
  std::vector<int32_t> out;
  // Another request ends in "3 4": the pool chains 5 6 7 ...
  EXPECT_EQ(pool.propose(std::vector<int32_t>{42, 43, 3, 4}, 4, out), 4);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 6, 7, 8}));
  out.clear();
  // Unigrams are not stored (n_min 2): a lone "4" proposes nothing.
  EXPECT_EQ(pool.propose(std::vector<int32_t>{42, 4}, 4, out), 0);
  // Negative ids (image positions) are never stored or proposed.
  pool.insert(std::vector<int32_t>{20, 21, -5, 22});
  EXPECT_EQ(pool.propose(std::vector<int32_t>{20, 21}, 2, out), 0);
  EXPECT_EQ(pool.bytes(), size_t{1} << 16);
}

TEST(NgramPool, MemoryIsFixedWhateverTheTraffic) {
  NgramPool pool(4096, 2, 4);  // 512 slots
  SplitMix64 g{11};
  std::vector<int32_t> t(20000);
  for (auto& x : t) x = static_cast<int32_t>(g.below(30000));
  pool.insert(t);
  EXPECT_EQ(pool.bytes(), 4096u);
  // The newest n-grams survive in a full table.
  std::vector<int32_t> out;
  std::vector<int32_t> tail(t.end() - 5, t.end() - 1);
  EXPECT_EQ(pool.propose(tail, 1, out), 1);
  EXPECT_EQ(out[0], t.back());
}

TEST(NgramPool, TheNgramProposerFallsBackToIt) {
  NgramProposer p(4, 1 << 16);
  const std::vector<int32_t> first = {7, 8, 9, 10, 11, 12, 13};
  // Request 2 repeats request 1's document; its own tokens hold no match.
  std::vector<int32_t> out;
  p.propose(std::vector<int32_t>{1, 2, 8, 9}, 3, out);
  EXPECT_TRUE(out.empty());
  p.completed(first, greedy());
  p.propose(std::vector<int32_t>{1, 2, 8, 9}, 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{10, 11, 12}));
  // Its own match still comes first.
  out.clear();
  p.propose(std::vector<int32_t>{8, 9, 50, 8, 9}, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{50}));
  // Without a pool nothing is learned.
  NgramProposer alone(4);
  alone.completed(first, greedy());
  out.clear();
  alone.propose(std::vector<int32_t>{1, 2, 8, 9}, 3, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace sustain::spec

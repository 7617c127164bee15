// KL, perplexity and Δp on hand-computed distributions; the saved-baseline
// bound (top-k + log-sum-exp) against the full computation.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include <gtest/gtest.h>

#include "eval/baseline.h"
#include "eval/kl.h"
#include "test_util.h"

namespace sustain::eval {
namespace {

std::vector<float> logs(std::initializer_list<double> p, double shift = 0.0) {
  std::vector<float> v;
  for (double x : p) v.push_back(static_cast<float>(std::log(x) + shift));
  return v;
}

TEST(Kl, HandComputedPair) {
  // base (0.5, 0.25, 0.25), test (0.25, 0.5, 0.25); logits shifted by
  // constants, which softmax must ignore.
  const auto base = logs({0.5, 0.25, 0.25}, 3.0);
  const auto test = logs({0.25, 0.5, 0.25}, -1.5);
  const PositionStats s = compare_rows(base.data(), test.data(), 3, 1);
  // 0.5·ln(0.5/0.25) + 0.25·ln(0.25/0.5) + 0.25·ln(1) = 0.25·ln 2
  EXPECT_NEAR(s.kl, 0.25 * std::log(2.0), 1e-6);
  EXPECT_DOUBLE_EQ(s.kl, s.kl_high);
  EXPECT_FALSE(s.same_top1);
  ASSERT_TRUE(s.has_next);
  EXPECT_NEAR(s.p_base, 0.25, 1e-6);
  EXPECT_NEAR(s.p_test, 0.5, 1e-6);
  EXPECT_NEAR(s.nll_base, std::log(4.0), 1e-6);
  EXPECT_NEAR(s.nll_test, std::log(2.0), 1e-6);
  // Identical distributions: KL 0, same top-1.
  const PositionStats z = compare_rows(base.data(), base.data(), 3, -1);
  EXPECT_EQ(z.kl, 0.0);
  EXPECT_TRUE(z.same_top1);
  EXPECT_FALSE(z.has_next);
}

TEST(Kl, LogSumExpDoesNotOverflow) {
  const float x[3] = {1000.0f, 1000.0f, -1000.0f};
  EXPECT_NEAR(log_sum_exp(x, 3), 1000.0 + std::log(2.0), 1e-9);
}

TEST(Kl, PercentilesAndSummary) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0.95), 3.85);
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 4.0);
  const Summary s = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.max, 4.0);
  EXPECT_DOUBLE_EQ(s.p99, 3.97);
}

TEST(Kl, BucketsPerplexityAndDeltaP) {
  KlAccumulator acc({2});
  PositionStats a;  // positions 0, 1 → bucket [0, 2)
  a.kl = 0.1;
  a.kl_high = 0.1;
  a.same_top1 = true;
  a.has_next = true;
  a.p_base = 0.5, a.p_test = 0.25;
  a.nll_base = std::log(2.0), a.nll_test = std::log(4.0);
  PositionStats b = a;
  b.kl = b.kl_high = 0.3;
  b.same_top1 = false;
  b.p_base = 0.25, b.p_test = 0.5;
  b.nll_base = std::log(4.0), b.nll_test = std::log(2.0);
  acc.add(0, a);
  acc.add(1, b);
  PositionStats c = a;  // position 5 → bucket [2, ...)
  c.kl = c.kl_high = 0.7;
  c.nll_base = std::log(8.0), c.nll_test = std::log(8.0);
  c.p_base = c.p_test = 0.125;
  acc.add(5, c);
  const auto bs = acc.buckets();
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].lo, 0);
  EXPECT_EQ(bs[0].hi, 2);
  EXPECT_EQ(bs[0].n, 2);
  EXPECT_NEAR(bs[0].kl.mean, 0.2, 1e-12);
  EXPECT_NEAR(bs[0].kl.max, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(bs[0].same_top1, 0.5);
  EXPECT_NEAR(bs[0].dp_mean, 0.0, 1e-12);  // −0.25 and +0.25
  EXPECT_NEAR(bs[0].dp_rms, 0.25, 1e-12);
  // exp(mean(ln 2, ln 4)) = sqrt(8) for both sides.
  EXPECT_NEAR(bs[0].ppl_base, std::sqrt(8.0), 1e-9);
  EXPECT_NEAR(bs[0].ppl_test, std::sqrt(8.0), 1e-9);
  EXPECT_NEAR(bs[0].ppl_ratio, 1.0, 1e-12);
  EXPECT_EQ(bs[1].lo, 2);
  EXPECT_EQ(bs[1].hi, 6);
  EXPECT_NEAR(bs[1].ppl_base, 8.0, 1e-9);
  // The whole range last: ppl = exp(mean(ln2, ln4, ln8)) = 4.
  EXPECT_EQ(bs[2].n, 3);
  EXPECT_NEAR(bs[2].ppl_base, 4.0, 1e-9);
  EXPECT_NEAR(bs[2].ppl_test, std::exp((std::log(4.0) + std::log(2.0) + std::log(8.0)) / 3), 1e-9);
  EXPECT_NEAR(bs[2].kl.mean, (0.1 + 0.3 + 0.7) / 3, 1e-12);
}

TEST(Kl, ParseEdges) {
  auto e = parse_edges("512,4096,16384", "--buckets");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e, (std::vector<int64_t>{512, 4096, 16384}));
  EXPECT_FALSE(parse_edges("512,256", "--buckets").has_value());
  EXPECT_FALSE(parse_edges("512,,1024", "--buckets").has_value());
  EXPECT_FALSE(parse_edges("-1", "--buckets").has_value());
}

TEST(KlSaved, HandComputedTailBounds) {
  // base (0.7, 0.1, 0.1, 0.1), top-1 kept; test (0.4, 0.3, 0.2, 0.1).
  const auto base = logs({0.7, 0.1, 0.1, 0.1});
  const auto test = logs({0.4, 0.3, 0.2, 0.1});
  const SavedRow row = compress_row(base.data(), 4, 1);
  ASSERT_EQ(row.ids, std::vector<int32_t>{0});
  const PositionStats s = compare_saved(row, base[2], test.data(), 4, 2);
  const double head = 0.7 * std::log(0.7 / 0.4);
  // Coarsened to {0, rest}: 0.3 vs 0.6.
  EXPECT_NEAR(s.kl, head + 0.3 * std::log(0.3 / 0.6), 1e-6);
  // Worst tail: all 0.3 (≤ p_1 = 0.7) on the token the test gives 0.1.
  EXPECT_NEAR(s.kl_high, head + 0.3 * std::log(0.3 / 0.1), 1e-6);
  const PositionStats full = compare_rows(base.data(), test.data(), 4, 2);
  EXPECT_LE(s.kl, full.kl);
  EXPECT_GE(s.kl_high, full.kl);
  // The next token (outside the top-k) comes from the saved logit.
  EXPECT_NEAR(s.p_base, 0.1, 1e-6);
  EXPECT_NEAR(s.p_test, 0.2, 1e-6);
  EXPECT_TRUE(s.same_top1);
}

TEST(KlSaved, SavedBaselineEqualsRecomputedWithinBound) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t n_vocab = 300, n_tok = 40;
  SavedBaseline b;
  b.model = "m.gguf";
  b.cache_k = b.cache_v = "f16";
  b.source = "test";
  b.n_vocab = n_vocab;
  b.top_k = 32;
  std::vector<std::vector<float>> base(n_tok), test(n_tok);
  for (int64_t i = 0; i < n_tok; ++i) {
    base[i].resize(n_vocab);
    test[i].resize(n_vocab);
    // Peaked rows (scale 3) like a trained model's, and a perturbed copy.
    for (int64_t j = 0; j < n_vocab; ++j) {
      base[i][j] = 3.0f * n01(rng);
      test[i][j] = base[i][j] + 0.3f * n01(rng);
    }
    b.tokens.push_back(static_cast<int32_t>(rng() % n_vocab));
  }
  for (int64_t i = 0; i < n_tok; ++i) {
    b.rows.push_back(compress_row(base[i].data(), n_vocab, b.top_k));
    b.next_logit.push_back(i + 1 < n_tok ? base[i][b.tokens[i + 1]] : 0.0f);
  }
  const std::string path = test::tmp_path("kl_baseline.bin");
  ASSERT_TRUE(write_baseline(path, b).is_ok());
  auto r = read_baseline(path);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->tokens, b.tokens);
  EXPECT_EQ(r->top_k, 32);
  double gap_sum = 0.0;
  for (int64_t i = 0; i + 1 < n_tok; ++i) {
    const int32_t next = b.tokens[i + 1];
    const PositionStats full = compare_rows(base[i].data(), test[i].data(), n_vocab, next);
    const PositionStats saved =
        compare_saved(r->rows[i], r->next_logit[i], test[i].data(), n_vocab, next);
    EXPECT_LE(saved.kl, full.kl + 1e-9) << i;
    EXPECT_GE(saved.kl_high, full.kl - 1e-9) << i;
    EXPECT_NEAR(saved.p_base, full.p_base, 1e-6);
    EXPECT_NEAR(saved.nll_test, full.nll_test, 1e-9);
    EXPECT_EQ(saved.same_top1, full.same_top1);
    gap_sum += saved.kl_high - saved.kl;
  }
  EXPECT_GT(gap_sum, 0.0);  // k < n_vocab: a real interval
  // k = n_vocab: the saved row is exact.
  for (int64_t i = 0; i < 5; ++i) {
    const SavedRow row = compress_row(base[i].data(), n_vocab, static_cast<int>(n_vocab));
    const PositionStats full = compare_rows(base[i].data(), test[i].data(), n_vocab, -1);
    const PositionStats saved = compare_saved(row, 0.0f, test[i].data(), n_vocab, -1);
    EXPECT_NEAR(saved.kl, full.kl, 1e-6);
    EXPECT_NEAR(saved.kl_high, full.kl, 1e-6);
  }
}

TEST(KlSaved, ReaderRejectsDamagedFiles) {
  SavedBaseline b;
  b.model = "m";
  b.n_vocab = 8;
  b.top_k = 2;
  b.tokens = {1, 2};
  const float lg[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  b.rows = {compress_row(lg, 8, 2), compress_row(lg, 8, 2)};
  b.next_logit = {2.0f, 0.0f};
  const std::string path = test::tmp_path("kl_baseline_bad.bin");
  ASSERT_TRUE(write_baseline(path, b).is_ok());
  std::string d;
  {
    std::ifstream f(path, std::ios::binary);
    d.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  auto write = [&](const std::string& s) {
    std::ofstream f(path, std::ios::binary);
    f.write(s.data(), static_cast<std::streamsize>(s.size()));
  };
  write(d.substr(0, d.size() - 3));
  auto r = read_baseline(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("do not fit"), std::string::npos) << r.status().message();
  write("garbage!");
  EXPECT_FALSE(read_baseline(path).has_value());
  std::string bad_id = d;
  // The first id of the last row sits 2·4 + 2·4 bytes before the end.
  const size_t at = d.size() - 16;
  const int32_t big = 99;
  std::memcpy(bad_id.data() + at, &big, 4);
  write(bad_id);
  r = read_baseline(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("token id 99"), std::string::npos) << r.status().message();
  write(d + "x");
  EXPECT_FALSE(read_baseline(path).has_value());
}

}  // namespace
}  // namespace sustain::eval

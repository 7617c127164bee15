// eval ab math on hand-computed inputs: prefix agreement, the sign-flip test
// (enumerated by hand and against a binomial tail), bootstrap interval, Holm
// adjustment, prompt parsing, verdicts and the JSON report.
#include <cmath>
#include <set>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "eval/ab.h"

namespace sustain::eval {
namespace {

using V = std::vector<int32_t>;

TEST(Ab, PrefixAgreement) {
  EXPECT_EQ(common_prefix(V{1, 2, 3, 4}, V{1, 2, 9, 4}), 2);
  EXPECT_DOUBLE_EQ(prefix_agreement(V{1, 2, 3, 4}, V{1, 2, 9, 4}), 0.5);
  // A shorter sequence (stopped at end-of-generation) that is a prefix of the
  // other still disagrees on the tokens the other went on to generate.
  EXPECT_DOUBLE_EQ(prefix_agreement(V{1, 2}, V{1, 2, 3, 4}), 0.5);
  EXPECT_DOUBLE_EQ(prefix_agreement(V{7, 8, 9}, V{7, 8, 9}), 1.0);
  EXPECT_DOUBLE_EQ(prefix_agreement(V{}, V{}), 1.0);
  EXPECT_DOUBLE_EQ(prefix_agreement(V{}, V{3}), 0.0);
  EXPECT_DOUBLE_EQ(prefix_agreement(V{4, 1, 1}, V{5, 1, 1}), 0.0);
}

TEST(Ab, ScoreRepeat) {
  const V a{5, 6, 7, 8}, a2{5, 6, 0, 0}, b{5, 6, 0, 1};
  const RepeatScores s = score_repeat(a, a2, b);
  EXPECT_DOUBLE_EQ(s.noise, 0.5);
  EXPECT_DOUBLE_EQ(s.cross, 0.5);
  EXPECT_DOUBLE_EQ(s.paired, 0.75);
  EXPECT_EQ(s.paired_first_divergence, 3);
  EXPECT_DOUBLE_EQ(s.d(), 0.0);
  EXPECT_FALSE(s.noise_exact || s.cross_exact || s.paired_exact);
  const RepeatScores same = score_repeat(a, a2, a2);
  EXPECT_TRUE(same.paired_exact);
  EXPECT_EQ(same.paired_first_divergence, 4);
  EXPECT_DOUBLE_EQ(same.d(), 0.0);
}

TEST(Ab, SignFlipHandEnumerated) {
  // ±1 ±2 ±3: sums 6 4 2 0 0 −2 −4 −6; |s| >= 6 in 2 of 8.
  SignFlipTest t = sign_flip_test({1, 2, 3});
  EXPECT_TRUE(t.exact);
  EXPECT_EQ(t.n_nonzero, 3);
  EXPECT_DOUBLE_EQ(t.p, 0.25);
  // Zeros carry no sign and change nothing.
  t = sign_flip_test({0, 1, 0, 2, 3, 0});
  EXPECT_EQ(t.n_nonzero, 3);
  EXPECT_DOUBLE_EQ(t.p, 0.25);
  // 3, 1, −1: observed |3|; |s| over the 8 patterns is 5 3 3 1 1 3 3 5.
  EXPECT_DOUBLE_EQ(sign_flip_test({3, 1, -1}).p, 0.75);
  // Opposite signs cancel: observed 0, every pattern is at least as extreme.
  EXPECT_DOUBLE_EQ(sign_flip_test({1, -1}).p, 1.0);
  // All zero: nothing to test.
  t = sign_flip_test({0, 0, 0});
  EXPECT_EQ(t.n_nonzero, 0);
  EXPECT_DOUBLE_EQ(t.p, 1.0);
  // k equal values: only the two uniform patterns reach the observed sum.
  EXPECT_DOUBLE_EQ(sign_flip_test(std::vector<double>(5, 0.5)).p, 2.0 / 32);
  EXPECT_DOUBLE_EQ(sign_flip_test(std::vector<double>(6, 0.2)).p, 2.0 / 64);
  // Sums of rationals that are not exact in binary (0.1 + 0.2 + 0.3 is
  // 0.6000000000000001) still count the observed pattern and its mirror.
  EXPECT_DOUBLE_EQ(sign_flip_test({0.1, 0.2, 0.3}).p, 0.25);
}

TEST(Ab, SignFlipMonteCarloMatchesBinomialTail) {
  // 16 × (+1) and 8 × (−1): observed 8; S = 2K − 24 with K ~ Bin(24, 1/2),
  // so p = P(K >= 16) + P(K <= 8) = 2 P(K >= 16).
  std::vector<double> d(16, 1.0);
  d.insert(d.end(), 8, -1.0);
  double tail = 0.0, c = 1.0;  // C(24, k) built up by k
  for (int k = 0; k <= 24; ++k) {
    if (k > 0) c = c * (24 - k + 1) / k;
    if (k >= 16) tail += c;
  }
  const double exact = 2.0 * tail / std::ldexp(1.0, 24);
  const SignFlipTest t = sign_flip_test(d, 200000, 7);
  EXPECT_FALSE(t.exact);
  EXPECT_EQ(t.n_nonzero, 24);
  EXPECT_NEAR(t.p, exact, 0.005) << exact;
  // Far beyond what the draws can resolve: p is (1 + 0) / (1 + draws), never 0.
  const SignFlipTest far = sign_flip_test(std::vector<double>(30, 1.0), 999, 3);
  EXPECT_DOUBLE_EQ(far.p, 1.0 / 1000);
}

TEST(Ab, MinAttainableP) {
  EXPECT_DOUBLE_EQ(min_sign_flip_p(0), 1.0);
  EXPECT_DOUBLE_EQ(min_sign_flip_p(1), 1.0);
  EXPECT_DOUBLE_EQ(min_sign_flip_p(4), 0.125);
  EXPECT_DOUBLE_EQ(min_sign_flip_p(8), 1.0 / 128);
}

TEST(Ab, BootstrapInterval) {
  const Interval c = bootstrap_mean_ci({0.3, 0.3, 0.3});
  EXPECT_DOUBLE_EQ(c.lo, 0.3);
  EXPECT_DOUBLE_EQ(c.hi, 0.3);
  // {0, 1}: resampled means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4,
  // so the 2.5% and 97.5% points are 0 and 1.
  const Interval b = bootstrap_mean_ci({0.0, 1.0}, 0.95, 20000, 5);
  EXPECT_DOUBLE_EQ(b.lo, 0.0);
  EXPECT_DOUBLE_EQ(b.hi, 1.0);
  // The 40% interval of the same: its 30% and 70% points both lie in the
  // middle half, the resampled mean 0.5.
  const Interval m = bootstrap_mean_ci({0.0, 1.0}, 0.4, 20000, 5);
  EXPECT_DOUBLE_EQ(m.lo, 0.5);
  EXPECT_DOUBLE_EQ(m.hi, 0.5);
  const Interval e = bootstrap_mean_ci({});
  EXPECT_DOUBLE_EQ(e.lo, 0.0);
  EXPECT_DOUBLE_EQ(e.hi, 0.0);
  // Deterministic for a seed.
  const std::vector<double> v{0.1, 0.4, 0.2, 0.9, 0.0};
  const Interval x = bootstrap_mean_ci(v, 0.95, 1000, 9), y = bootstrap_mean_ci(v, 0.95, 1000, 9);
  EXPECT_EQ(x.lo, y.lo);
  EXPECT_EQ(x.hi, y.hi);
  EXPECT_LT(x.lo, 0.32);
  EXPECT_GT(x.hi, 0.32);
}

TEST(Ab, HolmAdjust) {
  // Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → 0.06
  // (step-down never lowers a later adjusted p).
  const auto adj = holm_adjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(adj.size(), 4u);
  EXPECT_DOUBLE_EQ(adj[0], 0.03);
  EXPECT_DOUBLE_EQ(adj[1], 0.06);
  EXPECT_DOUBLE_EQ(adj[2], 0.06);
  EXPECT_DOUBLE_EQ(adj[3], 0.02);
  const auto capped = holm_adjust({0.5, 0.6});
  EXPECT_DOUBLE_EQ(capped[0], 1.0);
  EXPECT_DOUBLE_EQ(capped[1], 1.0);
  EXPECT_TRUE(holm_adjust({}).empty());
  EXPECT_DOUBLE_EQ(holm_adjust({0.2})[0], 0.2);
}

TEST(Ab, SeedsAreDistinctAndReplay) {
  std::set<uint64_t> seen;
  for (int64_t p = 0; p < 10; ++p)
    for (int64_t r = 0; r < 10; ++r)
      for (int s = 0; s < 2; ++s) seen.insert(ab_seed(1, p, r, s));
  EXPECT_EQ(seen.size(), 200u);
  EXPECT_EQ(ab_seed(1, 3, 4, 1), ab_seed(1, 3, 4, 1));
  EXPECT_NE(ab_seed(1, 3, 4, 1), ab_seed(2, 3, 4, 1));
  // (prompt 1, repeat 0) and (prompt 0, repeat 1) must not collide.
  EXPECT_NE(ab_seed(1, 1, 0, 0), ab_seed(1, 0, 1, 0));
}

TEST(Ab, ParsePrompts) {
  auto p = parse_ab_prompts("first prompt\r\n\n  \nsecond {x}\n", "p.txt");
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].text, "first prompt");
  EXPECT_EQ((*p)[0].line, 1);
  EXPECT_EQ((*p)[1].text, "second {x}");
  EXPECT_EQ((*p)[1].line, 4);
  auto j = parse_ab_prompts("{\"prompt\": \"a\\nb\"}\n\n{\"prompt\": \"c\", \"id\": 2}", "p.jsonl");
  ASSERT_TRUE(j) << j.status().message();
  ASSERT_EQ(j->size(), 2u);
  EXPECT_EQ((*j)[0].text, "a\nb");
  EXPECT_EQ((*j)[1].line, 3);
  // Errors name the file and line.
  auto bad = parse_ab_prompts("{\"prompt\": \"a\"}\nplain text\n", "p.jsonl");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("p.jsonl line 2"), std::string::npos)
      << bad.status().message();
  auto missing = parse_ab_prompts("{\"text\": \"a\"}\n", "q.jsonl");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("q.jsonl line 1: no string field \"prompt\""),
            std::string::npos)
      << missing.status().message();
  auto empty = parse_ab_prompts(" \n\n\t\n", "e.txt");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.status().message().find("e.txt has no prompts"), std::string::npos);
  EXPECT_FALSE(parse_ab_prompts("", "e.txt"));
}

RepeatScores rep(double noise, double cross) {
  RepeatScores r;
  r.noise = noise;
  r.cross = cross;
  r.paired = cross;
  r.noise_exact = noise == 1.0;
  r.cross_exact = r.paired_exact = cross == 1.0;
  return r;
}

TEST(Ab, SummarizeAndVerdicts) {
  // Greedy, B equal to A: within noise.
  AbStats g = summarize_repeats({rep(1, 1)}, true, 0.05);
  EXPECT_EQ(g.verdict, AbVerdict::kWithinNoise);
  EXPECT_DOUBLE_EQ(g.cross_mean, 1.0);
  // Greedy, B's text differs: deterministic, so beyond the (zero) noise.
  g = summarize_repeats({rep(1, 0.25)}, true, 0.05);
  EXPECT_EQ(g.verdict, AbVerdict::kBeyondNoise);
  EXPECT_DOUBLE_EQ(g.diff_mean, 0.75);
  EXPECT_NE(g.reason.find("greedy"), std::string::npos);
  // Sampled: noise {0.5, 0.25, 0.75} → mean 0.5, sd 0.25; D = {0.5, 0.25, 0.75}.
  AbStats s = summarize_repeats({rep(0.5, 0), rep(0.25, 0), rep(0.75, 0)}, false, 0.05);
  EXPECT_DOUBLE_EQ(s.noise_mean, 0.5);
  EXPECT_DOUBLE_EQ(s.noise_sd, 0.25);
  EXPECT_DOUBLE_EQ(s.diff_mean, 0.5);
  EXPECT_DOUBLE_EQ(s.test.p, 0.25);  // 3 positive values: 2/8
  EXPECT_EQ(s.verdict, AbVerdict::kWithinNoise);
  EXPECT_NE(s.reason.find("more repeats"), std::string::npos) << s.reason;
  // Six repeats all with D = 0.5: p = 2/64 < 0.05.
  s = summarize_repeats(std::vector<RepeatScores>(6, rep(0.5, 0)), false, 0.05);
  EXPECT_DOUBLE_EQ(s.test.p, 2.0 / 64);
  EXPECT_EQ(s.verdict, AbVerdict::kBeyondNoise);
  EXPECT_DOUBLE_EQ(s.cross_exact, 0.0);
  // B reproducing A' exactly: D = 0 everywhere, within noise.
  s = summarize_repeats(std::vector<RepeatScores>(6, rep(0.2, 0.2)), false, 0.05);
  EXPECT_EQ(s.test.n_nonzero, 0);
  EXPECT_EQ(s.verdict, AbVerdict::kWithinNoise);
}

TEST(Ab, FinishAppliesHolmAndPools) {
  AbResult r;
  r.alpha = 0.05;
  AbPromptResult p1, p2;
  p1.prompt = {1, "x"};
  p1.repeats.assign(6, rep(0.5, 0));  // raw p = 1/32
  p2.prompt = {2, "y"};
  p2.repeats.assign(6, rep(0.3, 0.3));  // D = 0: p = 1
  r.prompts = {p1, p2};
  finish_ab(r);
  // Holm: 1/32 · 2 = 0.0625 ≥ 0.05, so prompt 1 alone is not claimed...
  ASSERT_TRUE(r.prompts[0].stats.p_holm.has_value());
  EXPECT_DOUBLE_EQ(*r.prompts[0].stats.p_holm, 0.0625);
  EXPECT_EQ(r.prompts[0].stats.verdict, AbVerdict::kWithinNoise);
  EXPECT_DOUBLE_EQ(*r.prompts[1].stats.p_holm, 1.0);
  // ...but the pooled 12 repeats (6 nonzero, all positive) give p = 1/32.
  EXPECT_EQ(r.overall.n, 12);
  EXPECT_DOUBLE_EQ(r.overall.test.p, 2.0 / 64);
  EXPECT_EQ(r.overall.verdict, AbVerdict::kBeyondNoise);
  EXPECT_DOUBLE_EQ(r.overall.diff_mean, 0.25);
}

TEST(Ab, ReportsCarryTheFields) {
  AbResult r;
  r.label_a = "m.gguf f16/f16";
  r.label_b = "m.gguf q4_0/q4_0";
  r.repeats = 3;
  r.n_predict = 4;
  AbPromptResult p;
  p.prompt = {1, "hi | there"};
  p.repeats = {rep(0.5, 0.25), rep(0.25, 0.25), rep(1, 0.5)};
  p.sample_a = "ok";
  p.sample_b = std::string("bad \xff utf8");  // generated bytes may be cut mid-character
  r.prompts = {p};
  finish_ab(r);
  Conditions c;
  c.model = "m.gguf";
  const auto j = nlohmann::json::parse(ab_json(c, r));
  EXPECT_EQ(j["kind"], "ab");
  EXPECT_EQ(j["b"], "m.gguf q4_0/q4_0");
  EXPECT_EQ(j["overall"]["verdict"], "within_noise");
  ASSERT_EQ(j["prompts"].size(), 1u);
  const auto& q = j["prompts"][0];
  for (const char* k : {"agreement_noise", "agreement_cross", "agreement_paired", "diff_mean",
                        "diff_ci95", "p", "p_holm", "verdict", "exact_cross", "repeat_scores"})
    EXPECT_TRUE(q.contains(k)) << k;
  EXPECT_NEAR(double(q["agreement_noise"]), 0.5833333333, 1e-9);
  EXPECT_DOUBLE_EQ(double(q["agreement_cross"]), 1.0 / 3);
  EXPECT_EQ(q["repeat_scores"].size(), 3u);
  const std::string md = ab_markdown(c, r);
  EXPECT_NE(md.find("within_noise"), std::string::npos);
  EXPECT_NE(md.find("hi \\| there"), std::string::npos) << md;
  p.prompt.text = "<b>&";
  r.prompts = {p};
  finish_ab(r);
  const std::string html = ab_html(c, r);
  EXPECT_NE(html.find("&lt;b&gt;&amp;"), std::string::npos);
  EXPECT_EQ(html.find("<b>&"), std::string::npos);
  EXPECT_NE(html.find("within_noise"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
}

}  // namespace
}  // namespace sustain::eval

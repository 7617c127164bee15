// Each step of the sampling chain on small distributions whose answers are
// worked out by hand in the comments.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/constraint.h"
#include "sampling/penalties.h"
#include "sampling/processors.h"

namespace sustain::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Owns a candidate buffer built from logits, in id order.
struct List {
  explicit List(std::vector<float> logits) : logits_(std::move(logits)), buf(logits_.size()) {
    fill_candidates(c, buf.data(), logits_.data(), static_cast<int32_t>(logits_.size()));
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> v;
    for (size_t i = 0; i < c.size; ++i) v.push_back(c.data[i].id);
    return v;
  }
  std::set<int32_t> id_set() const {
    auto v = ids();
    return {v.begin(), v.end()};
  }
  float prob_of(int32_t id) const {
    for (size_t i = 0; i < c.size; ++i) {
      if (c.data[i].id == id) return c.data[i].prob;
    }
    ADD_FAILURE() << "token " << id << " not live";
    return -1;
  }
  std::vector<float> logits_;
  std::vector<Candidate> buf;
  Candidates c;
};

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(FillCandidates, IdsInOrderAndNanBecomesMinusInf) {
  List l({1.0f, std::nanf(""), -2.0f});
  ASSERT_EQ(l.c.size, 3u);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(l.c.data[1].logit, -kInf);
  EXPECT_EQ(l.c.data[2].logit, -2.0f);
  EXPECT_FALSE(l.c.sorted);
}

TEST(LogitBias, AddsToTheNamedTokensOnly) {
  List l({1.0f, 2.0f, 3.0f, -kInf});
  const LogitBias b[] = {{0, 5.0f}, {2, -100.0f}, {3, 50.0f}, {7, 1.0f}};  // 7: outside, skipped
  logit_bias(l.c, b);
  ASSERT_EQ(l.c.size, 4u);
  EXPECT_EQ(l.c.data[0].logit, 6.0f);
  EXPECT_EQ(l.c.data[1].logit, 2.0f);
  EXPECT_EQ(l.c.data[2].logit, -97.0f);
  EXPECT_EQ(l.c.data[3].logit, -kInf);                     // a banned token stays banned
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 1, 2, 3}));  // order untouched
  EXPECT_FALSE(l.c.sorted);
}

TEST(ApplyMask, KeepsOnlyAllowedTokensEvenAtMinusInf) {
  // 40 tokens; allowed: 3 (logit -inf) and 33; the best logit (token 0) is not.
  std::vector<float> logits(40, 0.0f);
  logits[0] = 100.0f;
  logits[3] = -kInf;
  List l(logits);
  const uint32_t mask[] = {1u << 3, 1u << 1};
  ASSERT_TRUE(apply_mask(l.c, mask));
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{3, 33}));
  // Greedy picks an allowed token even though one allowed logit is -inf.
  EXPECT_EQ(l.c.data[argmax(l.c)].id, 33);
  // Ids past the mask's words are not allowed; nothing allowed leaves all.
  List m(std::vector<float>(40, 1.0f));
  const uint32_t only_high[] = {0};
  EXPECT_FALSE(apply_mask(m.c, only_high));
  EXPECT_EQ(m.c.size, 40u);
}

TEST(TopK, KeepsExactlyTheKHighestSorted) {
  List l({0.1f, 5.0f, -1.0f, 3.0f, 4.0f, 2.0f});
  top_k(l.c, 3);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{1, 4, 3}));
  EXPECT_TRUE(l.c.sorted);
}

TEST(TopK, TiesAtTheCutKeepLowerIds) {
  // Five tokens tie at 1.0; k = 3 keeps the top token and the two lowest ids
  // of the tie, whatever order the standard library's selection visits them.
  List l({1.0f, 1.0f, 2.0f, 1.0f, 1.0f, 1.0f, 0.0f});
  top_k(l.c, 3);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{2, 0, 1}));
}

TEST(TopK, ZeroOrAtLeastVocabIsDisabled) {
  for (int32_t k : {0, 4, 100}) {
    List l({3.0f, 1.0f, 2.0f, 0.0f});
    top_k(l.c, k);
    EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 1, 2, 3})) << "k=" << k;
    EXPECT_FALSE(l.c.sorted);
  }
  List l({3.0f, 1.0f, 2.0f, 0.0f});
  top_k(l.c, 3);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 2, 1}));
}

TEST(TopP, SmallestPrefixReachingP) {
  // Probabilities 0.05, 0.5, 0.15, 0.3 (ids 0..3); sorted: 0.5, 0.3, 0.15, 0.05
  // with cumulative 0.5, 0.8, 0.95, 1.0.
  const std::vector<double> probs = {0.05, 0.5, 0.15, 0.3};
  struct Case {
    float p;
    std::vector<int32_t> kept;
  };
  for (const Case& t :
       {Case{0.01f, {1}}, Case{0.49f, {1}}, Case{0.51f, {1, 3}}, Case{0.79f, {1, 3}},
        Case{0.81f, {1, 3, 2}}, Case{0.94f, {1, 3, 2}}, Case{0.96f, {1, 3, 2, 0}}}) {
    List l(logits_of(probs));
    top_p(l.c, t.p);
    EXPECT_EQ(l.ids(), t.kept) << "p=" << t.p;
    EXPECT_TRUE(l.c.sorted);
    EXPECT_NEAR(l.prob_of(1), 0.5f, 1e-6);  // top_p leaves temperature-1 probabilities
  }
}

TEST(TopP, ExactBoundaryIsInclusive) {
  // Four equal logits: every probability is exactly 0.25 and the cumulative
  // sums 0.25, 0.5, 0.75 are exact, so p = 0.5 stops at two tokens (>= p).
  List l({0.0f, 0.0f, 0.0f, 0.0f});
  top_p(l.c, 0.5f);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 1}));
  List l2({0.0f, 0.0f, 0.0f, 0.0f});
  top_p(l2.c, 0.25f);
  EXPECT_EQ(l2.ids(), (std::vector<int32_t>{0}));
}

TEST(TopP, OneIsDisabled) {
  List l({0.0f, 3.0f, -50.0f});
  top_p(l.c, 1.0f);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(l.c.sorted);
}

TEST(TopP, NucleusBeyondTheFirstSortedBlock) {
  // 1000 tokens at logit 0 scattered among 19000 at -30: each of the 1000 has
  // probability ~1e-3 and the rest together ~1.8e-9. p = 0.9995 needs all
  // 1000 (999 reach only 0.999), more than the first partial sort covers.
  const int32_t n = 20000;
  std::vector<float> logits(n, -30.0f);
  std::vector<int32_t> high(n);
  std::iota(high.begin(), high.end(), 0);
  std::mt19937 gen(7);
  std::shuffle(high.begin(), high.end(), gen);
  high.resize(1000);
  for (int32_t id : high) logits[id] = 0.0f;
  std::sort(high.begin(), high.end());

  List l(logits);
  top_p(l.c, 0.9995f);
  EXPECT_EQ(l.ids(), high);  // all of them, ties in id order
}

TEST(TopP, RenormalizesOverWhatTopKLeft) {
  // top_k 3 of probabilities .32 .32 .16 .2 keeps ids 0 1 3, renormalized to
  // .381 .381 .238 (cumulative .381 .762 1): p = 0.75 stops at two tokens.
  // Without renormalizing the sums would be .32 .64 .84 and keep three.
  List l(logits_of({0.32, 0.32, 0.16, 0.2}));
  top_k(l.c, 3);
  top_p(l.c, 0.75f);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(l.prob_of(0), 0.32 / 0.84, 1e-6);
}

TEST(MinP, RelativeToTheTopProbability) {
  // Probabilities 0.15, 0.5, 0.05, 0.3: relative to the top 0.5 these are
  // 0.3, 1, 0.1, 0.6.
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.3};
  struct Case {
    float p;
    std::vector<int32_t> kept;
  };
  for (const Case& t : {Case{0.05f, {0, 1, 2, 3}}, Case{0.2f, {0, 1, 3}}, Case{0.5f, {1, 3}},
                        Case{0.7f, {1}}, Case{1.0f, {1}}}) {
    List l(logits_of(probs));
    min_p(l.c, t.p);
    EXPECT_EQ(l.ids(), t.kept) << "p=" << t.p;  // original order kept
  }
}

TEST(MinP, ZeroDisabledAndOneKeepsEveryTieOfTheMax) {
  List l({1.0f, -100.0f, 1.0f});
  min_p(l.c, 0.0f);
  EXPECT_EQ(l.c.size, 3u);
  min_p(l.c, 1.0f);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{0, 2}));
}

TEST(MinP, KeepsSortedness) {
  List l(logits_of({0.1, 0.6, 0.3}));
  top_k(l.c, 2);
  ASSERT_TRUE(l.c.sorted);
  min_p(l.c, 0.4f);
  EXPECT_EQ(l.ids(), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(l.c.sorted);
}

TEST(Temperature, ScalesLogitsAndSharpensOrFlattens) {
  // Logits 0 and ln 2: softmax (1/3, 2/3) at T = 1; logits / T give
  // T = 0.5: (0, 2 ln 2) -> (1/5, 4/5); T = 2: (0, ln 2 / 2) -> 1/(1+√2), √2/(1+√2).
  struct Case {
    float t;
    double p0;
  };
  for (const Case& t :
       {Case{1.0f, 1.0 / 3}, Case{0.5f, 0.2}, Case{2.0f, 1 / (1 + std::sqrt(2.0))}}) {
    List l({0.0f, static_cast<float>(std::log(2.0))});
    temperature(l.c, t.t);
    EXPECT_FLOAT_EQ(l.c.data[1].logit, static_cast<float>(std::log(2.0)) / t.t);
    softmax(l.c);
    EXPECT_NEAR(l.c.data[0].prob, t.p0, 1e-6) << "T=" << t.t;
    EXPECT_NEAR(l.c.data[1].prob, 1 - t.p0, 1e-6) << "T=" << t.t;
  }
}

TEST(Softmax, HandCheckedAndDegenerateInputs) {
  List a({0.0f, static_cast<float>(std::log(3.0))});  // 1 : 3
  softmax(a.c);
  EXPECT_NEAR(a.c.data[0].prob, 0.25, 1e-7);
  EXPECT_NEAR(a.c.data[1].prob, 0.75, 1e-7);

  List inf({kInf, 1.0f, kInf});  // the infinities share the mass
  softmax(inf.c);
  EXPECT_EQ(inf.c.data[0].prob, 0.5f);
  EXPECT_EQ(inf.c.data[1].prob, 0.0f);
  EXPECT_EQ(inf.c.data[2].prob, 0.5f);

  List none({-kInf, -kInf, -kInf, -kInf});  // nothing to prefer: uniform
  softmax(none.c);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(none.c.data[i].prob, 0.25f);

  List big({1000.0f, 999.0f});  // no overflow: shifted by the max
  softmax(big.c);
  EXPECT_NEAR(big.c.data[0].prob, 1 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(Draw, CumulativeIntervalsAndZeroProbability) {
  List l({0.0f, 0.0f, 0.0f});
  l.c.data[0].prob = 0.25f;
  l.c.data[1].prob = 0.0f;
  l.c.data[2].prob = 0.75f;
  EXPECT_EQ(draw(l.c, 0.0), 0u);
  EXPECT_EQ(draw(l.c, 0.2499), 0u);
  EXPECT_EQ(draw(l.c, 0.25), 2u);  // [0, .25) is token 0; the zero never wins
  EXPECT_EQ(draw(l.c, 0.9999999), 2u);

  l.c.data[0].prob = 0.0f;  // a zero first entry is skipped even at u = 0
  l.c.data[2].prob = 1.0f;
  EXPECT_EQ(draw(l.c, 0.0), 2u);
}

TEST(Draw, UnnormalizedRoundingCannotRunPastTheEnd) {
  // Probabilities that sum to less than 1 in float: u just below 1 still
  // lands on the last token, because draw() scales u by the actual sum.
  List l({0.0f, 0.0f, 0.0f});
  for (size_t i = 0; i < 3; ++i) l.c.data[i].prob = 0.33333f;
  EXPECT_EQ(draw(l.c, std::nextafter(1.0, 0.0)), 2u);
}

TEST(Argmax, LowestIdOnTies) {
  List l({1.0f, 7.0f, 3.0f, 7.0f, 7.0f});
  EXPECT_EQ(argmax(l.c), 1u);
  std::reverse(l.c.data, l.c.data + l.c.size);  // position must not matter, only id
  EXPECT_EQ(l.c.data[argmax(l.c)].id, 1);
}

// n logits of one of eight awkward kinds: 0 many ties, 1 specials (NaN,
// infinities, signed zeros), 2 nothing finite, 3 spread values, 4 half NaN
// and half one value, 5 rising (sorted: each block beats what came before),
// 6 Gaussian with sd 3 (a language model's spread), 7 uniform in [0, 1)
// (nearly flat: a nucleus of almost everything).
std::vector<float> awkward_logits(std::mt19937& rng, int n, int kind) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> specials = {nan, -kInf, kInf, 0.0f, -0.0f, 3.0f, -3.0f};
  std::vector<float> l(static_cast<size_t>(n));
  std::normal_distribution<float> gauss(0.0f, 3.0f);
  std::uniform_real_distribution<float> flat(0.0f, 1.0f);
  for (float& v : l) {
    if (kind == 6) v = gauss(rng);
    if (kind == 7) v = flat(rng);
    const auto r = rng();
    if (kind == 0) v = static_cast<float>(static_cast<int>(r % 4));
    if (kind == 1) v = specials[r % specials.size()];
    if (kind == 2) v = (r % 3 == 0) ? nan : -kInf;
    if (kind == 3) v = static_cast<float>(r % 100000) * 1e-3f - 50.0f;
    if (kind == 4) v = (r % 2) ? nan : 1.0f;
    if (kind == 5) v = static_cast<float>(static_cast<int>(r % 1000));
  }
  if (kind == 5) std::sort(l.begin(), l.end());
  return l;
}

// argmax_logits must choose what argmax over the filled candidates chooses,
// on every length around the 16-lane blocks and with the awkward values:
// NaN (never chosen), infinities, ties (lowest id), signed zeros, and all of
// the logits -inf or NaN (id 0).
TEST(Argmax, OnRawLogitsAgreesWithTheCandidates) {
  std::mt19937 rng(7);
  for (int n : {1, 2, 15, 16, 17, 31, 32, 33, 100, 49152 + 5}) {
    for (int trial = 0; trial < 42; ++trial) {
      std::vector<float> l = awkward_logits(rng, n, trial % 6);
      if (trial == 1) l.back() = kInf;  // the maximum in the tail
      List c(l);
      ASSERT_EQ(argmax_logits(l.data(), n), c.c.data[argmax(c.c)].id)
          << "n " << n << " trial " << trial;
    }
  }
}

// top_k_logits must leave what fill_candidates + top_k leave: the same k
// candidates (ids and logits) in the same order, with ties, NaN, infinities
// and the best logits anywhere, including the unaligned head and tail.
TEST(TopK, OnRawLogitsAgreesWithTheCandidates) {
  std::mt19937 rng(11);
  for (int n : {2, 17, 33, 100, 1000, 49152 + 7}) {
    for (int k : {1, 2, 15, 16, 17, 40, n - 1}) {
      if (k <= 0 || k >= n) continue;
      for (int trial = 0; trial < 12; ++trial) {
        const std::vector<float> l = awkward_logits(rng, n, trial % 6);
        List want(l);
        top_k(want.c, k);
        std::vector<Candidate> buf(static_cast<size_t>(k));
        Candidates got;
        top_k_logits(got, buf.data(), l.data(), n, k);
        ASSERT_TRUE(got.sorted);
        ASSERT_EQ(got.size, want.c.size);
        for (size_t i = 0; i < got.size; ++i) {
          ASSERT_EQ(got.data[i].id, want.c.data[i].id) << "n " << n << " k " << k << " at " << i;
          ASSERT_EQ(got.data[i].logit, want.c.data[i].logit);
        }
      }
    }
  }
}

// softmax_logits must leave, by id, the probabilities fill_candidates →
// temperature → softmax leave, bit for bit, on lengths around the vector
// lanes and softmax's chunks; where the maximum is not finite it declines.
// draw_dense must then pick what draw() picks for every u.
// log_sum_exp against a double-precision scalar reference (NaN skipped),
// on lengths around the vector blocks and the awkward kinds: within float
// rounding of the reference where the largest logit is finite, and the
// largest logit itself (+inf, -inf) where it is not.
TEST(LogSumExp, AgreesWithAScalarReference) {
  std::mt19937 rng(17);
  for (int n : {1, 7, 16, 17, 255, 256, 257, 1000, 49152 + 5}) {
    for (int kind = 0; kind < 8; ++kind) {
      const std::vector<float> l = awkward_logits(rng, n, kind);
      double mx = -kInf;
      for (float v : l)
        if (v > mx) mx = v;
      std::vector<float> w(static_cast<size_t>(n));
      const double got = log_sum_exp(l.data(), n, w.data());
      if (!std::isfinite(mx)) {
        EXPECT_EQ(got, mx) << "n " << n << " kind " << kind;
        continue;
      }
      double sum = 0.0;
      for (float v : l)
        if (!std::isnan(v)) sum += std::exp(static_cast<double>(v) - mx);
      const double want = mx + std::log(sum);
      EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::abs(want))) << "n " << n << " kind " << kind;
    }
  }
}

TEST(SoftmaxLogits, AgreesWithTheChainBitForBit) {
  std::mt19937 rng(13);
  for (int n : {1, 7, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 49152 + 5}) {
    for (int kind = 0; kind < 8; ++kind) {
      const std::vector<float> l = awkward_logits(rng, n, kind);
      for (float t : {0.5f, 1.0f, 1.7f}) {
        List want(l);
        temperature(want.c, t);
        softmax(want.c);
        std::vector<float> prob(static_cast<size_t>(n));
        float mx = -kInf;
        for (float v : l) mx = v > mx ? v : mx;
        if (!softmax_logits(prob.data(), l.data(), n, t)) {
          EXPECT_FALSE(std::isfinite(mx)) << "n " << n << " kind " << kind;
          continue;
        }
        for (int i = 0; i < n; ++i)
          ASSERT_EQ(prob[i], want.c.data[i].prob) << "n " << n << " kind " << kind << " at " << i;
        for (double u : {0.0, 1e-9, 0.25, 0.5, 0.7, 0.999, 0.999999999}) {
          ASSERT_EQ(draw_dense(prob.data(), prob.size(), u), draw(want.c, u))
              << "n " << n << " kind " << kind << " u " << u;
        }
        for (int trial = 0; trial < 20; ++trial) {
          const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
          ASSERT_EQ(draw_dense(prob.data(), prob.size(), u), draw(want.c, u));
        }
      }
    }
  }
}

// nucleus_logits must leave what fill_candidates → top_p → min_p leave: the
// same candidates in the same order with the same logits and probabilities.
// It may decline only where the maximum is not finite or the nucleus is
// nearly everything far down (never on the finite kinds here).
TEST(NucleusLogits, AgreesWithTheChain) {
  std::mt19937 rng(17);
  for (int n : {2, 17, 100, 257, 1000, 49152 + 7}) {
    for (float p : {0.1f, 0.5f, 0.9f, 0.95f, 0.999f, 1.0f}) {
      for (float mp : {0.0f, 0.05f, 0.5f}) {
        if (p >= 1.0f && mp <= 0.0f) continue;
        for (int kind = 0; kind < 8; ++kind) {
          const std::vector<float> l = awkward_logits(rng, n, kind);
          List want(l);
          top_p(want.c, p);
          min_p(want.c, mp);
          std::vector<Candidate> buf(static_cast<size_t>(n));
          std::vector<float> weights(static_cast<size_t>(n));
          std::vector<uint64_t> keys(2 * static_cast<size_t>(n));
          Candidates got;
          const bool ok =
              nucleus_logits(got, buf.data(), weights.data(), keys.data(), l.data(), n, p, mp);
          if (kind == 3 || kind >= 5) {
            ASSERT_TRUE(ok) << "n " << n << " kind " << kind;
          }
          if (!ok) continue;
          const auto where = testing::Message()
                             << "n " << n << " p " << p << " min_p " << mp << " kind " << kind;
          ASSERT_EQ(got.size, want.c.size) << where;
          ASSERT_EQ(got.sorted, want.c.sorted) << where;
          for (size_t i = 0; i < got.size; ++i) {
            ASSERT_EQ(got.data[i].id, want.c.data[i].id) << where << " at " << i;
            ASSERT_EQ(got.data[i].logit, want.c.data[i].logit) << where << " at " << i;
            ASSERT_EQ(got.data[i].prob, want.c.data[i].prob) << where << " at " << i;
          }
        }
      }
    }
  }
}

TEST(Penalties, RepeatFrequencyPresenceOnAKnownHistory) {
  // History 0 1 0 2 (window 8): counts {0: 2, 1: 1, 2: 1}. repeat 2,
  // frequency 0.5, presence 0.25:
  //   token 0:  2 / 2 - (2 * 0.5 + 0.25) = -0.25
  //   token 1: -2 * 2 - (1 * 0.5 + 0.25) = -4.75
  //   token 2:  1 / 2 - 0.75            = -0.25
  //   tokens 3, 4: unchanged
  PenaltyHistory h(8, 2.0f, 0.5f, 0.25f);
  for (int32_t t : {0, 1, 0, 2}) h.accept(t);
  EXPECT_EQ(h.count(0), 2);
  List l({2.0f, -2.0f, 1.0f, 0.5f, 3.0f});
  h.apply(l.c);
  EXPECT_FLOAT_EQ(l.c.data[0].logit, -0.25f);
  EXPECT_FLOAT_EQ(l.c.data[1].logit, -4.75f);
  EXPECT_FLOAT_EQ(l.c.data[2].logit, -0.25f);
  EXPECT_EQ(l.c.data[3].logit, 0.5f);
  EXPECT_EQ(l.c.data[4].logit, 3.0f);

  // A second application starts again from the (restored) counts.
  List l2({2.0f, -2.0f, 1.0f, 0.5f, 3.0f});
  h.apply(l2.c);
  EXPECT_FLOAT_EQ(l2.c.data[0].logit, -0.25f);
}

TEST(Penalties, RepeatOnlyDividesPositiveAndMultipliesNonPositive) {
  PenaltyHistory h(4, 1.5f, 0.0f, 0.0f);
  for (int32_t t : {0, 1, 2, 2}) h.accept(t);
  List l({3.0f, -3.0f, 0.0f, 3.0f});
  h.apply(l.c);
  EXPECT_FLOAT_EQ(l.c.data[0].logit, 2.0f);
  EXPECT_FLOAT_EQ(l.c.data[1].logit, -4.5f);
  EXPECT_EQ(l.c.data[2].logit, 0.0f);  // once, however often it repeats
  EXPECT_EQ(l.c.data[3].logit, 3.0f);
}

TEST(Penalties, WindowSlides) {
  // last_n = 3: after 0 1 0 2 the window is 1 0 2, so token 0 counts once.
  PenaltyHistory h(3, 1.0f, 1.0f, 0.0f);
  for (int32_t t : {0, 1, 0, 2}) h.accept(t);
  List l({0.0f, 0.0f, 0.0f, 0.0f});
  h.apply(l.c);
  EXPECT_EQ(l.c.data[0].logit, -1.0f);
  EXPECT_EQ(l.c.data[1].logit, -1.0f);
  EXPECT_EQ(l.c.data[2].logit, -1.0f);
  EXPECT_EQ(l.c.data[3].logit, 0.0f);
  for (int32_t t : {3, 3, 3}) h.accept(t);  // pushes everything else out
  List l2({0.0f, 0.0f, 0.0f, 0.0f});
  h.apply(l2.c);
  EXPECT_EQ(l2.c.data[0].logit, 0.0f);
  EXPECT_EQ(l2.c.data[3].logit, -3.0f);
}

TEST(Penalties, OutOfVocabTokensTakeASlotButPenalizeNothing) {
  PenaltyHistory h(3, 1.0f, 0.0f, 1.0f);
  for (int32_t t : {1, -5, 99}) h.accept(t);
  List l({0.0f, 0.0f, 0.0f});
  h.apply(l.c);
  EXPECT_EQ(l.c.data[0].logit, 0.0f);
  EXPECT_EQ(l.c.data[1].logit, -1.0f);
  h.accept(2);  // evicts 1
  List l2({0.0f, 0.0f, 0.0f});
  h.apply(l2.c);
  EXPECT_EQ(l2.c.data[1].logit, 0.0f);
  EXPECT_EQ(l2.c.data[2].logit, -1.0f);
  // A larger vocabulary recounts: token 99 now exists.
  std::vector<float> zeros(100, 0.0f);
  List l3(zeros);
  h.apply(l3.c);
  EXPECT_EQ(l3.c.data[99].logit, -1.0f);
  EXPECT_EQ(l3.c.data[2].logit, -1.0f);
  EXPECT_EQ(l3.c.data[1].logit, 0.0f);
}

TEST(Penalties, DisabledSettingsChangeNothing) {
  for (PenaltyHistory h :
       {PenaltyHistory(0, 2.0f, 1.0f, 1.0f), PenaltyHistory(8, 1.0f, 0.0f, 0.0f)}) {
    EXPECT_FALSE(h.active());
    h.accept(0);
    List l({1.0f, 2.0f});
    h.apply(l.c);
    EXPECT_EQ(l.c.data[0].logit, 1.0f);
  }
}

}  // namespace
}  // namespace sustain::sampling

// The speculation gate: draft lengths that maximise expected visible tokens
// per second of the step, checked against an exhaustive search.
#include "spec/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/splitmix.h"

namespace sustain::spec {
namespace {

double rate(std::span<const GateSeq> seqs, const StepPrice& p, const std::vector<int>& k) {
  double t = p.per_step, e = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int j = 0; j <= k[i]; ++j) t += p.per_row + p.per_attended * double(seqs[i].pos + j + 1);
    e += expected_tokens(seqs[i].alpha, k[i]);
  }
  return e / t;
}

// Every combination of k, for small cases.
double best_rate(std::span<const GateSeq> seqs, const StepPrice& p) {
  std::vector<int> k(seqs.size(), 0);
  double best = 0;
  while (true) {
    best = std::max(best, rate(seqs, p, k));
    size_t i = 0;
    while (i < k.size() && ++k[i] > seqs[i].k_cap) k[i++] = 0;
    if (i == k.size()) break;
  }
  return best;
}

TEST(SpecGate, ExpectedTokens) {
  EXPECT_DOUBLE_EQ(expected_tokens(0.5, 0), 1.0);
  EXPECT_DOUBLE_EQ(expected_tokens(0.5, 2), 1.75);
  EXPECT_DOUBLE_EQ(expected_tokens(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(expected_tokens(0.0, 16), 1.0);
}

TEST(SpecGate, DraftsWhereItPaysAndNotWhereItDoesNot) {
  // One sequence; a step costs 10 ms of weights plus 1 ms a row: drafting
  // 8 tokens at α 0.9 is worth it.
  StepPrice cheap{10e-3, 1e-3, 0};
  std::vector<GateSeq> one = {{100, 0.9, 8}};
  std::vector<int> k(1);
  choose_draft_lengths(one, cheap, 0, 0, k);
  EXPECT_GT(k[0], 4);
  // A proposer that is never right: no draft.
  one[0].alpha = 0.0;
  choose_draft_lengths(one, cheap, 0, 0, k);
  EXPECT_EQ(k[0], 0);
  // Long context where every verify row re-reads the KV: a row at 32K
  // costs 32768 · 2e-6 = 65 ms against a 10 ms step; α 0.8 does not pay.
  StepPrice deep{10e-3, 1e-3, 2e-6};
  one = {{32768, 0.8, 8}};
  choose_draft_lengths(one, deep, 0, 0, k);
  EXPECT_EQ(k[0], 0);
  // The same at depth 0 does.
  one[0].pos = 10;
  choose_draft_lengths(one, deep, 0, 0, k);
  EXPECT_GT(k[0], 0);
}

TEST(SpecGate, TurnsItselfDownUnderLoad) {
  // Rows cost a fifth of the fixed step: one sequence drafts, sixteen
  // decoding together (the step's E/T already high) draft less.
  StepPrice p{10e-3, 2e-3, 0};
  std::vector<int> k1(1), k16(16);
  std::vector<GateSeq> one = {{50, 0.7, 8}};
  choose_draft_lengths(one, p, 0, 0, k1);
  std::vector<GateSeq> many(16, GateSeq{50, 0.7, 8});
  choose_draft_lengths(many, p, 0, 0, k16);
  int total = 0;
  for (int v : k16) total += v;
  EXPECT_GT(k1[0], 0);
  EXPECT_LT(total, 16 * k1[0]);
}

TEST(SpecGate, MatchesExhaustiveSearch) {
  SplitMix64 g{7};
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(g.below(3));
    std::vector<GateSeq> seqs;
    for (int i = 0; i < n; ++i)
      seqs.push_back(
          {static_cast<int64_t>(g.below(40000)), g.uniform(), static_cast<int>(g.below(6))});
    const StepPrice p{1e-3 + 20e-3 * g.uniform(), 0.2e-3 + 3e-3 * g.uniform(),
                      g.uniform() < 0.5 ? 0 : 1e-7 * g.uniform()};
    std::vector<int> k(seqs.size());
    const double got = choose_draft_lengths(seqs, p, 0, 0, k);
    for (size_t i = 0; i < k.size(); ++i) {
      ASSERT_GE(k[i], 0);
      ASSERT_LE(k[i], seqs[i].k_cap);
    }
    EXPECT_NEAR(rate(seqs, p, k), got, 1e-9 * got);
    // Greedy by marginal ratio is optimal for this objective up to ties.
    EXPECT_GE(got, best_rate(seqs, p) * (1 - 1e-9)) << "trial " << trial;
  }
}

TEST(SpecGate, AcceptanceFollowsTheSequence) {
  AcceptanceEstimate a;
  EXPECT_DOUBLE_EQ(a.alpha(0.5), 0.5);  // only the prior
  for (int i = 0; i < 40; ++i) a.update(4, 4);
  EXPECT_GT(a.alpha(0.5), 0.95);
  // It stops matching: the estimate falls within some twenty steps.
  for (int i = 0; i < 20; ++i) a.update(1, 0);
  EXPECT_LT(a.alpha(0.5), 0.6);
  a.update(0, 0);  // nothing reached: no change
  const double before = a.alpha(0.5);
  a.update(0, 0);
  EXPECT_DOUBLE_EQ(a.alpha(0.5), before);
}

}  // namespace
}  // namespace sustain::spec

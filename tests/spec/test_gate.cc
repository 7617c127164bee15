// The speculation gate: draft lengths that maximise expected visible tokens
// per second of the step, checked against an exhaustive search.
#include "spec/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

// The price-learning drafts: twice the expected run of accepted tokens,
// within [2, k_cap]; a never-right proposer's drafts shrink to 2-3 tokens
// as its estimate falls from the prior, a right one's grow to the cap.
TEST(SpecGate, ExplorationDraftsAsLongAsTheAcceptanceMakesWorthReaching) {
  EXPECT_EQ(exploration_draft_length(0.5, 16), 4);
  EXPECT_EQ(exploration_draft_length(0.8, 16), 10);
  EXPECT_EQ(exploration_draft_length(0.9, 16), 16);
  EXPECT_EQ(exploration_draft_length(0.999, 16), 16);
  EXPECT_EQ(exploration_draft_length(1.0, 16), 16);
  EXPECT_EQ(exploration_draft_length(0.0, 16), 2);
  EXPECT_EQ(exploration_draft_length(1.0 / 3.0, 16), 3);
  EXPECT_EQ(exploration_draft_length(0.5, 3), 3);
  EXPECT_EQ(exploration_draft_length(0.0, 1), 1);
  EXPECT_EQ(exploration_draft_length(std::nan(""), 8), 8);
  // What the estimate says after one, two, three rejected first positions
  // (AcceptanceEstimate from the prior 0.5): 4, then 3 tokens.
  AcceptanceEstimate a;
  EXPECT_EQ(exploration_draft_length(a.alpha(0.5), 16), 4);
  a.update(1, 0);
  EXPECT_EQ(exploration_draft_length(a.alpha(0.5), 16), 3);
  a.update(1, 0);
  a.update(1, 0);
  EXPECT_EQ(exploration_draft_length(a.alpha(0.5), 16), 3);
  // And after a run of eight accepted out of eight: the cap.
  AcceptanceEstimate b;
  b.update(8, 8);
  EXPECT_EQ(exploration_draft_length(b.alpha(0.5), 16), 16);
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

// A verify step's cost that the linear price cannot follow: the measured
// curve of docs/speculative.md at 4K (f16 KV, smollm2 on 2 cores: 1.6x the
// decode step for one drafted token, 2.9x for 4, 3.0x for 8, 4.0x for 16,
// linear between). A straight line through the ends underprices the first
// rows and leads the plain gate to k = 4, worth 20 % less than k = 8 at
// α = 0.8. With the measured factors the gate tries the lengths its linear
// guess rates best, learns what each costs, and settles where the true rate
// is highest.
TEST(SpecGate, MeasuredCostFindsTheDraftLengthThatPays) {
  const double t1 = 10e-3;
  const double pts_r[] = {1, 2, 3, 5, 9, 17}, pts_c[] = {1.0, 1.6, 2.05, 2.9, 3.0, 4.0};
  auto true_cost = [&](int rows) {
    for (int i = 0; i + 1 < 6; ++i)
      if (rows <= pts_r[i + 1]) {
        const double f = (rows - pts_r[i]) / (pts_r[i + 1] - pts_r[i]);
        return t1 * (pts_c[i] + f * (pts_c[i + 1] - pts_c[i]));
      }
    return t1 * pts_c[5];
  };
  const double alpha = 0.8;
  const int64_t pos = 4096;
  const StepPrice lin{t1 - 1.875e-3, 1.875e-3, 0};  // T_lin(r) = 10 ms + 1.875 ms (r - 1)
  auto true_rate = [&](int k) { return expected_tokens(alpha, k) / true_cost(k + 1); };
  double best = 0;
  for (int k = 0; k <= 16; ++k) best = std::max(best, true_rate(k));
  ASSERT_NEAR(best, true_rate(8), 1e-12);

  std::vector<GateSeq> one = {{pos, alpha, 16}};
  std::vector<int> k(1);
  // The linear price alone.
  choose_draft_lengths(one, lin, 0, 0, k);
  const int plain = k[0];
  EXPECT_LT(true_rate(plain), 0.9 * best) << "plain gate chose k = " << plain;

  // The loop the engine runs: choose, run, record what the step cost.
  MeasuredVerifyCost m;
  std::vector<int> chosen;
  for (int step = 0; step < 60; ++step) {
    choose_draft_lengths(one, lin, 0, 0, k, &m);
    chosen.push_back(k[0]);
    const int rows = k[0] + 1;
    const double predicted = lin.per_step + lin.per_row * rows;
    m.observe(rows, pos, true_cost(rows), predicted, 0);
  }
  for (int i = 40; i < 60; ++i)
    EXPECT_GE(true_rate(chosen[i]), 0.97 * best) << "step " << i << ": k = " << chosen[i];
  // What it learned is per depth: another band still has no factors.
  EXPECT_GT(m.weight(9, pos), 0);
  EXPECT_DOUBLE_EQ(m.factor(9, 100, lin), 1.0);
  EXPECT_EQ(MeasuredVerifyCost::band(511), 0);
  EXPECT_EQ(MeasuredVerifyCost::band(512), 1);
  EXPECT_EQ(MeasuredVerifyCost::band(4096), 4);
  EXPECT_EQ(MeasuredVerifyCost::band(int64_t{1} << 40), MeasuredVerifyCost::kBands - 1);
  // One wild measurement moves a factor at most 4x.
  MeasuredVerifyCost w;
  const StepPrice ms{1e-3, 0, 0};
  w.observe(1, pos, 1.0, 1e-3, 0);
  EXPECT_DOUBLE_EQ(w.factor(1, pos, ms), 4.0);
  w.observe(0, pos, 1.0, 1e-3, 0);              // no such row count: ignored
  w.observe(18, pos, 1.0, 1e-3, 0);             // beyond the table: ignored
  EXPECT_DOUBLE_EQ(w.factor(5, pos, ms), 4.0);  // an unseen row count takes the decode factor
}

// Eight sequences decoding together, where the batch's cost is not the
// line the decode steps fit: from 9 rows the K-quant matmuls take the packed
// kernel (docs/kernels.md), and a 9-row step costs about what an 8-row one
// does, each row past it a third of a decode row. The line (4 ms + 1 ms a
// row) prices a draft at α 0.6 as a loss, so the plain gate never drafts;
// the engine's probes (every sequence kept idle drafts one token now and
// then) show what the bigger steps cost, and the measured batch factors
// then find the drafts that pay.
TEST(SpecGate, BatchMeasuredCostFindsDraftsTheLineOverprices) {
  constexpr int kSeqs = 8;
  const int64_t pos = 4096;
  const double alpha = 0.6;
  const StepPrice lin{4e-3, 1e-3, 0};
  auto lin_cost = [&](int64_t rows) { return lin.per_step + lin.per_row * double(rows); };
  auto true_cost = [&](int64_t rows) {
    return rows <= kSeqs ? lin_cost(rows) : 12e-3 + 0.3e-3 * double(rows - kSeqs);
  };
  auto true_rate = [&](const std::vector<int>& k) {
    double e = 0;
    int64_t rows = 0;
    for (int v : k) e += expected_tokens(alpha, v), rows += 1 + v;
    return e / true_cost(rows);
  };
  // The best the true cost allows (identical sequences: drafts spread evenly).
  double best = 0;
  for (int m = 0; m <= kSeqs * 4; ++m) {
    std::vector<int> k(kSeqs, m / kSeqs);
    for (int i = 0; i < m % kSeqs; ++i) ++k[size_t(i)];
    best = std::max(best, true_rate(k));
  }
  std::vector<GateSeq> seqs(kSeqs, GateSeq{pos, alpha, 4});
  std::vector<int> k(kSeqs);
  choose_draft_lengths(seqs, lin, 0, 0, k);
  for (int v : k) EXPECT_EQ(v, 0) << "the line says no draft pays";
  EXPECT_LT(true_rate(k), 0.75 * best);

  // The loop the engine runs: choose, probe the idle, run, record.
  MeasuredVerifyCost m;
  std::vector<ProbeSchedule> probes(kSeqs);
  std::vector<double> rates;
  for (int step = 0; step < 400; ++step) {
    choose_draft_lengths(seqs, lin, 0, 0, k, &m);
    for (int i = 0; i < kSeqs; ++i) {
      if (k[size_t(i)] > 0)
        probes[size_t(i)].drafted();
      else if (probes[size_t(i)].idle_step())
        k[size_t(i)] = 1;
    }
    int64_t rows = 0;
    for (int v : k) rows += 1 + v;
    m.observe_batch(kSeqs, rows, pos, true_cost(rows), lin_cost(rows), 0);
    for (int i = 0; i < kSeqs; ++i)
      if (k[size_t(i)] > 0) probes[size_t(i)].verified(true);  // α 0.6: most drafts accept some
    rates.push_back(true_rate(k));
  }
  double late = 0;
  for (size_t i = 300; i < rates.size(); ++i) late += rates[i] / 100;
  std::printf("[ measured ] 8 sequences, α 0.6: line %.3f, measured %.3f, best %.3f tok/ms\n",
              true_rate(std::vector<int>(kSeqs, 0)) / 1e3, late / 1e3, best / 1e3);
  EXPECT_GT(late, 0.9 * best);
  // Factors are kept per row count and depth band, apart from a lone
  // sequence's; an unseen count takes the nearest seen one below it.
  EXPECT_GT(m.batch_weight(16, pos), 0);
  EXPECT_DOUBLE_EQ(m.factor(16, pos, lin), 1.0);
  EXPECT_DOUBLE_EQ(m.batch_factor(kSeqs, 16, 100, lin), 1.0);
  MeasuredVerifyCost w;
  const StepPrice p12{3e-3, 1e-3, 0};  // 12 ms for 9 rows
  w.observe_batch(8, 9, pos, 6e-3, 12e-3, 0);
  EXPECT_DOUBLE_EQ(w.batch_factor(8, 9, pos, p12), 0.5);
  EXPECT_DOUBLE_EQ(w.batch_factor(8, 12, pos, p12), 0.5);
  EXPECT_DOUBLE_EQ(w.batch_factor(8, 8, pos, p12), 1.0);
  w.observe_batch(1, 9, pos, 6e-3, 12e-3, 0);   // one sequence: its own table
  w.observe_batch(8, 65, pos, 6e-3, 12e-3, 0);  // beyond the table: ignored
  EXPECT_DOUBLE_EQ(w.batch_weight(9, pos), 1.0);
  // With every factor 1 (each row count measured at what the price says),
  // the walk's best prefix is the marginal rule's choice.
  SplitMix64 g{11};
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(g.below(3));
    std::vector<GateSeq> ss;
    for (int i = 0; i < n; ++i) ss.push_back({pos, g.uniform(), static_cast<int>(g.below(6))});
    const StepPrice p{1e-3 + 20e-3 * g.uniform(), 0.2e-3 + 3e-3 * g.uniform(), 0};
    MeasuredVerifyCost ones;
    for (int r = 2; r <= MeasuredVerifyCost::kMaxBatchRows; ++r) {
      const double t = p.per_step + p.per_row * r;
      ones.observe_batch(2, r, pos, t, t, 0);
    }
    std::vector<int> plain(ss.size()), measured(ss.size());
    double undrafted = 0;
    const double v = choose_draft_lengths(ss, p, 0, 0, plain, nullptr, &undrafted);
    choose_draft_lengths(ss, p, 0, 0, measured, &ones);
    // Unless its gain is under kMinMeasuredGain: then no draft at all.
    if (v < kMinMeasuredGain * undrafted) std::fill(plain.begin(), plain.end(), 0);
    EXPECT_EQ(plain, measured) << "trial " << trial;
  }
}

// Two row counts measured at different times are compared through the
// price of now. A one-row step measured at 1 ms while the fit said 1 ms,
// then a two-row step at 1.2 ms after the fit moved to 2 ms (one
// descheduled step lifts a fit's per-step cost like that): the two-row step
// is the dearer, and a draft right one time in ten does not pay. Kept as
// ratios to the prediction of their day (1.0 and 0.6) the one-row step
// would be priced at 2 ms, and the draft would look like a bargain.
TEST(SpecGate, RowCountsMeasuredAtDifferentTimesAreComparedThroughOnePrice) {
  const int64_t pos = 100;
  const StepPrice then{1e-3, 0, 0}, now{2e-3, 0, 0};
  MeasuredVerifyCost m;
  m.observe(1, pos, 1e-3, 1e-3, 101);
  m.observe(2, pos + 1, 1.2e-3, 2e-3, 205);
  EXPECT_DOUBLE_EQ(m.factor(1, pos, then), 1.0);
  EXPECT_DOUBLE_EQ(m.factor(1, pos, now), 0.5);
  EXPECT_DOUBLE_EQ(m.factor(2, pos, now), 0.6);
  std::vector<GateSeq> one = {{pos + 2, 0.1, 1}};
  std::vector<int> k(1);
  double undrafted = 0;
  const double v = choose_draft_lengths(one, now, 0, 0, k, &m, &undrafted);
  EXPECT_EQ(k[0], 0);
  EXPECT_NEAR(v, 1 / 1e-3, 1e-6);
  EXPECT_DOUBLE_EQ(v, undrafted);
  // With a per-attended price the cell's own attended pairs are priced:
  // what the step cost over what the price says for that step.
  const StepPrice deep{1e-3, 0, 1e-6};
  EXPECT_NEAR(m.factor(1, pos, deep), 1e-3 / (1e-3 + 101e-6), 1e-12);

  // Noise only adds time: a slower step moves a cell by a quarter of the
  // forgetting step towards at most twice the record, a faster one
  // replaces it (and the first of a row count is taken whole).
  MeasuredVerifyCost q;
  q.observe(1, pos, 1e-3, 1e-3, 0);
  q.observe(1, pos, 3e-3, 1e-3, 0);  // weight 1.8 (the next step: not aged); counts as 2 ms
  EXPECT_NEAR(q.factor(1, pos, then), 1 + 0.25 * (2 - 1) / 1.8, 1e-12);
  q.observe(1, pos, 0.5e-3, 1e-3, 0);
  EXPECT_NEAR(q.factor(1, pos, then), 0.5, 1e-12);
  // A row count not measured for a while has aged: its next measurement
  // moves it further than it would have.
  MeasuredVerifyCost fresh, stale;
  for (MeasuredVerifyCost* c : {&fresh, &stale})
    for (int i = 0; i < 10; ++i) c->observe(1, pos, 1e-3, 1e-3, 0);
  for (int i = 0; i < 32; ++i) stale.observe(2, pos, 2e-3, 1e-3, 0);
  EXPECT_LT(stale.weight(1, pos), fresh.weight(1, pos));
  fresh.observe(1, pos, 2e-3, 1e-3, 0);
  stale.observe(1, pos, 2e-3, 1e-3, 0);
  EXPECT_GT(stale.factor(1, pos, then), fresh.factor(1, pos, then));
}

// A draft that is never right, on a noisy machine: a decode step costs
// 0.5 ms and a verify step of two rows 1 ms, but one step in four is
// descheduled for 4 ms, the first measured decode step among them, and the
// price's per-step cost follows the noise (a fit whose per-row cost came
// out 0). The loop the engine runs: choose, recheck, probe, run, record.
// Rechecks and the floor (a verify step never priced below its decode
// step) keep the gate from drafting after its first steps. A draft right
// one time in three still looks worth a third more tokens a step, so without
// rechecks, the one-row price measured in the descheduled first step would
// never be measured again, and the gate would draft every step (each draft
// row here doubles the step). A draft that is never right stops even
// without rechecks: its gain falls under kMinMeasuredGain.
TEST(SpecGate, ADraftThatIsNeverRightStopsOnANoisyMachine) {
  auto loop = [](bool rechecks, int64_t* n_rechecks, uint64_t right_one_in) {
    SplitMix64 g{7};
    MeasuredVerifyCost m;
    AcceptanceEstimate est;
    ProbeSchedule probe;
    PriceRecheck recheck;
    StepPrice price{0.8e-3, 0, 0};
    int drafted = 0;
    int64_t pos = 100;
    // The learning phase: one decode step (descheduled), one verify step.
    m.observe(1, pos, 4.5e-3, price.per_step, double(pos + 1));
    m.observe(2, pos + 1, 1e-3, price.per_step, double(2 * pos + 5));
    pos += 2;
    for (int step = 0; step < 160; ++step, ++pos) {
      std::vector<GateSeq> one = {{pos, est.alpha(0.05), 1}};
      std::vector<int> k(1);
      double undrafted = 0;
      const double v = choose_draft_lengths(one, price, 0, 0, k, &m, &undrafted);
      if (k[0] > 0 && rechecks && recheck.due(v, undrafted)) {
        k[0] = 0;
        ++*n_rechecks;
      } else if (k[0] > 0) {
        probe.drafted();
      } else if (probe.idle_step()) {
        k[0] = 1;
      }
      if (k[0] == 0) recheck.ran_undrafted();
      const int rows = 1 + k[0];
      const double seconds = 0.5e-3 * rows + (g.below(4) == 0 ? 4e-3 : 0);
      m.observe(rows, pos, seconds, price.per_step, double(rows * (pos + 1)));
      price.per_step += 0.3 * (seconds - price.per_step);  // the fit follows the noise
      if (k[0] > 0) {
        ++drafted;
        const bool right = right_one_in > 0 && g.below(right_one_in) == 0;
        est.update(1, right ? 1 : 0);
        probe.verified(right);
      }
    }
    return drafted;
  };
  int64_t n_rechecks = 0, unused = 0;
  const int with = loop(true, &n_rechecks, 3);
  const int without = loop(false, &unused, 3);
  const int never = loop(false, &unused, 0);
  std::printf(
      "[ measured ] right 1 in 3, noisy: %d of 160 steps drafted with rechecks (%lld "
      "rechecks), %d without; never right, without rechecks: %d\n",
      with, static_cast<long long>(n_rechecks), without, never);
  // (Deterministic: the noise is seeded. With rechecks it drafted 50 of 160
  // steps: a recheck stops it, a right probe starts it again for a while.)
  EXPECT_GT(without, 160 * 3 / 4);
  EXPECT_LT(with, without / 2);
  EXPECT_LT(never, 160 / 4);
}

// Rechecks: one choice in kInterval (on average; each interval drawn from
// kMinInterval to kMaxInterval) that wins narrowly runs undrafted; a wide
// win never does; a step that ran undrafted starts the count over.
TEST(SpecGate, RechecksComeOnlyWhileDraftingWinsNarrowly) {
  PriceRecheck r;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(r.due(2.0, 1.0));  // a wide win
  auto until_due = [&r] {
    int n = 1;
    while (!r.due(1.1, 1.0)) ++n;
    return n;
  };
  EXPECT_EQ(until_due(), PriceRecheck::kInterval);
  std::vector<int> seen(PriceRecheck::kMaxInterval + 1, 0);
  int sum = 0;
  for (int i = 0; i < 700; ++i) {
    const int n = until_due();
    ASSERT_GE(n, PriceRecheck::kMinInterval);
    ASSERT_LE(n, PriceRecheck::kMaxInterval);
    ++seen[size_t(n)];
    sum += n;
  }
  for (int n = PriceRecheck::kMinInterval; n <= PriceRecheck::kMaxInterval; ++n)
    EXPECT_GT(seen[size_t(n)], 50) << "interval " << n;
  EXPECT_NEAR(sum / 700.0, PriceRecheck::kInterval, 0.3);
  // An undrafted step starts the count over.
  for (int i = 0; i < 50; ++i) {
    for (int j = 1; j < PriceRecheck::kMinInterval; ++j) ASSERT_FALSE(r.due(1.1, 1.0));
    r.ran_undrafted();
    EXPECT_GE(until_due(), PriceRecheck::kMinInterval);
  }
}

// Probes of a sequence the gate keeps idle: after 16 idle steps at first;
// each probe that accepts nothing doubles the wait up to 256; an accepted
// token (from a probe or from a draft the gate allowed) brings it back to 16;
// a rejected draft that was not a probe leaves it alone.
TEST(SpecGate, ProbesBackOffWhileTheyFailAndReturnOnAcceptance) {
  ProbeSchedule p;
  // Idle steps until the next probe is due (and counted as that probe).
  auto steps_to_probe = [&p] {
    int n = 1;
    while (!p.idle_step()) ++n;
    return n;
  };
  EXPECT_EQ(steps_to_probe(), 16);
  p.verified(false);
  EXPECT_EQ(steps_to_probe(), 32);
  p.verified(false);
  EXPECT_EQ(steps_to_probe(), 64);
  for (int i = 0; i < 10; ++i) {
    p.verified(false);
    steps_to_probe();
  }
  EXPECT_EQ(p.interval(), ProbeSchedule::kMaxInterval);
  // Never right: over 10,000 idle steps, about 40 probes, not 625.
  int probes = 0;
  for (int i = 0; i < 10000; ++i)
    if (p.idle_step()) {
      ++probes;
      p.verified(false);
    }
  EXPECT_LE(probes, 10000 / ProbeSchedule::kMaxInterval + 1);
  // A probe accepts a token: back to 16.
  while (!p.idle_step()) {
  }
  p.verified(true);
  EXPECT_EQ(steps_to_probe(), 16);
  p.verified(false);
  EXPECT_EQ(p.interval(), 32);
  // A draft the gate allowed, rejected: not a probe, the interval stays;
  // the idle count starts over.
  for (int i = 0; i < 20; ++i) ASSERT_FALSE(p.idle_step());
  p.drafted();
  p.verified(false);
  EXPECT_EQ(p.interval(), 32);
  EXPECT_EQ(steps_to_probe(), 32);
  // ... and accepted: back to 16.
  p.verified(false);  // (that probe failed: 64)
  p.drafted();
  p.verified(true);
  EXPECT_EQ(steps_to_probe(), 16);
}

}  // namespace
}  // namespace sustain::spec

// Gating speculation by measured economics (issue 15 item 5): each step,
// how many tokens to draft for each decoding sequence (0 = none) so that the
// batch's expected visible tokens per second of step time is largest.
//
// A draft of k tokens whose positions are each accepted with probability α
// (given the ones before them were) yields 1 + α + … + α^k visible tokens in
// expectation: the j-th drafted token adds α^j. It costs one more forward
// row at the sequence's position, priced by the engine's measured step cost
// t = a + b·rows + c·attended (the same linear model that sizes prefill
// chunks, fitted on decode steps), i.e. b + c·(keys it attends). The step's
// value is E/T, expected tokens over predicted seconds; a drafted token is
// worth adding iff its own ratio α^j / cost beats the step's current E/T.
// Marginal ratios fall with j (α^j falls, cost grows), so taking candidates
// from best to worst ratio while they beat the running E/T gives each
// sequence a prefix of its draft, and stops where speculation stops paying:
// at long context (c large), under batching (a is shared by more rows, so E/T
// is already high) and with proposers that are rarely right (α small).
//
// α is estimated per sequence from its own verify steps (accepted over
// reached draft positions, with forgetting), starting from a prior that is
// the engine-wide estimate of the same proposer mix.
#pragma once

#include <cstdint>
#include <span>

#include "base/splitmix.h"

namespace sustain::spec {

// Per-position acceptance, counted with forgetting (old steps weigh less, so
// a sequence whose output starts or stops repeating is followed).
class AcceptanceEstimate {
 public:
  // A verify step reached `reached` draft positions (the first rejection
  // ends a step) and accepted `accepted` of them.
  void update(int64_t reached, int64_t accepted);
  // The estimate, shrunk towards `prior` while there are few observations.
  double alpha(double prior) const;
  double weight() const { return reached_; }

  // Forgetting per verify step, and the prior's weight in positions.
  static constexpr double kForget = 0.9;
  static constexpr double kPriorWeight = 2.0;

 private:
  double reached_ = 0, accepted_ = 0;
};

// When to test again a sequence the gate keeps from drafting: a probe (a
// draft of the configured minimum length) once it has been kept idle for
// `interval()` steps. Each probe that accepts nothing doubles the interval,
// up to kMaxInterval; any accepted draft token brings it back to
// kMinInterval. A proposer that is never right then costs a probe every 256
// steps instead of every 16 (at 4K context on 2 cores a probe's extra row
// costs a third to a half of a step), and one that starts to match is
// noticed within the interval it has reached.
class ProbeSchedule {
 public:
  static constexpr int32_t kMinInterval = 16;
  static constexpr int32_t kMaxInterval = 256;

  // A step the gate kept the sequence from drafting. True when a probe is
  // due instead (the caller drafts; the idle count starts over).
  bool idle_step();
  // A step the gate let the sequence draft on its own merits.
  void drafted() { idle_ = 0; }
  // The verify step of a draft ended, with or without an accepted token.
  void verified(bool accepted_any);
  int32_t interval() const { return interval_; }

 private:
  int32_t idle_ = 0, interval_ = kMinInterval;
  bool probing_ = false;  // the draft being verified is a probe
};

// A draft is priced against the step without it, and only steps that run
// without drafts re-measure that step's cost. A gate that drafts every step
// never sees it again: one noisy measurement (a descheduled decode step, or
// a fitted per-row cost of 0 on a machine whose noise swamps one row's
// cost) can make a draft that is never right look free for good. So while
// drafting wins only narrowly (predicted tokens per second under kMargin
// times the undrafted step's), every kInterval-th step runs without drafts
// and its cost is measured again. Where drafting wins by more, a stale
// price cannot turn the choice, and nothing is spent; where it wins
// narrowly the recheck costs at most one step's drafts in kInterval, which
// were worth under kMargin - 1 of a step. The interval is drawn afresh
// each time, kMinInterval to kMaxInterval (kInterval on average): at a
// fixed one, rechecks fell again and again on the same phase of another
// process's time slices (every fourth step descheduled, every eighth step
// a recheck: each recheck measured the noise).
class PriceRecheck {
 public:
  static constexpr int32_t kMinInterval = 5, kMaxInterval = 11;
  static constexpr int32_t kInterval = (kMinInterval + kMaxInterval) / 2;
  static constexpr double kMargin = 1.25;

  // The gate chose drafts predicted to give `drafted` tokens per second
  // where the step without them gives `undrafted`. True when this step is
  // to run without drafts instead (the count starts over).
  bool due(double drafted, double undrafted);
  // A step ran without drafts (the gate chose none, or a recheck).
  void ran_undrafted();

 private:
  SplitMix64 rng_{0x5eedu};
  int32_t since_ = 0, interval_ = kInterval;
};

// The step cost the gate prices drafts with (seconds): per step, per
// forward row, per attended (query, key) pair.
struct StepPrice {
  double per_step = 0, per_row = 0, per_attended = 0;
};

// What the linear price misses for one sequence's verify step. Its cost is
// not linear in the draft length: a row count where the matmuls switch to
// the packed kernel (16 tokens) is cheaper than the one below it, the
// attention takes a block's queries together up to 16 per KV head, and a
// step has per-row costs outside the forward (proposing, sampling, rollback);
// at depth the verify-cost curve (docs/speculative.md) rises by 1.1-2.4x for
// the first drafted token and far less for the next. So each single-sequence
// decode or verify step that runs is recorded here, per row count and depth
// band (a factor of two in depth), with forgetting: what it took and how
// many (query, key) pairs it attended. The gate prices a single-sequence
// draft of k tokens as the linear prediction times the factor for k + 1
// rows at that depth: what such steps have cost over what the price *now*
// predicts for them. (Kept as a ratio to the prediction when measured, two
// row counts measured at different times would be compared through two
// different fits: one descheduled step lifts the fit's per-step cost by
// half, and every row count measured after it looked cheaper than one
// measured before.) A row count not yet seen in the band takes the band's
// plain decode factor (or 1): the linear model's guess, which the first
// such step then corrects.
//
// Noise on a shared machine only adds time (a step is descheduled, never
// sped up), so a step faster than a cell's record replaces it, and a slower
// one moves it by a quarter of the usual exponential-forgetting step
// towards at most twice the record: each
// row count follows its undisturbed cost (rising within a few dozen steps
// where the machine really slows), and two row counts are compared at like
// quantiles. A cell also ages while
// other row counts are measured (its weight halves every kStaleHalfLife
// steps recorded elsewhere), so that a row count the gate has stopped
// choosing is re-learned from its next measurements rather than held at
// what it cost long ago.
class MeasuredVerifyCost {
 public:
  static constexpr int kMaxRows = 17;  // a draft of up to 16 tokens
  static constexpr int kBands = 12;    // depth < 512, < 1K, ..., >= 512K
  static constexpr double kForget = 0.8;
  static constexpr double kStaleHalfLife = 16;
  static constexpr double kSlowerWeight = 0.25;
  // Steps of several sequences: by the step's total rows, up to this many.
  static constexpr int kMaxBatchRows = 64;

  // A single-sequence step of `rows` rows whose first row sits at `pos`,
  // attending `attended` (query, key) pairs, measured `seconds`; `predicted`
  // is what the linear price said (one measurement counts at most 4x or 1/4
  // of it: the first of a new depth, or one the OS descheduled).
  void observe(int64_t rows, int64_t pos, double seconds, double predicted, double attended);
  // The factor to apply to `price`'s linear prediction (1 where nothing is
  // known): the recorded cost over what `price` predicts for the steps
  // recorded.
  double factor(int64_t rows, int64_t pos, const StepPrice& price) const;
  // Steps recorded for this row count in pos's band (with forgetting, and
  // aged by the steps recorded elsewhere since).
  double weight(int64_t rows, int64_t pos) const;

  // The same for a decode-only step of `seqs` >= 2 sequences and `rows`
  // rows in all (their decode rows and drafts), whose sequences sit at
  // `mean_pos` on average. Kept apart from the single-sequence table: the
  // row count where a batch's matmuls change kernel, and what its
  // attention costs, are not a lone sequence's. A row count not yet seen
  // takes the factor of the nearest seen count below it, down to the plain
  // decode step of `seqs` rows (or 1).
  void observe_batch(int64_t seqs, int64_t rows, int64_t mean_pos, double seconds, double predicted,
                     double attended);
  double batch_factor(int64_t seqs, int64_t rows, int64_t mean_pos, const StepPrice& price) const;
  double batch_weight(int64_t rows, int64_t mean_pos) const;
  static int band(int64_t pos);

 private:
  struct Cell {
    double seconds = 0, attended = 0, weight = 0;
    uint64_t last = 0;  // clock_ when last recorded
  };
  void record(Cell& c, double seconds, double predicted, double attended);
  static double ratio(const Cell& c, int64_t rows, const StepPrice& price);
  double aged(const Cell& c) const;  // its weight, aged to now
  uint64_t clock_ = 0;               // steps recorded, single and batch
  Cell cells_[kBands][kMaxRows + 1];
  Cell batch_[kBands][kMaxBatchRows + 1];
};

// One decoding sequence: the position of its last (not yet computed) token,
// its acceptance estimate, and the most it may draft this step.
struct GateSeq {
  int64_t pos = 0;
  double alpha = 0;
  int k_cap = 0;
};

// Chooses k[i] in [0, seqs[i].k_cap] for every sequence. `other_rows` and
// `other_attended` are the step's rows that are not decode rows of these
// sequences; they cost time and yield no token this step. The engine passes
// the decode rows of sequences with nothing to draft (one row each, which
// the batch factors below count as sequences).
// Returns the predicted expected visible tokens per second of the chosen
// step (0 when the price is not positive); `undrafted`, when given, gets the
// same for the step with no drafts (PriceRecheck compares the two).
//
// With `measured` given and a step of one sequence alone (no other rows),
// every k in [0, k_cap] is priced as MeasuredVerifyCost says and the best
// expected tokens per second wins (an exhaustive search: the measured cost
// need not grow evenly with k, so the marginal rule does not apply). With
// several sequences decoding and no prefill rows, the candidates are taken
// in the marginal rule's order (best ratio first) and every prefix of that
// order is priced as the linear prediction times the measured batch factor
// for its total rows; the prefix with the most expected tokens per second
// wins. With every factor 1 that is the marginal rule's own choice. Either
// way a step with drafts is never priced below the same step without them
// (it does that step's work and more), so noisy factors cannot make a draft
// that is never right look free; and with measured costs, drafts are chosen
// only if they beat the step without them by kMinMeasuredGain.
// With measured costs, the least gain in expected tokens per second for
// which a step drafts at all. Where a step's rows are nearly free (decode
// waits for memory; at 512 tokens of context a 2-row step of llama-3.2-1b
// measured as fast as a 1-row one) any acceptance above 0 made a draft
// pay: a proposer right 1 % of the time drafted a token on 49 of 49 steps,
// and the row it adds, priced from the fastest of noisy samples, and the
// work outside the forward (proposing, sampling the row, rolling back) were
// what that run lost (0.94x of no speculation). Such a sequence is then
// kept from drafting and probed now and then (ProbeSchedule).
inline constexpr double kMinMeasuredGain = 1.03;

double choose_draft_lengths(std::span<const GateSeq> seqs, const StepPrice& price,
                            int64_t other_rows, double other_attended, std::span<int> k,
                            const MeasuredVerifyCost* measured = nullptr,
                            double* undrafted = nullptr);

// Expected visible tokens of a verify step with k drafted tokens at
// per-position acceptance alpha: 1 + α + … + α^k.
double expected_tokens(double alpha, int k);

// How many tokens a sequence drafts on the steps that teach the gate its
// price (the engine alternates drafted and undrafted steps until it has
// seen decode steps of two sizes): about twice the run of accepted tokens
// its acceptance estimate expects, ceil(2 / (1 - α)), at least 2 and at
// most k_cap. A draft that long rarely ends before its first rejection
// (at α = 0.8, one in nine), so it teaches the acceptance estimate what a
// full draft would, while a proposer that is rarely right drafts 3-4
// tokens on those steps instead of k_cap (16 rejected rows a step at
// draft_max 16).
int exploration_draft_length(double alpha, int k_cap);

}  // namespace sustain::spec

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

// The step cost the gate prices drafts with (seconds): per step, per
// forward row, per attended (query, key) pair.
struct StepPrice {
  double per_step = 0, per_row = 0, per_attended = 0;
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
// sequences (prefill chunks); they cost time and yield no token this step.
// Returns the predicted expected visible tokens per second of the chosen
// step (0 when the price is not positive).
double choose_draft_lengths(std::span<const GateSeq> seqs, const StepPrice& price,
                            int64_t other_rows, double other_attended, std::span<int> k);

// Expected visible tokens of a verify step with k drafted tokens at
// per-position acceptance alpha: 1 + α + … + α^k.
double expected_tokens(double alpha, int k);

}  // namespace sustain::spec

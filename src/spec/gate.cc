#include "spec/gate.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sustain::spec {

void AcceptanceEstimate::update(int64_t reached, int64_t accepted) {
  if (reached <= 0) return;
  reached_ = kForget * reached_ + static_cast<double>(reached);
  accepted_ = kForget * accepted_ + static_cast<double>(std::min(accepted, reached));
}

double AcceptanceEstimate::alpha(double prior) const {
  return (accepted_ + kPriorWeight * prior) / (reached_ + kPriorWeight);
}

double expected_tokens(double alpha, int k) {
  double e = 1, a = 1;
  for (int j = 1; j <= k; ++j) {
    a *= alpha;
    e += a;
  }
  return e;
}

double choose_draft_lengths(std::span<const GateSeq> seqs, const StepPrice& price,
                            int64_t other_rows, double other_attended, std::span<int> k) {
  std::fill(k.begin(), k.end(), 0);
  const double a = std::max(0.0, price.per_step), b = std::max(0.0, price.per_row),
               c = std::max(0.0, price.per_attended);
  // The step without drafts: every sequence's decode row plus the rest.
  double t = a + b * static_cast<double>(other_rows) + c * other_attended;
  double e = 0;
  for (const GateSeq& s : seqs) {
    t += b + c * static_cast<double>(s.pos + 1);
    e += 1;
  }
  if (!(t > 0)) return 0;
  // Each sequence's next candidate is its (k+1)-th drafted token; ratios
  // fall with k, so the best candidate overall is always some sequence's
  // next one.
  std::vector<double> gain(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) gain[i] = seqs[i].alpha;
  while (true) {
    size_t best = seqs.size();
    double best_ratio = 0, best_cost = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (k[i] >= seqs[i].k_cap || !(gain[i] > 0)) continue;
      // The (k+1)-th draft sits at position pos + k + 1 and attends pos + k + 2 keys.
      const double cost = b + c * static_cast<double>(seqs[i].pos + k[i] + 2);
      const double ratio = cost > 0 ? gain[i] / cost : INFINITY;
      if (best == seqs.size() || ratio > best_ratio) {
        best = i;
        best_ratio = ratio;
        best_cost = cost;
      }
    }
    // Worth it only if it raises the step's tokens per second.
    if (best == seqs.size() || !(best_ratio > e / t)) break;
    e += gain[best];
    t += best_cost;
    gain[best] *= seqs[best].alpha;
    ++k[best];
  }
  return e / t;
}

}  // namespace sustain::spec

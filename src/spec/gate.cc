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

bool ProbeSchedule::idle_step() {
  if (++idle_ < interval_) return false;
  idle_ = 0;
  probing_ = true;
  return true;
}

void ProbeSchedule::verified(bool accepted_any) {
  if (accepted_any) {
    interval_ = kMinInterval;
  } else if (probing_) {
    interval_ = std::min(2 * interval_, kMaxInterval);
  }
  probing_ = false;
}

int MeasuredVerifyCost::band(int64_t pos) {
  int b = 0;
  for (int64_t edge = 512; b < kBands - 1 && pos >= edge; edge *= 2) ++b;
  return b;
}

void MeasuredVerifyCost::observe(int64_t rows, int64_t pos, double seconds, double predicted) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0) || !(predicted > 0)) return;
  // A step the OS descheduled, or the first of a new depth, must not swing
  // the factor far: one observation moves it at most to 4x or 1/4.
  const double r = std::clamp(seconds / predicted, 0.25, 4.0);
  Cell& c = cells_[band(pos)][rows];
  c.weight = kForget * c.weight + 1;
  c.ratio += (r - c.ratio) / c.weight;
}

double MeasuredVerifyCost::factor(int64_t rows, int64_t pos) const {
  const int b = band(pos);
  if (rows >= 1 && rows <= kMaxRows && cells_[b][rows].weight > 0) return cells_[b][rows].ratio;
  return cells_[b][1].weight > 0 ? cells_[b][1].ratio : 1.0;
}

double MeasuredVerifyCost::weight(int64_t rows, int64_t pos) const {
  if (rows < 1 || rows > kMaxRows) return 0;
  return cells_[band(pos)][rows].weight;
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
                            int64_t other_rows, double other_attended, std::span<int> k,
                            const MeasuredVerifyCost* measured) {
  std::fill(k.begin(), k.end(), 0);
  const double a = std::max(0.0, price.per_step), b = std::max(0.0, price.per_row),
               c = std::max(0.0, price.per_attended);
  if (measured != nullptr && seqs.size() == 1 && other_rows == 0 && !(other_attended > 0)) {
    // One sequence alone: every draft length, at what such steps cost.
    const GateSeq& s = seqs[0];
    double best = 0;
    for (int j = 0; j <= std::max(0, s.k_cap); ++j) {
      // Rows at s.pos .. s.pos + j, each attending its position + 1 keys.
      const double rows = j + 1;
      const double attended = rows * static_cast<double>(s.pos) + rows * (rows + 1) / 2.0;
      const double t = (a + b * rows + c * attended) * measured->factor(j + 1, s.pos);
      if (!(t > 0)) return 0;
      const double v = expected_tokens(s.alpha, j) / t;
      if (v > best) {  // ties go to the shorter draft
        best = v;
        k[0] = j;
      }
    }
    return best;
  }
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

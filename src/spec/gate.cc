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

void MeasuredVerifyCost::record(Cell& c, double seconds, double predicted) {
  // A step the OS descheduled, or the first of a new depth, must not swing
  // the factor far: one observation moves it at most to 4x or 1/4.
  const double r = std::clamp(seconds / predicted, 0.25, 4.0);
  c.weight = kForget * c.weight + 1;
  c.ratio += (r - c.ratio) / c.weight;
}

void MeasuredVerifyCost::observe(int64_t rows, int64_t pos, double seconds, double predicted) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0) || !(predicted > 0)) return;
  record(cells_[band(pos)][rows], seconds, predicted);
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

void MeasuredVerifyCost::observe_batch(int64_t seqs, int64_t rows, int64_t mean_pos, double seconds,
                                       double predicted) {
  if (seqs < 2 || rows < seqs || rows > kMaxBatchRows || !(seconds > 0) || !(predicted > 0)) return;
  record(batch_[band(mean_pos)][rows], seconds, predicted);
}

double MeasuredVerifyCost::batch_factor(int64_t seqs, int64_t rows, int64_t mean_pos) const {
  // The nearest row count at or below `rows` that was seen: a step that
  // crossed a kernel switch is priced as the steps past it were.
  const int b = band(mean_pos);
  for (int64_t r = std::min<int64_t>(rows, kMaxBatchRows); r >= std::max<int64_t>(seqs, 2); --r)
    if (batch_[b][r].weight > 0) return batch_[b][r].ratio;
  return 1.0;
}

double MeasuredVerifyCost::batch_weight(int64_t rows, int64_t mean_pos) const {
  if (rows < 2 || rows > kMaxBatchRows) return 0;
  return batch_[band(mean_pos)][rows].weight;
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
  double e = 0, pos_sum = static_cast<double>(other_attended) - static_cast<double>(other_rows);
  for (const GateSeq& s : seqs) {
    t += b + c * static_cast<double>(s.pos + 1);
    e += 1;
    pos_sum += static_cast<double>(s.pos);
  }
  if (!(t > 0)) return 0;
  const int64_t n_seqs = static_cast<int64_t>(seqs.size()) + other_rows;
  // Several sequences decoding alone: the batch's measured factors apply.
  const bool batch_measured = measured != nullptr && n_seqs >= 2;
  const auto mean_pos = static_cast<int64_t>(std::max(0.0, pos_sum) / std::max<int64_t>(1, n_seqs));
  // Each sequence's next candidate is its (k+1)-th drafted token; ratios
  // fall with k, so the best candidate overall is always some sequence's
  // next one. Without measured factors the walk stops at the first
  // candidate that does not raise the step's tokens per second (no later
  // one can); with them it goes on, and the best prefix of the walk wins.
  std::vector<double> gain(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) gain[i] = seqs[i].alpha;
  std::vector<size_t> order;  // the walk: which sequence each candidate extends
  double best_value =
      batch_measured ? e / (t * measured->batch_factor(n_seqs, n_seqs, mean_pos)) : e / t;
  size_t best_len = 0;
  std::vector<int> kk(seqs.size(), 0);
  while (true) {
    size_t best = seqs.size();
    double best_ratio = 0, best_cost = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (kk[i] >= seqs[i].k_cap || !(gain[i] > 0)) continue;
      // The (k+1)-th draft sits at position pos + k + 1 and attends pos + k + 2 keys.
      const double cost = b + c * static_cast<double>(seqs[i].pos + kk[i] + 2);
      const double ratio = cost > 0 ? gain[i] / cost : INFINITY;
      if (best == seqs.size() || ratio > best_ratio) {
        best = i;
        best_ratio = ratio;
        best_cost = cost;
      }
    }
    if (best == seqs.size()) break;
    // Worth it only if it raises the step's tokens per second.
    if (!batch_measured && !(best_ratio > e / t)) break;
    e += gain[best];
    t += best_cost;
    gain[best] *= seqs[best].alpha;
    ++kk[best];
    order.push_back(best);
    const int64_t rows = n_seqs + static_cast<int64_t>(order.size());
    const double value =
        batch_measured ? e / (t * measured->batch_factor(n_seqs, rows, mean_pos)) : e / t;
    if (!batch_measured || value > best_value) {  // ties go to the shorter walk
      best_value = value;
      best_len = order.size();
    }
  }
  for (size_t j = 0; j < best_len; ++j) ++k[order[j]];
  return best_value;
}

}  // namespace sustain::spec

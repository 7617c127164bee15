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

bool PriceRecheck::due(double drafted, double undrafted) {
  if (!(drafted < kMargin * undrafted) || ++since_ < interval_) return false;
  ran_undrafted();
  return true;
}

void PriceRecheck::ran_undrafted() {
  since_ = 0;
  interval_ = kMinInterval + static_cast<int32_t>(rng_.below(kMaxInterval - kMinInterval + 1));
}

int MeasuredVerifyCost::band(int64_t pos) {
  int b = 0;
  for (int64_t edge = 512; b < kBands - 1 && pos >= edge; edge *= 2) ++b;
  return b;
}

void MeasuredVerifyCost::record(Cell& c, double seconds, double predicted, double attended) {
  const double r = std::clamp(seconds, 0.25 * predicted, 4.0 * predicted);
  const bool first = c.weight == 0;
  // Aged by the steps recorded elsewhere since this cell's last.
  c.weight = kForget * aged(c) + 1;
  c.last = ++clock_;
  // Faster than the record: the record was noise, or the machine sped up;
  // either way the step's cost is at most this. Slower: a quarter of the
  // usual move, towards at most twice the record (a step descheduled for
  // ten times its length moves it as one twice as slow does). The first
  // step of a row count is taken whole: if the OS descheduled it, the next
  // faster one undoes it.
  if (first || r < c.seconds) {
    c.seconds = r;
  } else {
    c.seconds += kSlowerWeight * (std::min(r, 2 * c.seconds) - c.seconds) / c.weight;
  }
  c.attended += (attended - c.attended) / c.weight;
}

double MeasuredVerifyCost::ratio(const Cell& c, int64_t rows, const StepPrice& price) {
  const double t = std::max(0.0, price.per_step) +
                   std::max(0.0, price.per_row) * static_cast<double>(rows) +
                   std::max(0.0, price.per_attended) * c.attended;
  return t > 0 ? c.seconds / t : 1.0;
}

void MeasuredVerifyCost::observe(int64_t rows, int64_t pos, double seconds, double predicted,
                                 double attended) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0) || !(predicted > 0)) return;
  record(cells_[band(pos)][rows], seconds, predicted, attended);
}

double MeasuredVerifyCost::factor(int64_t rows, int64_t pos, const StepPrice& price) const {
  const int b = band(pos);
  if (rows >= 1 && rows <= kMaxRows && cells_[b][rows].weight > 0)
    return ratio(cells_[b][rows], rows, price);
  return cells_[b][1].weight > 0 ? ratio(cells_[b][1], 1, price) : 1.0;
}

double MeasuredVerifyCost::aged(const Cell& c) const {
  return c.weight * std::exp2(-static_cast<double>(clock_ - c.last) / kStaleHalfLife);
}

double MeasuredVerifyCost::weight(int64_t rows, int64_t pos) const {
  if (rows < 1 || rows > kMaxRows) return 0;
  return aged(cells_[band(pos)][rows]);
}

void MeasuredVerifyCost::observe_batch(int64_t seqs, int64_t rows, int64_t mean_pos, double seconds,
                                       double predicted, double attended) {
  if (seqs < 2 || rows < seqs || rows > kMaxBatchRows || !(seconds > 0) || !(predicted > 0)) return;
  record(batch_[band(mean_pos)][rows], seconds, predicted, attended);
}

double MeasuredVerifyCost::batch_factor(int64_t seqs, int64_t rows, int64_t mean_pos,
                                        const StepPrice& price) const {
  // The nearest row count at or below `rows` that was seen: a step that
  // crossed a kernel switch is priced as the steps past it were.
  const int b = band(mean_pos);
  for (int64_t r = std::min<int64_t>(rows, kMaxBatchRows); r >= std::max<int64_t>(seqs, 2); --r)
    if (batch_[b][r].weight > 0) return ratio(batch_[b][r], r, price);
  return 1.0;
}

double MeasuredVerifyCost::batch_weight(int64_t rows, int64_t mean_pos) const {
  if (rows < 2 || rows > kMaxBatchRows) return 0;
  return aged(batch_[band(mean_pos)][rows]);
}

double expected_tokens(double alpha, int k) {
  double e = 1, a = 1;
  for (int j = 1; j <= k; ++j) {
    a *= alpha;
    e += a;
  }
  return e;
}

int exploration_draft_length(double alpha, int k_cap) {
  if (k_cap <= 2) return std::max(0, k_cap);
  if (!(alpha < 1.0)) return k_cap;  // also NaN
  const double len = std::ceil(2.0 / (1.0 - std::max(0.0, alpha)) - 1e-9);
  return len >= k_cap ? k_cap : std::max(2, static_cast<int>(len));
}

double choose_draft_lengths(std::span<const GateSeq> seqs, const StepPrice& price,
                            int64_t other_rows, double other_attended, std::span<int> k,
                            const MeasuredVerifyCost* measured, double* undrafted) {
  std::fill(k.begin(), k.end(), 0);
  if (undrafted != nullptr) *undrafted = 0;
  const double a = std::max(0.0, price.per_step), b = std::max(0.0, price.per_row),
               c = std::max(0.0, price.per_attended);
  if (measured != nullptr && seqs.size() == 1 && other_rows == 0 && !(other_attended > 0)) {
    // One sequence alone: every draft length, at what such steps cost.
    const GateSeq& s = seqs[0];
    double best = 0, t0 = 0;
    double v0 = 0;
    for (int j = 0; j <= std::max(0, s.k_cap); ++j) {
      // Rows at s.pos .. s.pos + j, each attending its position + 1 keys.
      const double rows = j + 1;
      const double attended = rows * static_cast<double>(s.pos) + rows * (rows + 1) / 2.0;
      // A verify step does all of the decode step's work and more: whatever
      // noise left in the factors, it is never priced below it.
      const double t =
          std::max(t0, (a + b * rows + c * attended) * measured->factor(j + 1, s.pos, price));
      if (j == 0) t0 = t;
      if (!(t > 0)) return 0;
      const double v = expected_tokens(s.alpha, j) / t;
      if (j == 0) v0 = v;
      if (j == 0 && undrafted != nullptr) *undrafted = v;
      if (v > best) {  // ties go to the shorter draft
        best = v;
        k[0] = j;
      }
    }
    if (k[0] > 0 && best < kMinMeasuredGain * v0) {
      k[0] = 0;
      best = v0;
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
  // The step without drafts; a step with drafts is never priced below it.
  const double t0 =
      batch_measured ? t * measured->batch_factor(n_seqs, n_seqs, mean_pos, price) : t;
  double best_value = e / t0;
  const double value0 = best_value;
  size_t best_len = 0;
  if (undrafted != nullptr) *undrafted = best_value;
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
        batch_measured ? e / std::max(t0, t * measured->batch_factor(n_seqs, rows, mean_pos, price))
                       : e / t;
    if (!batch_measured || value > best_value) {  // ties go to the shorter walk
      best_value = value;
      best_len = order.size();
    }
  }
  if (batch_measured && best_len > 0 && best_value < kMinMeasuredGain * value0) {
    best_len = 0;
    best_value = value0;
  }
  for (size_t j = 0; j < best_len; ++j) ++k[order[j]];
  return best_value;
}

}  // namespace sustain::spec

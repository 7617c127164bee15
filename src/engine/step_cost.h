// Private to engine/: what a step costs, learned online from the steps the
// engine runs, so the scheduler can size each step's prefill chunk to keep a
// latency target (EngineConfig::tpot_target_ms, docs/engine.md).
//
// A step's wall time is modelled as
//   t = a + b · rows + c · attended
// where rows is the number of tokens in the forward (decode rows, drafts and
// prefill tokens) and attended the number of (query, key) pairs attention
// reads: Σ over rows of the row's position + 1. `a` is what every step pays
// once (reading the weights, sampling, bookkeeping), `b` the per-token
// matmul work, `c` the attention work, which grows with context. The three
// are fitted by recursive least squares with forgetting (old steps weigh
// less, so the fit follows a machine whose speed drifts), with residuals
// clipped to a few times their running mean so that one step the OS
// descheduled does not bend the fit.
#pragma once

#include <array>
#include <cstdint>

namespace sustain::engine {

struct StepShape {
  int64_t rows = 0;
  double attended = 0;  // Σ (position + 1) over the rows

  // Adds n consecutive rows at positions [from, from + n).
  void add_run(int64_t from, int64_t n) {
    rows += n;
    attended += static_cast<double>(n) * static_cast<double>(from) +
                static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  }
};

class StepCostModel {
 public:
  // ready() once the steps seen span at least this many rows (the decode
  // steps the speculation gate learns from differ by a few draft rows).
  explicit StepCostModel(int64_t ready_row_spread = 16);
  // A measured step.
  void observe(const StepShape& s, double seconds);
  // Predicted seconds for a step of this shape; never negative, and never
  // decreasing in rows or attended (negative fitted slopes count as 0).
  double predict(const StepShape& s) const;
  // Enough steps of different sizes seen for predictions to mean something.
  bool ready() const;
  // The fitted coefficients: seconds per step, per row, per attended pair.
  double per_step() const;
  double per_row() const;
  double per_attended() const;
  int64_t observations() const { return n_; }

 private:
  std::array<double, 3> features(const StepShape& s) const;
  std::array<double, 3> theta_{};
  std::array<std::array<double, 3>, 3> p_{};
  double mean_abs_residual_ = 0;
  int64_t n_ = 0;
  int64_t min_rows_ = 0, max_rows_ = 0;
  int64_t ready_row_spread_;
};

}  // namespace sustain::engine

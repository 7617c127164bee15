#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>

namespace sustain::engine {
namespace {

// Features are scaled to be of order 1 for the steps a server runs (a
// 64-token chunk; eight sequences at 32K), so that one initial covariance
// suits all three coefficients.
constexpr double kRowScale = 64.0;
constexpr double kAttendedScale = 262144.0;
// Forgetting factor: a step's weight halves after about 140 steps.
constexpr double kForget = 0.995;
constexpr double kInitialCovariance = 1e3;
// Covariance bound (per diagonal entry): along directions the steps do not
// excite, forgetting would otherwise grow it without end.
constexpr double kMaxCovariance = 1e6;
// Residuals beyond this many times their running mean are clipped.
constexpr double kClip = 4.0;
// Steps seen before predict() is trusted (and a spread of their row counts).
constexpr int64_t kReadySteps = 8;

}  // namespace

StepCostModel::StepCostModel(int64_t ready_row_spread) : ready_row_spread_(ready_row_spread) {
  for (int i = 0; i < 3; ++i) p_[i][i] = kInitialCovariance;
}

std::array<double, 3> StepCostModel::features(const StepShape& s) const {
  return {1.0, static_cast<double>(s.rows) / kRowScale, s.attended / kAttendedScale};
}

void StepCostModel::observe(const StepShape& s, double seconds) {
  if (s.rows <= 0 || !std::isfinite(seconds) || seconds < 0) return;
  const auto x = features(s);
  double px[3], xpx = 0;
  for (int i = 0; i < 3; ++i) {
    px[i] = 0;
    for (int j = 0; j < 3; ++j) px[i] += p_[i][j] * x[j];
    xpx += x[i] * px[i];
  }
  double pred = 0;
  for (int i = 0; i < 3; ++i) pred += theta_[i] * x[i];
  const double raw = seconds - pred;
  double r = raw;
  if (n_ >= kReadySteps) {
    // Never tighter than a few percent of the step: a fit that was exact
    // must still follow a machine that slows down.
    const double lim = kClip * std::max(mean_abs_residual_, 0.02 * std::abs(pred));
    r = std::clamp(r, -lim, lim);
  }
  // The running mean sees the unclipped residual, so that after a real
  // change in speed the clip loosens and the fit catches up.
  mean_abs_residual_ = n_ == 0 ? std::abs(raw) : 0.95 * mean_abs_residual_ + 0.05 * std::abs(raw);
  const double denom = kForget + xpx;
  double k[3];
  for (int i = 0; i < 3; ++i) k[i] = px[i] / denom;
  for (int i = 0; i < 3; ++i) theta_[i] += k[i] * r;
  // P = (P − k (P x)ᵀ) / λ, kept symmetric and bounded.
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) p_[i][j] = (p_[i][j] - k[i] * px[j]) / kForget;
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j) p_[i][j] = p_[j][i] = 0.5 * (p_[i][j] + p_[j][i]);
  for (int i = 0; i < 3; ++i) {
    if (p_[i][i] <= kMaxCovariance) continue;
    const double f = kMaxCovariance / p_[i][i];
    for (int j = 0; j < 3; ++j) {
      p_[i][j] *= std::sqrt(f);
      p_[j][i] *= std::sqrt(f);
    }
  }
  if (n_ == 0) {
    min_rows_ = max_rows_ = s.rows;
  } else {
    min_rows_ = std::min(min_rows_, s.rows);
    max_rows_ = std::max(max_rows_, s.rows);
  }
  ++n_;
}

double StepCostModel::predict(const StepShape& s) const {
  const auto x = features(s);
  const double t = theta_[0] + std::max(theta_[1], 0.0) * x[1] + std::max(theta_[2], 0.0) * x[2];
  return std::max(t, 0.0);
}

bool StepCostModel::ready() const {
  return n_ >= kReadySteps && max_rows_ - min_rows_ >= ready_row_spread_;
}

double StepCostModel::per_step() const {
  return theta_[0];
}
double StepCostModel::per_row() const {
  return std::max(theta_[1], 0.0) / kRowScale;
}
double StepCostModel::per_attended() const {
  return std::max(theta_[2], 0.0) / kAttendedScale;
}

}  // namespace sustain::engine

#include "bench/observer.h"

#include <algorithm>

namespace sustain::bench {
namespace {

class SilentBar : public ProgressBar {
 public:
  void update(double, const std::string&) override {}
  void finish(const std::string&) override {}
};

}  // namespace

std::unique_ptr<ProgressBar> SilentObserver::bar(const std::string&) {
  return std::make_unique<SilentBar>();
}

void PhaseBars::operator()(const std::string& phase, double fraction, const std::string& detail) {
  if (phase != phase_) {
    if (bar_) bar_->finish("");
    phase_ = phase;
    bar_ = obs_.bar("bench " + phase);
  }
  bar_->update(std::clamp(fraction, 0.0, 1.0), detail);
}

void PhaseBars::done() {
  if (bar_) bar_->finish("");
  bar_.reset();
  phase_.clear();
}

}  // namespace sustain::bench

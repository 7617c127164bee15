// The soak's verdict: from what a run saw (bench/soak.h) to checks that pass,
// fail or cannot be judged, and the report's `soak` section. Pure functions
// of the samples, so every check can be made to fail in a unit test.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/soak.h"

namespace sustain::bench {

struct SoakThresholds {
  double max_rss_drift_pct_per_h = 1.0;
  // Throughput may fall this much (first vs last window), plus three
  // standard errors of the difference: the noise of mixed traffic.
  double max_throughput_drop_pct = 10.0;
  // Seconds at the start left out of the RSS slope (allocator and caches
  // filling); < 0: a quarter of the run, at most 10 minutes.
  double warmup_s = -1;
  // The drifts are judged only over at least this many seconds of samples;
  // a shorter run reports them without a verdict.
  double min_drift_window_s = 120;
};

struct SoakCheck {
  std::string name;    // errors, errors_5xx, pages_leaked, rss_drift, throughput_drift, ...
  std::string status;  // "pass", "fail" or "not judged"
  std::string detail;  // the figure and the bound, or why it was not judged
};

struct SoakVerdict {
  bool pass = true;  // no check failed
  std::vector<SoakCheck> checks;
  int64_t errors = 0, errors_5xx = 0;
  int64_t pages_leaked = -1;          // -1: the server does not say
  double rss_drift_pct_per_h = NAN;   // NaN: not measured
  double throughput_drift_pct = NAN;  // (last − first) / first × 100
  double throughput_noise_pct = NAN;  // 3 standard errors of that difference
  double warmup_s = 0;
  double drift_window_s = 0;  // the length of each throughput window
  bool deterministic_ok = false;
  int probes_compared = 0;
};

// The least-squares slope of y over x (per unit of x); NaN for < 2 points
// or a single x.
double slope(const std::vector<double>& x, const std::vector<double>& y);

SoakVerdict judge_soak(const SoakResult& r, const SoakThresholds& th);

// The report's `soak` section (docs/bench.md): the fields first,
// then the checks, the traffic, every sample and every probe.
nlohmann::json soak_json(const SoakConfig& c, const SoakResult& r, const SoakThresholds& th,
                         const SoakVerdict& v);

}  // namespace sustain::bench

// The concurrency ladder's driver, shared by the in-process engine and any
// OpenAI-compatible HTTP endpoint: fixed concurrency (N clients, each
// sending its next request when the last one ends) and Poisson arrivals
// (exponential gaps at a given rate, seeded, each request on its own thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "bench/stats.h"

namespace sustain::bench {

using BenchClock = std::chrono::steady_clock;

inline double seconds_between(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Something that serves one request per call, blocking, and can be called
// from several threads at once. `index` selects the request's prompt (each
// index has its own, so requests share no prefix unless the target wants
// them to); times are seconds since `origin`.
class LoadTarget {
 public:
  virtual ~LoadTarget() = default;
  virtual RequestTiming run(int64_t index, BenchClock::time_point origin) = 0;
  // The last error a request hit (for the report), "" if none.
  virtual std::string last_error() const = 0;
  // Around each level: what the target itself counted during it (the
  // in-process engine: steps under the TPOT target, misses by reason), as
  // (name, value) pairs for the report; none by default.
  virtual void level_begin() {}
  virtual std::vector<std::pair<std::string, double>> level_counters() { return {}; }
};

struct LoadOptions {
  std::vector<int> concurrency = {1, 2, 4, 8};
  int requests_per_client = 2;        // fixed concurrency N sends N × this many requests
  std::vector<double> poisson_rates;  // requests/s; empty: derived from poisson_fractions
  // Rates as fractions of the highest request throughput the fixed levels
  // measured (so the arrivals load the target at, e.g., half and 90 %).
  std::vector<double> poisson_fractions = {0.5, 0.9};
  int poisson_requests = 16;
  int warmup_requests = 1;  // untimed, before the first level
  uint64_t seed = 1234;
  // (phase, fraction done, detail) for a progress display.
  std::function<void(const std::string&, double, const std::string&)> progress;
};

struct LoadLevel {
  std::string mode;     // "fixed" or "poisson"
  int concurrency = 0;  // fixed: clients; poisson: the most requests in flight observed
  double rate = 0;      // poisson: requests/s offered
  std::vector<RequestTiming> requests;
  LoadMetrics metrics;
  std::vector<std::pair<std::string, double>> target_counters;  // LoadTarget::level_counters
  std::string error;  // the last request error, if any request failed
};

// kInvalidArgument for an empty or non-positive concurrency list, a
// non-positive rate or request count.
Expected<std::vector<LoadLevel>> run_load(LoadTarget& target, const LoadOptions& opt);

}  // namespace sustain::bench

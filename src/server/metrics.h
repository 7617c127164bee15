// GET /metrics: the engine's counters and histograms plus the server's own,
// in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/api.h"

namespace sustain::server {

// What the HTTP layer counts itself. Updated from handler threads.
struct ServerCounters {
  std::atomic<uint64_t> http_requests{0};     // every request routed
  std::atomic<uint64_t> queue_rejections{0};  // 429s for a full queue
  std::atomic<uint64_t> client_errors{0};     // 4xx other than 429
  std::atomic<uint64_t> disconnects{0};       // clients gone before the end
  std::atomic<uint64_t> completions_ok{0};    // requests answered in full
  std::atomic<uint64_t> read_timeouts{0};     // 408s: headers or body not in time
  std::atomic<uint64_t> write_timeouts{0};    // responses cut off: the client stopped reading
  std::atomic<uint64_t> write_too_slow{0};    // ... of which: it read below --min-write-rate
  std::atomic<uint64_t> busy_rejections{0};   // 503s: every handler thread was busy
};

// A plain copy of ServerCounters (the atomics are not copyable).
struct ServerCountersSnapshot {
  uint64_t http_requests = 0, queue_rejections = 0, client_errors = 0, disconnects = 0,
           completions_ok = 0, read_timeouts = 0, write_timeouts = 0, write_too_slow = 0,
           busy_rejections = 0;
};
ServerCountersSnapshot snapshot(const ServerCounters& c);

// Renders every metric, prefixed "sustain_", and the process's memory and
// open descriptors under Prometheus's standard `process_` names. `stats`
// null (the model is still loading) leaves out the engine's metrics.
std::string render_metrics(const engine::EngineStats* stats, const ServerCountersSnapshot& c);

// One histogram in Prometheus form (cumulative buckets, +Inf, _sum, _count).
std::string render_histogram(const std::string& name, const std::string& help,
                             const engine::Histogram& h);

}  // namespace sustain::server

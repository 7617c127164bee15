// The soak: hours of mixed traffic against one OpenAI-compatible server
// (docs/bench.md "Soak"), sampled at a fixed interval, ending with a verdict
// (bench/soak_verdict.h). The traffic mixes prompt lengths, streaming and
// not, clients that disconnect mid-stream, bursts to several times the base
// concurrency, temperatures 0 and 0.8 and malformed requests; a fixed
// temperature-0 probe repeats through the run so its texts can be compared.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/observer.h"

namespace sustain::bench {

struct SoakConfig {
  std::string url;  // http://HOST:PORT of the server under test
  std::string api_key, model_name;
  pid_t server_pid = 0;  // > 0: RSS read from /proc/PID/status (our own child)
  double duration_s = 60;
  double sample_interval_s = 10;
  int concurrency = 4;  // base clients; bursts add (burst_factor − 1) × this many
  int burst_factor = 4;
  // A burst lasts burst_s and starts every burst_every_s (the first after one
  // period); 0: a quarter and a fifth of the duration, so every run has some.
  double burst_every_s = 0, burst_s = 0;
  int64_t min_prompt_tokens = 64, max_prompt_tokens = 8192;  // log-uniform between
  int max_tokens = 64;                                       // each request asks 8..this many
  double stream_share = 0.5, disconnect_share = 0.2;         // disconnect: share of streams cut off
  double hot_share = 0.5;                                    // temperature 0.8 (else 0)
  double malformed_share = 0.05;
  double probe_interval_s = 0;  // determinism probe period; 0: duration / 10, at least 5 s
  double idle_wait_s = 30;      // after the load, how long the server may take to go idle
  double request_timeout_s = 300;
  uint64_t seed = 1234;
  // Set (by a signal, say) to end the traffic early; the result says so.
  const std::atomic<bool>* interrupt = nullptr;
};

// One sample of the server's state (from /metrics and /proc) and of the
// traffic in the interval that ended at t_s. -1: the server did not say.
struct SoakSample {
  double t_s = 0;
  double rss_bytes = -1;
  double kv_pages_used = -1, kv_pages_cached = -1;
  double queue = -1, running = -1;
  double tokens = 0;  // visible tokens received in the interval
  double tok_s = 0;
  int64_t requests = 0, errors = 0;  // ended in the interval
  bool burst = false;                // a burst overlapped the interval
  // The server's own counters so far (cumulative): 503s for busy handler
  // threads, clients gone before the end, read or write deadlines hit.
  double busy_rejections = -1, client_disconnects = -1, timeouts = -1;
};

// One run of the determinism probe: its text and when it was sent.
struct ProbeResult {
  double t_s = 0;
  bool ok = false;
  std::string text;
};

struct SoakResult {
  double duration_s = 0;  // the traffic's length (the config's)
  double wall_s = 0;      // until the last request ended (in-flight ones are waited for)
  int64_t requests = 0;   // every request sent, probes included
  // Failures by kind (docs/bench.md: connect, transport, http_5xx, http_4xx,
  // malformed_not_4xx, stream_error, stream_incomplete, bad_response).
  std::map<std::string, int64_t> errors;
  int64_t errors_5xx = 0;
  // What is not a failure, by kind: ok, malformed_4xx, disconnected, rejected_429.
  std::map<std::string, int64_t> outcomes;
  std::vector<SoakSample> samples;
  std::vector<ProbeResult> probes;
  // After the load: the state once the server was idle (or idle_wait_s ran out).
  bool idle = false;
  double idle_kv_pages_used = -1, idle_kv_pages_cached = -1;
  int64_t prompt_tokens_min = 0, prompt_tokens_max = 0;
  std::vector<std::string> error_examples;  // the first few, for the report
  bool server_metrics = false;              // /metrics answered with sustain's gauges
  std::string server_problem;               // set by the caller: our child died, or exited non-zero
  bool interrupted = false;                 // c.interrupt ended the traffic before c.duration_s
};

// Runs the traffic for c.duration_s against c.url, then waits for the server
// to go idle and reads its pages. kInvalidArgument naming the field for a
// bad config; kUnavailable when the server does not answer before the start.
Expected<SoakResult> run_soak(const SoakConfig& c, Observer& obs);

// kInvalidArgument naming the flag for a value run_soak cannot use.
Status check_soak_config(const SoakConfig& c);

// "60s", "10m", "1h", "90" (seconds), "1.5h" → seconds; kInvalidArgument
// naming `flag` for anything else or a value ≤ 0.
Expected<double> parse_duration(const std::string& s, const char* flag);

}  // namespace sustain::bench

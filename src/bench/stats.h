// Statistics for bench reports (DESIGN.md §6): percentiles, summaries with
// their spread, and the per-request latency metrics (TTFT, TPOT, ITL, E2E)
// computed from token timestamps. Names and formulas are written into every
// report because tools disagree on them; docs/bench.md lists them.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace sustain::bench {

// The p-th percentile (p in [0, 100]) of `x`, by linear interpolation
// between closest ranks (numpy's default, Hyndman & Fan type 7): sort x,
// h = (n − 1)·p/100, result = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
// kInvalidArgument for an empty sample or p outside [0, 100].
Expected<double> percentile(std::vector<double> x, double p);

// A sample and its spread. Empty samples give n = 0 and zeros.
struct Summary {
  int64_t n = 0;
  double mean = 0, stddev = 0;  // stddev: sample (n − 1) standard deviation; 0 when n < 2
  double min = 0, max = 0;
  double p50 = 0, p95 = 0, p99 = 0;
};
Summary summarize(const std::vector<double>& x);

// One request as a client saw it, times in seconds from an arbitrary origin.
// `token_times` holds one entry per *emission* the client observed (an
// engine token, or an SSE event that may carry several tokens); only
// user-visible tokens belong here (draft, padding and retried tokens never).
struct RequestTiming {
  double t_submit = 0;
  std::vector<double> token_times;
  double t_end = 0;           // response complete
  int64_t output_tokens = 0;  // user-visible tokens (from usage for HTTP)
  int64_t prompt_tokens = 0;
  bool ok = true;
};

// Per-request metrics:
//   TTFT = t_first_token − t_submit
//   E2E  = t_end − t_submit
//   TPOT = (E2E − TTFT) / (output_tokens − 1)      (only when output_tokens ≥ 2)
//   ITL  = t_token[i+1] − t_token[i]               (every gap, pooled over requests)
//   decode tok/s of one stream = 1 / TPOT
struct RequestMetrics {
  double ttft = 0, e2e = 0;
  bool has_tpot = false;
  double tpot = 0;
  std::vector<double> itl;
};
// kInvalidArgument when the request has no token, or times go backwards.
Expected<RequestMetrics> request_metrics(const RequestTiming& r);

// The decode time charged to each visible token after the first, from the
// engine's token timestamps `t` and the step that emitted each token: a
// step that emitted b tokens (a verified draft and its correction) is
// charged t(its last token) − t(the previous step's last token), 1/b of it
// per token; tokens emitted by the first token's own step cost 0. Without
// speculation each step emits one token and the charges are the gaps
// between tokens. The charges sum to t(last) − t(first step's last token),
// so their mean is the rep's TPOT, and their percentiles stay meaningful
// when tokens arrive in bursts (the gaps inside a burst are ~0, which made
// 1 / P50(gap) read 10,000 tok/s). kInvalidArgument when the sizes differ,
// or time or steps go backwards.
Expected<std::vector<double>> per_token_decode_s(const std::vector<double>& t,
                                                 const std::vector<uint64_t>& step);

// Metrics of a set of requests run together (one rung of a concurrency
// ladder). Failed requests (ok = false) are counted, never timed.
struct LoadMetrics {
  int64_t requests = 0, failed = 0;
  int64_t output_tokens = 0, prompt_tokens = 0;
  double wall_s = 0;             // first submit → last end
  Summary ttft, tpot, itl, e2e;  // seconds
  Summary stream_tok_s;          // per request: 1 / TPOT (single-stream speed)
  double aggregate_tok_s = 0;    // Σ output_tokens / wall_s
};
Expected<LoadMetrics> load_metrics(const std::vector<RequestTiming>& reqs);

// Scheduling efficiency of a fixed-concurrency level: the time its work
// would take if prefill and decode each ran at the speed they reach alone,
// beside the time it took.
//   prefill_alone_s: one request's TTFT with nothing else running (given:
//     the median TTFT of the concurrency-1 level);
//   decode_gap_alone_s: the time per token while decoding alone: for each
//     request, the mean of its gaps during which no request of the level
//     was waiting for its first token (so the step carried decoding streams
//     only), scaled by events per token where an event carried several
//     tokens; then the median over the requests. A mean, not a median of
//     gaps: under speculation a verified draft's tokens arrive together, and
//     most gaps are 0;
//   ideal_s = Σ prefill_alone_s · (prompt_i / prompt_alone)
//             + Σ (output_i − 1) / concurrency · decode_gap_alone_s
//   efficiency = ideal_s / wall_s (1 = no time lost to scheduling).
// has_decode_alone is false when no gap ran without a prefill beside it
// (then ideal_s and efficiency are 0).
struct IdealTime {
  double prefill_alone_s = 0, decode_gap_alone_s = 0;
  int64_t decode_gaps_alone = 0;
  bool has_decode_alone = false;
  double ideal_s = 0, wall_s = 0, efficiency = 0;
};
IdealTime ideal_time(const std::vector<RequestTiming>& reqs, int concurrency,
                     double prefill_alone_s, int64_t prompt_alone_tokens);

}  // namespace sustain::bench

#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sustain::bench {

Expected<double> percentile(std::vector<double> x, double p) {
  if (x.empty()) return error(Code::kInvalidArgument, "percentile of an empty sample");
  if (!(p >= 0.0 && p <= 100.0))
    return error(Code::kInvalidArgument, "percentile p={} is outside [0, 100]", p);
  std::sort(x.begin(), x.end());
  const double h = (static_cast<double>(x.size()) - 1.0) * p / 100.0;
  const auto lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (h - static_cast<double>(lo)) * (x[hi] - x[lo]);
}

Summary summarize(const std::vector<double>& x) {
  Summary s;
  if (x.empty()) return s;
  s.n = static_cast<int64_t>(x.size());
  std::vector<double> v = x;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double d : v) sum += d;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n > 1) {
    double ss = 0;
    for (double d : v) ss += (d - s.mean) * (d - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(s.n - 1));
  }
  s.p50 = *percentile(v, 50);
  s.p95 = *percentile(v, 95);
  s.p99 = *percentile(v, 99);
  return s;
}

Expected<RequestMetrics> request_metrics(const RequestTiming& r) {
  if (r.token_times.empty())
    return error(Code::kInvalidArgument, "request has no token timestamp (output_tokens={})",
                 r.output_tokens);
  if (r.token_times.front() < r.t_submit)
    return error(Code::kInvalidArgument, "first token at {} s precedes the submit at {} s",
                 r.token_times.front(), r.t_submit);
  if (r.t_end < r.token_times.back())
    return error(Code::kInvalidArgument, "end at {} s precedes the last token at {} s", r.t_end,
                 r.token_times.back());
  RequestMetrics m;
  m.ttft = r.token_times.front() - r.t_submit;
  m.e2e = r.t_end - r.t_submit;
  for (size_t i = 1; i < r.token_times.size(); ++i) {
    const double gap = r.token_times[i] - r.token_times[i - 1];
    if (gap < 0)
      return error(Code::kInvalidArgument, "token {} at {} s precedes token {} at {} s", i,
                   r.token_times[i], i - 1, r.token_times[i - 1]);
    m.itl.push_back(gap);
  }
  if (r.output_tokens >= 2) {
    m.has_tpot = true;
    m.tpot = (m.e2e - m.ttft) / static_cast<double>(r.output_tokens - 1);
  }
  return m;
}

Expected<std::vector<double>> per_token_decode_s(const std::vector<double>& t,
                                                 const std::vector<uint64_t>& step) {
  if (t.size() != step.size())
    return error(Code::kInvalidArgument, "{} token timestamps but {} step numbers", t.size(),
                 step.size());
  std::vector<double> out;
  if (t.size() < 2) return out;
  out.reserve(t.size() - 1);
  // [begin, end) of the current step's tokens; `prev_end` the time its
  // predecessor's last token was emitted.
  size_t begin = 0;
  while (begin < t.size() && step[begin] == step[0]) ++begin;
  for (size_t i = 1; i < begin; ++i) out.push_back(0.0);  // beside the first token
  double prev_end = t[begin - 1];
  while (begin < t.size()) {
    size_t end = begin;
    while (end < t.size() && step[end] == step[begin]) ++end;
    if (step[begin] < step[begin - 1])
      return error(Code::kInvalidArgument, "token {} is from step {}, after step {}", begin,
                   step[begin], step[begin - 1]);
    const double took = t[end - 1] - prev_end;
    if (took < 0)
      return error(Code::kInvalidArgument, "token {} at {} s precedes token {} at {} s", end - 1,
                   t[end - 1], begin - 1, prev_end);
    for (size_t i = begin; i < end; ++i) out.push_back(took / static_cast<double>(end - begin));
    prev_end = t[end - 1];
    begin = end;
  }
  return out;
}

Expected<LoadMetrics> load_metrics(const std::vector<RequestTiming>& reqs) {
  LoadMetrics out;
  std::vector<double> ttft, tpot, itl, e2e, rate;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestTiming& r = reqs[i];
    ++out.requests;
    if (!r.ok) {
      ++out.failed;
      continue;
    }
    auto m = request_metrics(r);
    if (!m) return m.status().with_context(fmt::format("request {}", i));
    t0 = std::min(t0, r.t_submit);
    t1 = std::max(t1, r.t_end);
    out.output_tokens += r.output_tokens;
    out.prompt_tokens += r.prompt_tokens;
    ttft.push_back(m->ttft);
    e2e.push_back(m->e2e);
    itl.insert(itl.end(), m->itl.begin(), m->itl.end());
    if (m->has_tpot) {
      tpot.push_back(m->tpot);
      if (m->tpot > 0) rate.push_back(1.0 / m->tpot);
    }
  }
  if (t1 > t0) {
    out.wall_s = t1 - t0;
    out.aggregate_tok_s = static_cast<double>(out.output_tokens) / out.wall_s;
  }
  out.ttft = summarize(ttft);
  out.tpot = summarize(tpot);
  out.itl = summarize(itl);
  out.e2e = summarize(e2e);
  out.stream_tok_s = summarize(rate);
  return out;
}

IdealTime ideal_time(const std::vector<RequestTiming>& reqs, int concurrency,
                     double prefill_alone_s, int64_t prompt_alone_tokens) {
  IdealTime out;
  out.prefill_alone_s = prefill_alone_s;
  // Intervals during which some request waited for its first token.
  std::vector<std::pair<double, double>> waits;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const RequestTiming& r : reqs) {
    if (!r.ok || r.token_times.empty()) continue;
    waits.emplace_back(r.t_submit, r.token_times.front());
    t0 = std::min(t0, r.t_submit);
    t1 = std::max(t1, r.t_end);
  }
  std::sort(waits.begin(), waits.end());
  auto overlaps_wait = [&](double a, double b) {
    for (const auto& [w0, w1] : waits) {
      if (w0 >= b) break;
      if (w1 > a) return true;
    }
    return false;
  };
  // Per request, the time per token while it decoded alone: the mean of its
  // alone gaps (a verified draft's tokens arrive together, so a median of
  // gaps would read 0), times events per token (a server that puts several
  // tokens in one SSE event gives fewer gaps than tokens).
  std::vector<double> per_token;
  int64_t n_alone = 0;
  double prefill = 0, decode_steps = 0;
  for (const RequestTiming& r : reqs) {
    if (!r.ok || r.token_times.empty()) continue;
    double sum = 0;
    int64_t n = 0;
    for (size_t i = 1; i < r.token_times.size(); ++i)
      if (!overlaps_wait(r.token_times[i - 1], r.token_times[i])) {
        sum += r.token_times[i] - r.token_times[i - 1];
        ++n;
      }
    if (n > 0) {
      const auto events = static_cast<double>(r.token_times.size());
      const double tokens = static_cast<double>(r.output_tokens);
      const double scale = events > 1 && tokens > events ? (events - 1) / (tokens - 1) : 1.0;
      per_token.push_back(sum / static_cast<double>(n) * scale);
      n_alone += n;
    }
    prefill += prompt_alone_tokens > 0 ? prefill_alone_s * static_cast<double>(r.prompt_tokens) /
                                             static_cast<double>(prompt_alone_tokens)
                                       : prefill_alone_s;
    decode_steps += static_cast<double>(std::max<int64_t>(r.output_tokens - 1, 0));
  }
  if (t1 > t0) out.wall_s = t1 - t0;
  out.decode_gaps_alone = n_alone;
  if (per_token.empty() || concurrency < 1) return out;
  out.has_decode_alone = true;
  out.decode_gap_alone_s = *percentile(per_token, 50);
  out.ideal_s = prefill + decode_steps / concurrency * out.decode_gap_alone_s;
  if (out.wall_s > 0) out.efficiency = out.ideal_s / out.wall_s;
  return out;
}

}  // namespace sustain::bench

#include "bench/soak_verdict.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace sustain::bench {

using nlohmann::json;

double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return NAN;
  const double mx = std::accumulate(x.begin(), x.begin() + n, 0.0) / n;
  const double my = std::accumulate(y.begin(), y.begin() + n, 0.0) / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  return sxx > 0 ? sxy / sxx : NAN;
}

namespace {

struct MeanSe {
  double mean = NAN, se = NAN;
  size_t n = 0;
};

MeanSe mean_se(const std::vector<double>& v) {
  MeanSe m;
  m.n = v.size();
  if (v.empty()) return m;
  m.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double ss = 0;
  for (double x : v) ss += (x - m.mean) * (x - m.mean);
  m.se = v.size() > 1 ? std::sqrt(ss / (v.size() - 1) / v.size()) : 0;
  return m;
}

void add(SoakVerdict& v, std::string name, bool ok, std::string detail) {
  if (!ok) v.pass = false;
  v.checks.push_back({std::move(name), ok ? "pass" : "fail", std::move(detail)});
}

void not_judged(SoakVerdict& v, std::string name, std::string why) {
  v.checks.push_back({std::move(name), "not judged", std::move(why)});
}

void judge_rss(const SoakResult& r, const SoakThresholds& th, SoakVerdict& v) {
  std::vector<double> t, rss;
  for (const SoakSample& s : r.samples)
    if (s.t_s >= v.warmup_s && s.rss_bytes > 0) {
      t.push_back(s.t_s);
      rss.push_back(s.rss_bytes);
    }
  if (rss.size() < 2) {
    not_judged(v, "rss_drift",
               fmt::format("{} RSS sample(s) after the {:.0f} s warm-up (the server's RSS is "
                           "read from /proc for our own child, else from /metrics)",
                           rss.size(), v.warmup_s));
    return;
  }
  const double mean = std::accumulate(rss.begin(), rss.end(), 0.0) / rss.size();
  v.rss_drift_pct_per_h = slope(t, rss) * 3600 / mean * 100;
  const double window = t.back() - t.front();
  const std::string fig = fmt::format(
      "{:+.2f} %/h (least squares over {} samples from {:.0f} s to {:.0f} s; mean "
      "{:.1f} MiB)",
      v.rss_drift_pct_per_h, rss.size(), t.front(), t.back(), mean / 1048576.0);
  if (window < th.min_drift_window_s) {
    not_judged(v, "rss_drift",
               fmt::format("{}: the window is shorter than {:.0f} s", fig, th.min_drift_window_s));
    return;
  }
  add(v, "rss_drift", v.rss_drift_pct_per_h < th.max_rss_drift_pct_per_h,
      fmt::format("{}; bound < {:.2f} %/h", fig, th.max_rss_drift_pct_per_h));
}

// First vs last tenth of the run (10 minutes for runs over 100 minutes),
// over the samples no burst touched, so both windows carry the same load.
void judge_throughput(const SoakResult& r, const SoakThresholds& th, SoakVerdict& v) {
  const double dur = r.duration_s;
  v.drift_window_s = std::min(dur / 10, 600.0);
  std::vector<double> first, last;
  double interval = 0;
  // A sample covers (previous t, t]: it belongs to a window by its middle,
  // so a sampler a few milliseconds late does not push it out.
  double t_prev = 0;
  for (const SoakSample& s : r.samples) {
    const double mid = (t_prev + s.t_s) / 2;
    t_prev = s.t_s;
    if (s.burst) continue;
    if (mid <= v.drift_window_s)
      first.push_back(s.tok_s);
    else if (mid >= dur - v.drift_window_s)
      last.push_back(s.tok_s);
  }
  if (r.samples.size() >= 2) interval = r.samples[1].t_s - r.samples[0].t_s;
  const MeanSe a = mean_se(first), b = mean_se(last);
  if (a.n == 0 || b.n == 0 || !(a.mean > 0)) {
    not_judged(v, "throughput_drift",
               fmt::format("{} sample(s) in the first {:.0f} s and {} in the last without a "
                           "burst (a longer run, or a shorter --sample-interval)",
                           a.n, v.drift_window_s, b.n));
    return;
  }
  v.throughput_drift_pct = (b.mean - a.mean) / a.mean * 100;
  v.throughput_noise_pct = 3 * std::sqrt(a.se * a.se + b.se * b.se) / a.mean * 100;
  const std::string fig = fmt::format(
      "{:+.1f} % ({:.1f} tok/s over {} sample(s) in the first {:.0f} s, {:.1f} over {} in the "
      "last; noise ±{:.1f} %)",
      v.throughput_drift_pct, a.mean, a.n, v.drift_window_s, b.mean, b.n, v.throughput_noise_pct);
  if (dur < th.min_drift_window_s || a.n < 2 || b.n < 2) {
    not_judged(v, "throughput_drift",
               fmt::format("{}: the run is shorter than {:.0f} s or a window holds fewer than 2 "
                           "samples (interval {:.0f} s)",
                           fig, th.min_drift_window_s, interval));
    return;
  }
  const double bound = th.max_throughput_drop_pct + v.throughput_noise_pct;
  add(v, "throughput_drift", v.throughput_drift_pct > -bound,
      fmt::format("{}; bound: no drop past {:.1f} %", fig, bound));
}

void judge_probes(const SoakResult& r, SoakVerdict& v) {
  const ProbeResult* ref = nullptr;
  int same = 0, differ = 0, failed = 0;
  for (const ProbeResult& p : r.probes) {
    if (!p.ok) {
      ++failed;
      continue;
    }
    if (ref == nullptr) {
      ref = &p;
      continue;
    }
    (p.text == ref->text ? same : differ)++;
  }
  v.probes_compared = same + differ;
  v.deterministic_ok = differ == 0 && failed == 0 && v.probes_compared > 0;
  if (v.probes_compared == 0 && failed == 0) {
    not_judged(v, "determinism",
               fmt::format("{} probe(s) answered: nothing to compare", r.probes.size()));
    v.deterministic_ok = false;
    return;
  }
  add(v, "determinism", v.deterministic_ok,
      fmt::format("{} of {} repeats of the temperature-0 probe gave the first one's text ({} "
                  "differ, {} failed)",
                  same, same + differ + failed, differ, failed));
}

}  // namespace

SoakVerdict judge_soak(const SoakResult& r, const SoakThresholds& th) {
  SoakVerdict v;
  v.warmup_s = th.warmup_s >= 0 ? th.warmup_s : std::min(600.0, r.duration_s / 4);
  for (const auto& [kind, n] : r.errors) v.errors += n;
  v.errors_5xx = r.errors_5xx;
  std::string kinds;
  for (const auto& [kind, n] : r.errors)
    if (n > 0) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, kind);
  add(v, "errors", v.errors == 0,
      v.errors == 0 ? fmt::format("none in {} requests", r.requests)
                    : fmt::format("{} of {} requests: {}", v.errors, r.requests, kinds));
  add(v, "errors_5xx", v.errors_5xx == 0, fmt::format("{} answered 5xx", v.errors_5xx));
  if (!r.server_metrics) {
    not_judged(v, "pages_leaked", "/metrics has no sustain_kv_pages_used");
  } else if (!r.idle) {
    add(v, "pages_leaked", false,
        fmt::format("the server never went idle after the load (running or queued requests "
                    "left; {} pages in use)",
                    r.idle_kv_pages_used));
  } else {
    v.pages_leaked = static_cast<int64_t>(r.idle_kv_pages_used);
    add(v, "pages_leaked", v.pages_leaked == 0,
        fmt::format("{} pages held by no request once idle ({} held by the prefix cache, not "
                    "counted)",
                    v.pages_leaked, r.idle_kv_pages_cached));
  }
  judge_rss(r, th, v);
  judge_throughput(r, th, v);
  judge_probes(r, v);
  if (!r.server_problem.empty()) add(v, "server", false, r.server_problem);
  if (r.interrupted)
    add(v, "completed", false,
        fmt::format("interrupted after {:.0f} s: the checks above cover that much", r.duration_s));
  return v;
}

namespace {

json num_or_null(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

}  // namespace

json soak_json(const SoakConfig& c, const SoakResult& r, const SoakThresholds& th,
               const SoakVerdict& v) {
  json errors = json::object();
  for (const auto& [k, n] : r.errors) errors[k] = n;
  json s = {
      {"duration_s", r.duration_s},
      {"requests", r.requests},
      {"wall_s", r.wall_s},
      {"interrupted", r.interrupted},
      {"errors", errors},
      {"errors_5xx", r.errors_5xx},
      {"pages_leaked", v.pages_leaked >= 0 ? json(v.pages_leaked) : json(nullptr)},
      {"rss_drift_pct_per_h", num_or_null(v.rss_drift_pct_per_h)},
      {"throughput_drift_pct", num_or_null(v.throughput_drift_pct)},
      {"deterministic_ok", v.deterministic_ok},
      {"pass", v.pass},
  };
  s["checks"] = json::array();
  for (const SoakCheck& k : v.checks)
    s["checks"].push_back({{"name", k.name}, {"status", k.status}, {"detail", k.detail}});
  json outcomes = json::object();
  for (const auto& [k, n] : r.outcomes) outcomes[k] = n;
  s["outcomes"] = outcomes;
  s["throughput_noise_pct"] = num_or_null(v.throughput_noise_pct);
  s["throughput_window_s"] = v.drift_window_s;
  s["warmup_s"] = v.warmup_s;
  s["idle"] = {{"reached", r.idle},
               {"kv_pages_used", r.idle_kv_pages_used},
               {"kv_pages_cached", r.idle_kv_pages_cached}};
  s["prompt_tokens"] = {{"min", r.prompt_tokens_min}, {"max", r.prompt_tokens_max}};
  s["error_examples"] = r.error_examples;
  s["traffic"] = {{"concurrency", c.concurrency},
                  {"burst_factor", c.burst_factor},
                  {"burst_every_s", c.burst_every_s},
                  {"burst_s", c.burst_s},
                  {"min_prompt_tokens", c.min_prompt_tokens},
                  {"max_prompt_tokens", c.max_prompt_tokens},
                  {"max_tokens", c.max_tokens},
                  {"stream_share", c.stream_share},
                  {"disconnect_share", c.disconnect_share},
                  {"hot_share", c.hot_share},
                  {"temperatures", {0.0, 0.8}},
                  {"malformed_share", c.malformed_share},
                  {"probe_interval_s", c.probe_interval_s},
                  {"sample_interval_s", c.sample_interval_s},
                  {"seed", c.seed}};
  s["thresholds"] = {{"max_rss_drift_pct_per_h", th.max_rss_drift_pct_per_h},
                     {"max_throughput_drop_pct", th.max_throughput_drop_pct},
                     {"min_drift_window_s", th.min_drift_window_s}};
  s["samples"] = json::array();
  for (const SoakSample& x : r.samples)
    s["samples"].push_back({{"t_s", x.t_s},
                            {"rss_bytes", x.rss_bytes},
                            {"kv_pages_used", x.kv_pages_used},
                            {"kv_pages_cached", x.kv_pages_cached},
                            {"queue", x.queue},
                            {"running", x.running},
                            {"tokens", x.tokens},
                            {"tok_s", x.tok_s},
                            {"requests", x.requests},
                            {"errors", x.errors},
                            {"burst", x.burst},
                            {"busy_rejections", x.busy_rejections},
                            {"client_disconnects", x.client_disconnects},
                            {"timeouts", x.timeouts}});
  s["probes"] = json::array();
  const std::string* first = nullptr;
  for (const ProbeResult& p : r.probes) {
    if (p.ok && first == nullptr) first = &p.text;
    s["probes"].push_back({{"t_s", p.t_s},
                           {"ok", p.ok},
                           {"same_as_first", p.ok && first != nullptr && p.text == *first},
                           {"chars", p.text.size()}});
  }
  return s;
}

}  // namespace sustain::bench

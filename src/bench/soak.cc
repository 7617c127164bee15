#include "bench/soak.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/soak_request.h"

namespace sustain::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Expected<double> parse_duration(const std::string& s, const char* flag) {
  const auto bad = [&] {
    return error(Code::kInvalidArgument,
                 "{} '{}': not a duration (a positive number with s, m or h, e.g. 60s, 10m, 1h)",
                 flag, s);
  };
  if (s.empty()) return bad();
  std::string num = s;
  double mult = 1;
  switch (num.back()) {
    case 's':
      num.pop_back();
      break;
    case 'm':
      mult = 60, num.pop_back();
      break;
    case 'h':
      mult = 3600, num.pop_back();
      break;
    default:
      break;
  }
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || errno != 0 || !(v > 0) || v * mult > 7 * 86400.0) return bad();
  return v * mult;
}

Status check_soak_config(const SoakConfig& c) {
  const auto bad = [](const char* flag, const std::string& why) {
    return error(Code::kInvalidArgument, "{}: {}", flag, why);
  };
  if (!(c.duration_s > 0)) return bad("--duration", "must be > 0");
  if (!(c.sample_interval_s >= 0.1) || c.sample_interval_s > c.duration_s)
    return bad("--sample-interval", fmt::format("{} s is not in [0.1, the duration {} s]",
                                                c.sample_interval_s, c.duration_s));
  if (c.concurrency < 1 || c.concurrency > 1024)
    return bad("--concurrency", fmt::format("{} is not in [1, 1024]", c.concurrency));
  if (c.burst_factor < 1 || c.burst_factor * c.concurrency > 4096)
    return bad("--burst-factor",
               fmt::format("{} x {} clients is not in [1, 4096]", c.burst_factor, c.concurrency));
  if (c.min_prompt_tokens < 1 || c.max_prompt_tokens < c.min_prompt_tokens ||
      c.max_prompt_tokens > (int64_t(1) << 24))
    return bad("--max-prompt", fmt::format("{} is not in [{}, 16M] tokens", c.max_prompt_tokens,
                                           c.min_prompt_tokens));
  if (c.max_tokens < 8 || c.max_tokens > 1 << 20)
    return bad("--max-tokens", fmt::format("{} is not in [8, 1M]", c.max_tokens));
  for (const auto& [flag, v] :
       {std::pair{"--stream-share", c.stream_share},
        std::pair{"--disconnect-share", c.disconnect_share}, std::pair{"--hot-share", c.hot_share},
        std::pair{"--malformed-share", c.malformed_share}})
    if (!(v >= 0 && v <= 1)) return bad(flag, fmt::format("{} is not a share in [0, 1]", v));
  if (c.burst_every_s < 0 || c.burst_s < 0 || c.probe_interval_s < 0)
    return bad("--burst-every/--burst-length/--probe-interval", "must be >= 0");
  return Status::ok();
}

namespace {

// /metrics as name → value (labelled series keep their labels in the name).
std::map<std::string, double> read_metrics(const HttpUrl& u, const std::string& api_key) {
  std::map<std::string, double> out;
  httplib::Client cli(u.host, u.port);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  auto r = cli.Get(u.base_path + "/metrics", h);
  if (!r || r->status != 200) return out;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + sp + 1, &end);
    if (end != line.c_str() + sp + 1) out[line.substr(0, sp)] = v;
  }
  return out;
}

double metric_or(const std::map<std::string, double>& m, const char* name, double dflt = -1) {
  const auto it = m.find(name);
  return it == m.end() ? dflt : it->second;
}

// VmRSS of `pid` in bytes; -1 when it cannot be read.
double proc_rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024.0;
  return -1;
}

// The bursts: [k·every, k·every + len) for k ≥ 1.
struct Bursts {
  double every = 0, len = 0;
  bool active(double t) const {
    if (every <= 0 || len <= 0 || t < every) return false;
    return std::fmod(t, every) < len;
  }
  // Whether a burst overlaps (a, b] by more than a sliver: the sampler
  // wakes a little late, and a burst that began 30 ms before it took its
  // sample did not change what the interval measured.
  bool overlaps(double a, double b) const {
    if (every <= 0 || len <= 0) return false;
    const double margin = std::min(0.5, 0.1 * (b - a));
    for (double k = std::max(1.0, std::floor(a / every)); k * every <= b; ++k)
      if (k * every < b - margin && k * every + len > a + margin) return true;
    return false;
  }
};

class Soak {
 public:
  Soak(const SoakConfig& c, HttpUrl u, std::string model)
      : c_(c), url_(std::move(u)), model_(std::move(model)) {
    bursts_.every = c.burst_every_s > 0 ? c.burst_every_s : c.duration_s / 5;
    bursts_.len = c.burst_s > 0 ? c.burst_s : bursts_.every / 4;
    probe_every_ = c.probe_interval_s > 0 ? c.probe_interval_s : std::max(5.0, c.duration_s / 10);
  }

  SoakResult run(Observer& obs) {
    start_ = Clock::now();
    std::vector<std::thread> threads;
    const int n_clients = c_.concurrency * c_.burst_factor;
    for (int i = 0; i < n_clients; ++i) threads.emplace_back([this, i] { client(i); });
    threads.emplace_back([this] { prober(); });
    sampler(obs);  // on this thread, until the duration is over
    stop_ = true;
    for (auto& t : threads) t.join();
    res_.duration_s = res_.interrupted ? res_.samples.back().t_s : c_.duration_s;
    res_.wall_s = elapsed();
    wait_idle();
    return std::move(res_);
  }

 private:
  bool interrupted() const { return c_.interrupt != nullptr && c_.interrupt->load(); }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  void record(const SoakOutcome& o) {
    std::lock_guard<std::mutex> lk(mu_);
    ++res_.requests;
    ++interval_requests_;
    if (o.failed) {
      ++res_.errors[o.kind];
      ++interval_errors_;
      if (o.kind == "http_5xx" || (o.kind == "malformed_not_4xx" && o.status >= 500))
        ++res_.errors_5xx;
      if (res_.error_examples.size() < 10) res_.error_examples.push_back(o.detail);
    } else {
      ++res_.outcomes[o.kind];
    }
    if (o.prompt_tokens > 0) {
      if (res_.prompt_tokens_min == 0 || o.prompt_tokens < res_.prompt_tokens_min)
        res_.prompt_tokens_min = o.prompt_tokens;
      res_.prompt_tokens_max = std::max(res_.prompt_tokens_max, o.prompt_tokens);
    }
  }

  // Client i ≥ concurrency runs only during bursts.
  void client(int i) {
    std::mt19937_64 rng(c_.seed * 1000003 + static_cast<uint64_t>(i));
    const bool burst_only = i >= c_.concurrency;
    while (!stop_.load()) {
      const double t = elapsed();
      if (t >= c_.duration_s) break;
      if (burst_only && !bursts_.active(t)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      const SoakRequest r = draw_soak_request(rng, c_, next_index_++, model_);
      record(send_soak_request(url_, c_.api_key, r, c_.request_timeout_s, tokens_, stop_));
    }
  }

  void prober() {
    const SoakRequest r = probe_request(model_);
    for (int k = 0; !stop_.load(); ++k) {
      const double t_at = k * probe_every_;
      if (t_at >= c_.duration_s) break;
      while (!stop_.load() && elapsed() < t_at)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (stop_.load()) break;
      ProbeResult p;
      p.t_s = elapsed();
      const SoakOutcome o =
          send_soak_request(url_, c_.api_key, r, c_.request_timeout_s, tokens_, stop_);
      record(o);
      p.ok = !o.failed && o.kind == "ok";
      p.text = o.text;
      std::lock_guard<std::mutex> lk(mu_);
      res_.probes.push_back(std::move(p));
    }
  }

  void take_sample(double t_prev, double t) {
    SoakSample s;
    s.t_s = t;
    const auto m = read_metrics(url_, c_.api_key);
    s.kv_pages_used = metric_or(m, "sustain_kv_pages_used");
    s.kv_pages_cached = metric_or(m, "sustain_kv_pages_cached");
    s.queue = metric_or(m, "sustain_requests_waiting");
    s.running = metric_or(m, "sustain_requests_running");
    s.busy_rejections = metric_or(m, "sustain_busy_rejections_total");
    s.client_disconnects = metric_or(m, "sustain_client_disconnects_total");
    if (m.count("sustain_read_timeouts_total") > 0)
      s.timeouts = metric_or(m, "sustain_read_timeouts_total") +
                   metric_or(m, "sustain_write_timeouts_total", 0);
    s.rss_bytes = c_.server_pid > 0 ? proc_rss_bytes(c_.server_pid)
                                    : metric_or(m, "process_resident_memory_bytes");
    const int64_t tok = tokens_.load();
    s.tokens = static_cast<double>(tok - tokens_at_sample_);
    tokens_at_sample_ = tok;
    s.tok_s = t > t_prev ? s.tokens / (t - t_prev) : 0;
    s.burst = bursts_.overlaps(t_prev, t);
    {
      std::lock_guard<std::mutex> lk(mu_);
      s.requests = interval_requests_;
      s.errors = interval_errors_;
      interval_requests_ = interval_errors_ = 0;
    }
    res_.samples.push_back(s);
  }

  void sampler(Observer& obs) {
    auto bar = obs.bar("bench soak");
    double t_prev = 0;
    for (int k = 1;; ++k) {
      const double t_next = std::min(k * c_.sample_interval_s, c_.duration_s);
      while (elapsed() < t_next && !interrupted()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        bar->update(elapsed() / c_.duration_s,
                    fmt::format("{:.0f}/{:.0f} s, {} requests", elapsed(), c_.duration_s,
                                next_index_.load()));
      }
      take_sample(t_prev, elapsed());
      t_prev = res_.samples.back().t_s;
      if (interrupted()) {
        res_.interrupted = true;
        break;
      }
      if (t_next >= c_.duration_s) break;
    }
    bar->finish(fmt::format("{} requests", next_index_.load()));
  }

  // The load is over: the server must drop to no running and no queued
  // request, and then hold no page for any request.
  void wait_idle() {
    const auto deadline = Clock::now() + std::chrono::duration<double>(c_.idle_wait_s);
    int idle_reads = 0;
    for (;;) {
      const auto m = read_metrics(url_, c_.api_key);
      res_.server_metrics = m.count("sustain_kv_pages_used") > 0;
      if (!res_.server_metrics) return;
      res_.idle_kv_pages_used = metric_or(m, "sustain_kv_pages_used");
      res_.idle_kv_pages_cached = metric_or(m, "sustain_kv_pages_cached");
      const bool idle = metric_or(m, "sustain_requests_running") == 0 &&
                        metric_or(m, "sustain_requests_waiting") == 0;
      // Two reads in a row, so a request ending between the gauges is not caught half way.
      idle_reads = idle ? idle_reads + 1 : 0;
      if (idle_reads >= 2) {
        res_.idle = true;
        return;
      }
      if (Clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  const SoakConfig& c_;
  HttpUrl url_;
  std::string model_;
  Bursts bursts_;
  double probe_every_ = 5;
  Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> next_index_{0}, tokens_{0};
  int64_t tokens_at_sample_ = 0;
  std::mutex mu_;
  int64_t interval_requests_ = 0, interval_errors_ = 0;
  SoakResult res_;
};

// The model field: --model-name, else the first id of GET /v1/models.
Expected<std::string> served_model(const SoakConfig& c, const HttpUrl& u) {
  if (!c.model_name.empty()) return c.model_name;
  httplib::Client cli(u.host, u.port);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(30, 0);
  httplib::Headers h;
  if (!c.api_key.empty()) h.emplace("Authorization", "Bearer " + c.api_key);
  auto r = cli.Get(u.base_path + "/v1/models", h);
  if (!r)
    return error(Code::kUnavailable, "--url {}: GET /v1/models failed: {}", c.url,
                 httplib::to_string(r.error()));
  const json j = json::parse(r->body, nullptr, false);
  if (r->status == 200 && j.is_object() && j.contains("data") && j["data"].is_array() &&
      !j["data"].empty() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  return std::string("default");
}

}  // namespace

Expected<SoakResult> run_soak(const SoakConfig& c, Observer& obs) {
  SUSTAIN_TRY(check_soak_config(c));
  SUSTAIN_ASSIGN_OR_RETURN(HttpUrl u, parse_http_url(c.url));
  SUSTAIN_ASSIGN_OR_RETURN(std::string model, served_model(c, u));
  obs.message(fmt::format("bench soak: {:.0f} s against {} (model {}), {} clients, bursts to {}",
                          c.duration_s, c.url, model, c.concurrency,
                          c.concurrency * c.burst_factor));
  Soak soak(c, std::move(u), std::move(model));
  return soak.run(obs);
}

}  // namespace sustain::bench

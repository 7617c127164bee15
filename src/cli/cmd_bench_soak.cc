// `sustain bench soak`: mixed traffic against one server for a duration,
// sampled, ending with a verdict (bench/soak.h, bench/soak_verdict.h). With
// --url it loads that server; otherwise it starts its own `sustain serve`
// child on 127.0.0.1 (with --deterministic, so the determinism check means
// something) from -m, or from the synthetic --preset/--type the rest of
// bench uses. The exit code is 0 only when no check failed.
#include "cli/cmd_bench_soak.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/conditions.h"
#include "bench/model_cache.h"
#include "bench/report.h"
#include "bench/serve_child.h"
#include "bench/soak.h"
#include "bench/soak_verdict.h"
#include "cli/commands.h"

namespace sustain::cli {
namespace {

using nlohmann::json;

struct SoakArgs {
  std::string url, api_key, model_name;
  std::string model, preset, type;
  std::string duration = "60s", sample_interval;
  int parallel = 8, threads = 0;
  int64_t ctx = 0;
  std::string serve_args;
  bench::SoakConfig soak;
  bench::SoakThresholds th;
  std::string burst_every, burst_len, probe_interval, warmup;
  std::string out;
  double shutdown_timeout_s = 30;
};

class StderrBars : public bench::Observer {
 public:
  std::unique_ptr<bench::ProgressBar> bar(const std::string& label) override {
    return std::make_unique<Line>(label);
  }
  void message(const std::string& line) override { std::fprintf(stderr, "%s\n", line.c_str()); }

 private:
  // One line per tenth, so a long run in a log file stays readable.
  class Line : public bench::ProgressBar {
   public:
    explicit Line(std::string label) : label_(std::move(label)) {}
    void update(double f, const std::string& detail) override {
      const int tenth = static_cast<int>(f * 10);
      if (tenth <= last_) return;
      last_ = tenth;
      std::fprintf(stderr, "%s: %3d%%  %s\n", label_.c_str(), tenth * 10, detail.c_str());
    }
    void finish(const std::string& detail) override {
      std::fprintf(stderr, "%s: done  %s\n", label_.c_str(), detail.c_str());
    }

   private:
    std::string label_;
    int last_ = 0;
  };
};

Expected<double> optional_duration(const std::string& s, const char* flag) {
  if (s.empty()) return 0.0;
  return bench::parse_duration(s, flag);
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string command_line(const SoakArgs& a) {
  std::string s = "sustain bench soak";
  if (!a.url.empty()) s += " --url " + a.url;
  if (!a.model.empty()) s += " -m " + a.model;
  if (!a.preset.empty()) s += " --preset " + a.preset;
  if (!a.type.empty()) s += " --type " + a.type;
  s += " --duration " + a.duration;
  if (a.url.empty()) s += fmt::format(" -np {}", a.parallel);
  if (a.threads > 0) s += fmt::format(" -t {}", a.threads);
  s += fmt::format(" --concurrency {} --max-prompt {}", a.soak.concurrency,
                   a.soak.max_prompt_tokens);
  if (!a.serve_args.empty()) s += " --serve-args '" + a.serve_args + "'";
  return s;
}

int run_soak_command(SoakArgs a) {
  bench::SoakConfig c = a.soak;
  {
    auto d = bench::parse_duration(a.duration, "--duration");
    if (!d) return fail(d.status().message());
    c.duration_s = *d;
    if (a.sample_interval.empty()) {
      c.sample_interval_s = std::min(10.0, c.duration_s / 2);
    } else {
      auto si = bench::parse_duration(a.sample_interval, "--sample-interval");
      if (!si) return fail(si.status().message());
      c.sample_interval_s = *si;
    }
    for (auto [text, dst, flag] :
         {std::tuple{&a.burst_every, &c.burst_every_s, "--burst-every"},
          std::tuple{&a.burst_len, &c.burst_s, "--burst-length"},
          std::tuple{&a.probe_interval, &c.probe_interval_s, "--probe-interval"},
          std::tuple{&a.warmup, &a.th.warmup_s, "--warmup"}}) {
      auto v = optional_duration(*text, flag);
      if (!v) return fail(v.status().message());
      if (!text->empty()) *dst = *v;
    }
  }
  if (auto st = bench::check_soak_config(c); !st) return fail(st.message());
  if (!a.url.empty() && (!a.model.empty() || !a.preset.empty() || !a.type.empty()))
    return fail(
        "--url loads a running server; -m/--preset/--type start one: give one or the other");
  if (!a.model.empty() && (!a.preset.empty() || !a.type.empty()))
    return fail(
        "-m names a GGUF file; --preset/--type make a synthetic one: give one or the other");
  const std::string dir = a.out.empty() ? "reports/soak-" + bench::utc_now("%Y%m%d-%H%M%S") : a.out;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(fmt::format("-o '{}': cannot create the directory: {}", dir, ec.message()));
  StderrBars obs;
  std::unique_ptr<bench::ServeChild> child;
  json target;
  if (a.url.empty()) {
    std::string model = a.model;
    if (model.empty()) {
      auto p = bench::cached_synth_model(a.preset.empty() ? bench::kDefaultPreset : a.preset,
                                         a.type.empty() ? bench::kDefaultType : a.type,
                                         a.threads > 0 ? a.threads : default_threads(), obs);
      if (!p) return fail(p.status().message());
      model = *p;
    }
    // Room for the longest prompt (max_prompt words, up to about 1.3 tokens
    // a word in any tokenizer) and its answer.
    const int64_t ctx = a.ctx > 0 ? a.ctx : c.max_prompt_tokens * 3 / 2 + c.max_tokens + 64;
    std::vector<std::string> args = {"-m",
                                     model,
                                     "-c",
                                     std::to_string(ctx),
                                     "--parallel",
                                     std::to_string(a.parallel),
                                     "--deterministic"};
    if (a.threads > 0) args.insert(args.end(), {"-t", std::to_string(a.threads)});
    for (auto& w : split_words(a.serve_args)) args.push_back(w);
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return fail("cannot find the sustain binary (/proc/self/exe) to start the server");
    self[n] = '\0';
    obs.message("bench soak: starting sustain serve " + fmt::format("{}", fmt::join(args, " ")));
    auto ch = bench::ServeChild::start(self, args, dir + "/serve.log", 600);
    if (!ch) return fail(ch.status().message());
    child = std::move(*ch);
    c.url = child->url();
    c.server_pid = child->pid();
    target = {{"kind", "child"},
              {"url", c.url},
              {"serve_args", args},
              {"log", "serve.log"},
              {"rss", "/proc/PID/status VmRSS"}};
  } else {
    c.url = a.url;
    target = {{"kind", "http"}, {"url", a.url}, {"rss", "/metrics process_resident_memory_bytes"}};
  }
  c.api_key = a.api_key;
  c.model_name = a.model_name;
  // Once the traffic starts, SIGINT/SIGTERM end it early: the report is
  // still written (the verdict then fails as 'completed') and the child is
  // stopped; a second signal exits at once (the child follows: it dies with
  // its parent). Blocked here, before the soak's threads start, and taken
  // by one thread with sigwait.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  auto interrupt = std::make_shared<std::atomic<bool>>(false);
  std::thread([sigs, interrupt] {
    for (int sig = 0; sigwait(&sigs, &sig) == 0;) {
      if (interrupt->load()) _exit(128 + sig);
      std::fprintf(stderr, "bench soak: signal %d: stopping the traffic, writing the report\n",
                   sig);
      *interrupt = true;
    }
  }).detach();
  c.interrupt = interrupt.get();
  auto res = bench::run_soak(c, obs);
  if (child) {
    const std::string why = child->stop(a.shutdown_timeout_s);
    if (res && !why.empty()) res->server_problem = why;
  }
  if (!res) return fail(res.status().message());
  const bench::SoakVerdict v = bench::judge_soak(*res, a.th);
  json report = bench::new_report(command_line(a));
  report["soak"] = bench::soak_json(c, *res, a.th, v);
  report["conditions"] = {{"target", target},
                          {"machine", bench::machine_conditions()},
                          {"build", bench::build_conditions()},
                          {"sampler",
                           {{"temperatures", {0.0, 0.8}},
                            {"hot_share", c.hot_share},
                            {"probe", "temperature 0, 32 tokens, ignore_eos"}}},
                          {"workload", report["soak"]["traffic"]}};
  report["notes"].push_back(
      "soak: conditions.machine describes the client; with a child server both run here");
  if (auto st = bench::validate_report(report); !st) return fail(st.message());
  if (auto st = bench::write_reports(report, dir); !st) return fail(st.message());
  for (const bench::SoakCheck& k : v.checks)
    std::fprintf(stderr, "bench soak: %-16s %-10s %s\n", k.name.c_str(), k.status.c_str(),
                 k.detail.c_str());
  std::printf("%s/report.json\n%s/report.md\n%s/report.html\n", dir.c_str(), dir.c_str(),
              dir.c_str());
  if (!v.pass) {
    std::string failed;
    for (const bench::SoakCheck& k : v.checks)
      if (k.status == "fail") failed += (failed.empty() ? "" : ", ") + k.name;
    return fail("soak verdict: FAIL (" + failed + ")");
  }
  std::fprintf(stderr, "bench soak: verdict PASS\n");
  return 0;
}

}  // namespace

std::function<int()> add_bench_soak(CLI::App& bench_cmd) {
  auto a = std::make_shared<SoakArgs>();
  auto* sub = bench_cmd.add_subcommand(
      "soak",
      "mixed traffic against one server for --duration, sampled, ending with a verdict "
      "(errors, 5xx, leaked KV pages, RSS and throughput drift, determinism); exits non-zero "
      "when a check fails");
  sub->add_option("--url", a->url,
                  "load this OpenAI-compatible server (http://HOST:PORT) instead of starting one");
  sub->add_option("--api-key", a->api_key, "bearer token for --url");
  sub->add_option("--model-name", a->model_name,
                  "the requests' model field (default: first of GET /v1/models)");
  sub->add_option("-m,--model", a->model, "GGUF the started server serves");
  sub->add_option("--preset", a->preset,
                  std::string("synthetic model for the started server (default ") +
                      bench::kDefaultPreset + ")");
  sub->add_option("--type", a->type,
                  std::string("its weight format (default ") + bench::kDefaultType + ")");
  sub->add_option("--duration", a->duration, "how long the traffic runs (60s, 10m, 1h)")
      ->capture_default_str();
  sub->add_option("--sample-interval", a->sample_interval,
                  "time between samples (default 10s, or half the duration when shorter)");
  sub->add_option("--parallel", a->parallel, "started server: sequences at once (alias -np)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("-t,--threads", a->threads, "started server: worker threads (default: all)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("-c,--ctx-size", a->ctx,
                  "started server: context per sequence (default: 1.5 x --max-prompt + "
                  "--max-tokens + 64)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  sub->add_option("--serve-args", a->serve_args,
                  "started server: more `sustain serve` flags, space-separated");
  sub->add_option("--concurrency", a->soak.concurrency, "base clients, each one request at a time")
      ->capture_default_str();
  sub->add_option("--burst-factor", a->soak.burst_factor,
                  "clients during a burst, as a multiple of --concurrency")
      ->capture_default_str();
  sub->add_option("--burst-every", a->burst_every, "time between bursts (default: duration / 5)");
  sub->add_option("--burst-length", a->burst_len,
                  "length of a burst (default: a quarter of "
                  "--burst-every)");
  sub->add_option("--min-prompt", a->soak.min_prompt_tokens, "shortest prompt, tokens")
      ->capture_default_str();
  sub->add_option("--max-prompt", a->soak.max_prompt_tokens,
                  "longest prompt, tokens (lengths are log-uniform between; lower it on small "
                  "machines)")
      ->capture_default_str();
  sub->add_option("--max-tokens", a->soak.max_tokens, "each request asks 8 to this many tokens")
      ->capture_default_str();
  sub->add_option("--stream-share", a->soak.stream_share, "share of requests streamed")
      ->capture_default_str();
  sub->add_option("--disconnect-share", a->soak.disconnect_share,
                  "share of streams whose client disconnects mid-stream")
      ->capture_default_str();
  sub->add_option("--hot-share", a->soak.hot_share, "share at temperature 0.8 (the rest at 0)")
      ->capture_default_str();
  sub->add_option("--malformed-share", a->soak.malformed_share,
                  "share of malformed requests (each must get a 4xx)")
      ->capture_default_str();
  sub->add_option("--probe-interval", a->probe_interval,
                  "time between repeats of the temperature-0 determinism probe (default: "
                  "duration / 10, at least 5s)");
  sub->add_option("--max-rss-drift", a->th.max_rss_drift_pct_per_h,
                  "RSS growth after the warm-up that fails the verdict, %/h")
      ->capture_default_str();
  sub->add_option("--max-throughput-drop", a->th.max_throughput_drop_pct,
                  "throughput drop (first vs last tenth, plus the noise) that fails it, %")
      ->capture_default_str();
  sub->add_option("--warmup", a->warmup,
                  "time left out of the RSS slope (default: a quarter of the run, at most 10m)");
  sub->add_option("--min-drift-window", a->th.min_drift_window_s,
                  "seconds of samples the drifts need to be judged (shorter: reported only)")
      ->capture_default_str();
  sub->add_option("--request-timeout", a->soak.request_timeout_s,
                  "seconds a request may wait for its answer before it counts as a transport "
                  "error")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  sub->add_option("--seed", a->soak.seed, "seed of the traffic")->capture_default_str();
  sub->add_option("-o,--output", a->out, "report directory (default: reports/soak-<UTC time>)");
  return [a] { return run_soak_command(*a); };
}

}  // namespace sustain::cli

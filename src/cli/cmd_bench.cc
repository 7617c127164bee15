// `sustain bench`: the speed–context curve (context ladder), the prefill
// gradient, the concurrency ladder (in-process, or any OpenAI endpoint with
// --url), the ablation matrix and the roofline, written as report.json,
// report.md and report.html. `sustain bench bandwidth` measures the machine
// alone. The workloads live in src/bench; this file parses flags, picks or
// makes the model, sequences the phases and shows progress.
#include <sys/utsname.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "bench/ablation_quality.h"
#include "bench/bandwidth.h"
#include "bench/http_target.h"
#include "bench/load.h"
#include "bench/observer.h"
#include "bench/report.h"
#include "bench/results.h"
#include "bench/sysinfo.h"
#include "bench/workloads.h"
#include "cli/commands.h"
#include "cli/model_session.h"
#include "bench/plan_input.h"
#include "cli/progress.h"
#include "plan/plan.h"
#include "tensor/kv_names.h"
#include "tools/needle_retriever.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kDefaultPreset = "smollm2-135m";
constexpr const char* kDefaultType = "Q4_K_M";
constexpr const char* kDefaultCtx = "512,2048,8192,16384,32768";

struct BenchArgs {
  std::string model, preset, type;
  std::string ctx;
  int n_tokens = 32;
  int reps = 3;
  int threads = 0;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string kv_layout = "tiled";
  int64_t batch = 512, ubatch = 512;
  std::string out;
  std::string prefill;
  int prefill_reps = 1;
  std::string concurrency = "1,2,4,8";
  int64_t conc_prompt = 256;
  int conc_requests = 2;
  std::string rates;
  int poisson_requests = 8;
  bool no_concurrency = false;
  std::vector<std::string> ablate;
  std::string ablate_file;
  double budget = -1;  // < 0: 300 s for the default ladder, none for an explicit --ctx
  uint64_t seed = 1234;
  int64_t bw_mib = 1024;
  int bw_reps = 5;
  std::string url, api_key, model_name;
  std::string command_line;
  // The ablation rows' quality cost against row 0 (bench/ablation_quality.h).
  std::string quality = "on";
  std::string quality_ctx = "8192";
  std::string quality_text;
  double quality_budget = 600;
  std::string quality_needle = "default";
  int quality_trials = 1;
};

Expected<std::vector<int64_t>> parse_list(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) continue;
    int64_t mult = 1;
    const char last = item.back();
    if (last == 'K' || last == 'k') mult = 1024, item.pop_back();
    if (last == 'M' || last == 'm') mult = 1024 * 1024, item.pop_back();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v <= 0 || v > (int64_t(1) << 32) / mult)
      return error(Code::kInvalidArgument,
                   "{} '{}': '{}' is not a positive count (e.g. 512,2K,8192)", flag, s, item);
    out.push_back(v * mult);
  }
  if (out.empty()) return error(Code::kInvalidArgument, "{} '{}': the list is empty", flag, s);
  return out;
}

Expected<std::vector<double>> parse_rates(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (*end != '\0' || !(v > 0) || v > 1e6)
      return error(Code::kInvalidArgument, "--rate '{}': '{}' is not a rate in requests/s > 0", s,
                   item);
    out.push_back(v);
  }
  return out;
}

Expected<QType> kv_format(const std::string& name, const char* flag) {
  return kv_cache_type(name, flag);
}

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

fs::path cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "sustain";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "sustain";
  return fs::path(".cache") / "sustain";
}

// The synthetic model for --preset/--type (or the default), made once and
// cached; written under a temporary name first so an interrupted run never
// leaves a truncated file behind.
Expected<std::string> cached_synth_model(const std::string& preset, const std::string& type,
                                         int threads) {
  const tools::Preset* p = tools::find_preset(preset);
  if (!p)
    return error(Code::kInvalidArgument, "unknown --preset '{}' (known: {})", preset,
                 tools::preset_names());
  const auto ft = tools::file_type_from_name(type);
  if (!ft)
    return error(Code::kInvalidArgument, "unknown --type '{}' (known: {})", type,
                 tools::file_type_names());
  const fs::path dir = cache_dir();
  const fs::path path = dir / fmt::format("{}-{}.gguf", p->name, tools::file_type_info(*ft).name);
  if (fs::exists(path)) {
    std::fprintf(stderr, "bench: model %s (cached)\n", path.string().c_str());
    return path.string();
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return error(Code::kIo, "cannot create the model cache directory '{}': {}", dir.string(),
                 ec.message());
  std::fprintf(stderr,
               "bench: making the synthetic model %s %s once (random weights, the real shapes); "
               "it is cached at %s\n",
               p->name.c_str(), std::string(tools::file_type_info(*ft).name).c_str(),
               path.string().c_str());
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  ThreadPool pool(threads);
  Progress prog("bench synth");
  tools::SynthOptions opt;
  opt.type = *ft;
  opt.progress = [&](size_t i, size_t n, uint64_t done, uint64_t total) {
    prog.update(total ? static_cast<double>(done) / total : 1.0, fmt::format("tensor {}/{}", i, n));
  };
  auto r = tools::synth_model(*p, tmp.string(), opt, pool);
  if (!r) {
    fs::remove(tmp, ec);
    return r.status();
  }
  prog.finish(fmt::format("{:.1f} MiB", r->file_bytes / 1048576.0));
  fs::rename(tmp, path, ec);
  if (ec)
    return error(Code::kIo, "cannot move '{}' to '{}': {}", tmp.string(), path.string(),
                 ec.message());
  return path.string();
}

// One progress line per phase; a new phase finishes the previous one.
class PhaseProgress {
 public:
  void operator()(const std::string& phase, double f, const std::string& detail) {
    if (phase != phase_) {
      if (bar_) bar_->finish("");
      phase_ = phase;
      bar_ = std::make_unique<Progress>("bench " + phase);
    }
    bar_->update(std::clamp(f, 0.0, 1.0), detail);
  }
  void done() {
    if (bar_) bar_->finish("");
    bar_.reset();
    phase_.clear();
  }

 private:
  std::string phase_;
  std::unique_ptr<Progress> bar_;
};

// Bars and lines on stderr (cli/progress.h).
class StderrObserver : public bench::Observer {
 public:
  std::unique_ptr<bench::ProgressBar> bar(const std::string& label) override {
    return std::make_unique<Bar>(label);
  }
  void message(const std::string& line) override { std::fprintf(stderr, "%s\n", line.c_str()); }

 private:
  class Bar : public bench::ProgressBar {
   public:
    explicit Bar(const std::string& label) : p_(label) {}
    void update(double f, const std::string& detail) override { p_.update(f, detail); }
    void finish(const std::string& detail) override { p_.finish(detail); }

   private:
    Progress p_;
  };
};

json machine_conditions() {
  const bench::CpuInfo c = bench::cpu_info();
  utsname u{};
  std::string os = "unknown";
  if (uname(&u) == 0) os = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  return {{"cpu_model", c.model},
          {"logical_cpus", c.logical_cpus},
          {"usable_threads", c.usable_threads},
          {"features", c.features},
          {"simd_target", c.simd_target},
          {"memory_bytes", bench::total_memory_bytes()},
          {"os", os}};
}

json build_conditions() {
#ifdef NDEBUG
  const char* type = "release (NDEBUG)";
#else
  const char* type = "debug (assertions on)";
#endif
  return {{"version", SUSTAIN_VERSION},
          {"git_commit", SUSTAIN_GIT_COMMIT},
          {"build_type", type},
          {"compiler", __VERSION__}};
}

json sampler_conditions(uint64_t seed) {
  return {{"temperature", 0.0}, {"top_k", 0},         {"top_p", 1.0},
          {"min_p", 0.0},       {"ignore_eos", true}, {"prompt_seed", seed}};
}

json new_report(const BenchArgs& a) {
  return {{"schema", bench::kReportSchema},
          {"schema_version", bench::kReportSchemaVersion},
          {"created_utc", utc_now("%Y-%m-%dT%H:%M:%SZ")},
          {"command_line", a.command_line},
          {"metrics", bench::metric_definitions()},
          {"notes", json::array()},
          {"ladder", json::array()}};
}

// `sustain plan`'s prediction for the engine this run used, beside the
// peak RSS the ladder measured (DESIGN §6: memory as measured, beside the
// plan). The pool is given as a byte budget, so the plan's KV is the pool.
void add_memory_plan(json& report, const engine::EngineConfig& cfg, const engine::Engine& e,
                     int threads) {
  plan::PlanInput in;
  if (auto st = bench::read_plan_file(cfg.model_path, in); !st.is_ok()) {
    report["notes"].push_back("memory: no plan (" + st.message() + ")");
    return;
  }
  in.k_type = cfg.k_type;
  in.v_type = cfg.v_type;
  in.page_tokens = cfg.page_tokens;
  in.n_ctx = cfg.n_ctx;
  in.n_parallel = cfg.n_parallel;
  in.kv_budget_bytes = e.kv_bytes();
  in.ubatch = std::min(cfg.batch_tokens, cfg.ubatch_tokens);
  in.kernel_scratch_bytes = bench::kernel_scratch(in, in.ubatch, threads);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  in.host_capacity = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  auto pl = plan::make_plan(in);
  if (!pl) {
    report["notes"].push_back("memory: no plan (" + pl.status().message() + ")");
    return;
  }
  uint64_t peak = 0;
  for (const auto& r : report["ladder"]) peak = std::max<uint64_t>(peak, r.value("peak_rss_bytes", 0));
  json m = {{"plan_total_bytes", pl->total_bytes},   {"plan_weights_bytes", pl->weights_bytes},
            {"plan_kv_bytes", pl->kv_bytes},         {"plan_scratch_bytes", pl->scratch_bytes},
            {"plan_host_bytes", pl->host_bytes},     {"engine_kv_bytes", e.kv_bytes()},
            {"measured_peak_rss_bytes", peak}};
  if (peak > 0) m["plan_over_peak_rss"] = double(pl->total_bytes) / double(peak);
  report["memory_plan"] = m;
  if (peak > 0)
    report["notes"].push_back(fmt::format(
        "memory: sustain plan predicts {:.1f} MiB (weights {:.1f}, KV {:.1f} = the engine's "
        "pool, scratch {:.1f}, host {:.1f}); the ladder's peak RSS was {:.1f} MiB "
        "(plan / measured = {:.3f})",
        pl->total_bytes / 1048576.0, pl->weights_bytes / 1048576.0, pl->kv_bytes / 1048576.0,
        pl->scratch_bytes / 1048576.0, pl->host_bytes / 1048576.0, peak / 1048576.0,
        double(pl->total_bytes) / double(peak)));
}

int finish_report(json& report, const BenchArgs& a) {
  if (auto st = bench::validate_report(report); !st)
    return fail("internal: the report does not match its schema: " + st.message());
  const std::string dir = a.out.empty() ? "reports/" + utc_now("%Y%m%d-%H%M%S") : a.out;
  if (auto st = bench::write_reports(report, dir); !st) return fail(st.message());
  std::printf("%s/report.json\n%s/report.md\n%s/report.html\n", dir.c_str(), dir.c_str(),
              dir.c_str());
  return 0;
}

Expected<bench::BandwidthResult> measure_machine(const BenchArgs& a, int threads) {
  std::fprintf(stderr, "bench: measuring memory bandwidth and peak FLOP/s (%d threads)...\n",
               threads);
  size_t bytes = static_cast<size_t>(a.bw_mib) << 20;
  // Never more than an eighth of the machine's memory.
  if (const int64_t mem = bench::total_memory_bytes(); mem > 0)
    bytes = std::min(bytes, std::max(size_t(64) << 20, static_cast<size_t>(mem / 8)));
  return bench::measure_bandwidth(threads, bytes, a.bw_reps);
}

int run_bandwidth(const BenchArgs& a, bool as_json) {
  const int threads = a.threads > 0 ? a.threads : default_threads();
  auto bw = measure_machine(a, threads);
  if (!bw) return fail(bw.status().message());
  if (as_json) {
    std::printf("%s\n", bench::bandwidth_json(*bw).dump(2).c_str());
    return 0;
  }
  std::printf("threads %d, buffer %.0f MiB\n", bw->threads, bw->buffer_bytes / 1048576.0);
  std::printf("read bandwidth  %.1f GB/s best, %.1f GB/s median over %zu reps\n",
              bw->read_gbps_best, bw->read_gbps_median, bw->read_gbps.size());
  std::printf("f32 FMA peak    %.1f GFLOP/s best, %.1f GFLOP/s median\n", bw->fma_gflops_best,
              bw->fma_gflops_median);
  return 0;
}

bench::LoadOptions load_options(const BenchArgs& a, const std::vector<int64_t>& conc,
                                const std::vector<double>& rates, PhaseProgress& prog) {
  bench::LoadOptions lo;
  lo.concurrency.assign(conc.begin(), conc.end());
  lo.requests_per_client = a.conc_requests;
  lo.poisson_rates = rates;
  lo.poisson_requests = a.poisson_requests;
  lo.seed = a.seed;
  lo.progress = [&prog](const std::string& p, double f, const std::string& d) { prog(p, f, d); };
  return lo;
}

int run_http(const BenchArgs& a) {
  auto conc = parse_list(a.concurrency, "--concurrency");
  if (!conc) return fail(conc.status().message());
  auto rates = parse_rates(a.rates);
  if (!rates) return fail(rates.status().message());
  bench::HttpTargetOptions ho;
  ho.url = a.url;
  ho.model = a.model_name;
  ho.api_key = a.api_key;
  ho.prompt_words = a.conc_prompt;
  ho.max_tokens = a.n_tokens;
  ho.seed = a.seed;
  auto target = bench::HttpTarget::create(ho);
  if (!target) return fail(target.status().message());
  json report = new_report(a);
  PhaseProgress prog;
  auto levels = bench::run_load(**target, load_options(a, *conc, *rates, prog));
  prog.done();
  if (!levels) return fail(levels.status().message());
  json lv = json::array();
  for (const auto& l : *levels) lv.push_back(bench::load_level_json(l));
  report["concurrency"] = {{"target", a.url},
                           {"prompt_length", a.conc_prompt},
                           {"prompt_unit", "words"},
                           {"max_tokens", a.n_tokens},
                           {"levels", lv}};
  report["conditions"] = {{"target",
                           {{"kind", "http"},
                            {"url", a.url},
                            {"model", (*target)->model()},
                            {"endpoint", "/v1/completions (stream, stream_options.include_usage)"},
                            {"token_count", "usage.completion_tokens"},
                            {"emission", "an SSE event whose choices[].text is non-empty"}}},
                          {"machine", machine_conditions()},
                          {"build", build_conditions()},
                          {"sampler", sampler_conditions(a.seed)},
                          {"workload",
                           {{"concurrency", *conc},
                            {"requests_per_client", a.conc_requests},
                            {"poisson_rates", *rates},
                            {"poisson_requests", a.poisson_requests},
                            {"prompt_words", a.conc_prompt},
                            {"max_tokens", a.n_tokens},
                            {"seed", a.seed}}}};
  report["notes"].push_back(
      "HTTP target: no context ladder or roofline (the server's machine is not this one); "
      "conditions.machine describes the client");
  for (const auto& l : *levels)
    if (!l.error.empty())
      report["notes"].push_back(fmt::format("{} level {}: {} failed request(s), last error: {}",
                                            l.mode, l.concurrency, l.metrics.failed, l.error));
  return finish_report(report, a);
}

// One ablation row: what it switches on top of the row above.
struct AblationRow {
  std::string name;
  std::string model;  // "" = the row above's
  engine::EngineConfig cfg;
};

Status apply_switch(const std::string& spec, AblationRow& row) {
  std::stringstream ss(spec);
  std::string kv;
  bool any = false;
  while (std::getline(ss, kv, ',')) {
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      return error(Code::kInvalidArgument,
                   "--ablate '{}': '{}' is not key=value (keys: ctk, ctv, kv, layout, prefix, "
                   "batch, ubatch, threads, model)",
                   spec, kv);
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    any = true;
    if (k == "ctk" || k == "ctv" || k == "kv") {
      SUSTAIN_ASSIGN_OR_RETURN(QType t, kv_format(v, "--ablate"));
      if (k != "ctv") row.cfg.k_type = t;
      if (k != "ctk") row.cfg.v_type = t;
    } else if (k == "layout") {
      if (v != "tiled" && v != "rows")
        return error(Code::kInvalidArgument,
                     "--ablate '{}': layout must be tiled or rows (KV page layout), got '{}'",
                     spec, v);
      row.cfg.kv_tiled = v == "tiled";
    } else if (k == "prefix") {
      if (v != "on" && v != "off")
        return error(Code::kInvalidArgument, "--ablate '{}': prefix must be on or off, got '{}'",
                     spec, v);
      row.cfg.prefix_cache = v == "on";
    } else if (k == "batch" || k == "ubatch" || k == "threads") {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 65536)
        return error(Code::kInvalidArgument, "--ablate '{}': {}={} is not in 1..65536", spec, k, v);
      if (k == "batch") row.cfg.batch_tokens = n;
      if (k == "ubatch") row.cfg.ubatch_tokens = n;
      if (k == "threads") row.cfg.n_threads = static_cast<int>(n);
    } else if (k == "model") {
      if (!fs::exists(v))
        return error(Code::kNotFound, "--ablate '{}': model file '{}' does not exist", spec, v);
      row.model = v;
      row.cfg.model_path = v;
    } else {
      return error(Code::kInvalidArgument,
                   "--ablate '{}': unknown key '{}' (keys: ctk, ctv, kv, layout, prefix, batch, "
                   "ubatch, threads, model)",
                   spec, k);
    }
  }
  if (!any) return error(Code::kInvalidArgument, "--ablate '{}': switches nothing", spec);
  return Status::ok();
}

Expected<std::vector<std::string>> ablation_specs(const BenchArgs& a) {
  std::vector<std::string> out = a.ablate;
  if (!a.ablate_file.empty()) {
    std::ifstream f(a.ablate_file);
    if (!f) return error(Code::kIo, "--ablate-file '{}': cannot open", a.ablate_file);
    std::string line;
    while (std::getline(f, line)) {
      const auto hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      line.erase(std::remove_if(line.begin(), line.end(), ::isspace), line.end());
      if (!line.empty()) out.push_back(line);
    }
  }
  return out;
}

int run_in_process(BenchArgs a) {
  const bool default_ladder = a.ctx.empty();
  if (default_ladder) a.ctx = kDefaultCtx;
  const double budget = a.budget >= 0 ? a.budget : (default_ladder ? 300.0 : 0.0);
  auto ctx = parse_list(a.ctx, "--ctx");
  if (!ctx) return fail(ctx.status().message());
  std::sort(ctx->begin(), ctx->end());
  ctx->erase(std::unique(ctx->begin(), ctx->end()), ctx->end());
  std::vector<int64_t> prefill;
  if (!a.prefill.empty()) {
    auto p = parse_list(a.prefill, "--prefill");
    if (!p) return fail(p.status().message());
    prefill = *p;
  }
  std::vector<int64_t> conc;
  std::vector<double> rates;
  if (!a.no_concurrency) {
    auto c = parse_list(a.concurrency, "--concurrency");
    if (!c) return fail(c.status().message());
    conc = *c;
    auto r = parse_rates(a.rates);
    if (!r) return fail(r.status().message());
    rates = *r;
  }
  auto specs = ablation_specs(a);
  if (!specs) return fail(specs.status().message());
  {
    // Checked before anything runs: a typo must not cost a whole bench.
    AblationRow probe;
    for (const auto& s : *specs)
      if (auto st = apply_switch(s, probe); !st) return fail(st.message());
  }
  // Quality flags are checked before anything runs, like the ablation rows.
  const bool quality = !specs->empty() && a.quality == "on";
  std::vector<int64_t> quality_ctx;
  if (quality) {
    auto qc = parse_list(a.quality_ctx, "--quality-ctx");
    if (!qc) return fail(qc.status().message());
    quality_ctx = *qc;
    if (auto st = bench::check_quality_ctx(quality_ctx, a.quality_ctx); !st) return fail(st.message());
    if (!(a.quality_budget >= 0))
      return fail(
          fmt::format("--quality-budget {}: give seconds >= 0 (0 = none)", a.quality_budget));
    if (a.quality_needle != "off")
      if (auto v = tools::retriever_variant(a.quality_needle); !v)
        return fail("--quality-needle: " + v.status().message());
  }
  if (a.n_tokens < 2) return fail(fmt::format("-n {}: need >= 2 tokens per request", a.n_tokens));
  if (a.reps < 1) return fail(fmt::format("-r {}: need >= 1 repetition", a.reps));
  if (a.conc_prompt < 1) return fail(fmt::format("--conc-prompt {}: need >= 1", a.conc_prompt));

  const int threads = a.threads > 0 ? a.threads : default_threads();
  std::string model = a.model;
  if (model.empty()) {
    if (!a.type.empty() && a.preset.empty() && a.model.empty())
      std::fprintf(stderr, "bench: --type without --preset: using the default preset %s\n",
                   kDefaultPreset);
    auto m = cached_synth_model(a.preset.empty() ? kDefaultPreset : a.preset,
                                a.type.empty() ? kDefaultType : a.type, threads);
    if (!m) return fail(m.status().message());
    model = *m;
  } else if (!a.preset.empty() || !a.type.empty()) {
    return fail("-m and --preset/--type both pick the model: give one or the other");
  }
  auto kt = kv_format(a.cache_type_k, "--cache-type-k (-ctk)");
  if (!kt) return fail(kt.status().message());
  auto vt = kv_format(a.cache_type_v, "--cache-type-v (-ctv)");
  if (!vt) return fail(vt.status().message());
  bench::QualityOptions qopt;
  if (quality) {
    // Read now: a short --quality-text must not cost a whole bench first.
    auto toks = bench::quality_tokens(model, a.quality_text, quality_ctx.back(), a.seed, &qopt.input);
    if (!toks) return fail(toks.status().message());
    qopt.tokens = std::move(*toks);
    qopt.ctx = quality_ctx;
    qopt.budget_s = a.quality_budget;
    qopt.needle = a.quality_needle;
    qopt.needle_trials = a.quality_trials;
    qopt.seed = a.seed;
    qopt.threads = threads;
  }

  constexpr int kPage = 32;
  engine::EngineConfig cfg;
  cfg.model_path = model;
  cfg.n_threads = threads;
  cfg.k_type = *kt;
  cfg.v_type = *vt;
  cfg.kv_tiled = kv_tiled(a.kv_layout);
  cfg.page_tokens = kPage;
  cfg.batch_tokens = a.batch;
  cfg.ubatch_tokens = a.ubatch;
  cfg.prefix_cache = true;
  const int64_t max_conc = conc.empty() ? 1 : *std::max_element(conc.begin(), conc.end());
  const int64_t ladder_need = ctx->back() + a.n_tokens;
  const int64_t prefill_need =
      prefill.empty() ? 0 : *std::max_element(prefill.begin(), prefill.end()) + 1;
  const int64_t conc_need = conc.empty() ? 0 : a.conc_prompt + a.n_tokens;
  cfg.n_ctx = std::max({ladder_need, prefill_need, conc_need});
  cfg.n_parallel = static_cast<int>(max_conc);
  // Room for the longest sequence plus its prefix-cache pages, or for every
  // concurrent request at once, whichever is larger.
  cfg.kv_tokens = std::max(cfg.n_ctx + 4 * kPage, max_conc * (conc_need + 2 * kPage));

  std::fprintf(stderr, "bench: loading %s (KV %s/%s, %d threads)\n", model.c_str(),
               a.cache_type_k.c_str(), a.cache_type_v.c_str(), threads);
  auto eng = engine::Engine::create(cfg);
  if (!eng) return fail(eng.status().message());
  engine::Engine& e = **eng;

  // Measured with the engine loaded (its KV pool allocated), so the buffer
  // is capped by what memory remains, and a bad model fails before this.
  auto bw = measure_machine(a, threads);
  if (!bw) return fail(bw.status().message());
  std::fprintf(stderr, "bench: %.1f GB/s read, %.1f GFLOP/s f32 FMA\n", bw->read_gbps_best,
               bw->fma_gflops_best);

  json report = new_report(a);
  // The bandwidth buffer is freed, but the peak-RSS watermark still holds it.
  if (!bench::reset_peak_rss())
    report["notes"].push_back(
        "peak_rss_bytes includes the bandwidth buffer (this kernel does not let "
        "/proc/self/clear_refs reset the watermark)");
  const bench::ModelCost cost = bench::model_cost(e);
  PhaseProgress prog;
  const auto progress = [&prog](const std::string& p, double f, const std::string& d) {
    prog(p, f, d);
  };
  if (default_ladder)
    std::fprintf(stderr,
                 "bench: context ladder %s, -n %d, -r %d; rungs projected to end past %.0f s "
                 "are skipped (--budget)\n",
                 a.ctx.c_str(), a.n_tokens, a.reps, budget);
  bench::LadderOptions lo;
  lo.ctx = *ctx;
  lo.n_tokens = a.n_tokens;
  lo.reps = a.reps;
  lo.seed = a.seed;
  lo.budget_s = budget;
  lo.progress = progress;
  auto ladder = bench::run_context_ladder(e, lo);
  if (!ladder) {
    prog.done();
    return fail(ladder.status().message());
  }
  prog.done();
  for (const auto& n : ladder->notes) {
    std::fprintf(stderr, "bench: %s\n", n.c_str());
    report["notes"].push_back(n);
  }
  report["ladder"] = bench::ladder_json(ladder->rungs, cost, &*bw);
  add_memory_plan(report, cfg, e, threads);
  std::vector<int64_t> measured_ctx;
  for (const auto& r : ladder->rungs) measured_ctx.push_back(r.ctx);

  std::vector<bench::PrefillPoint> points;
  for (const auto& r : ladder->rungs) {
    bench::PrefillPoint p;
    p.source = "ladder";
    p.from_ctx = r.fill_from;
    p.ctx = r.ctx;
    p.new_tokens = r.fill_new_tokens;
    p.ttft_s = {r.fill_ttft_s};
    points.push_back(p);
  }
  if (!prefill.empty()) {
    auto pp = bench::run_prefill_points(e, prefill, a.prefill_reps, a.seed + 1, progress);
    if (!pp) {
      prog.done();
      return fail(pp.status().message());
    }
    points.insert(points.end(), pp->begin(), pp->end());
  }
  std::vector<int64_t> windows = measured_ctx;
  if (e.model().config().n_ctx_train > 0) windows.push_back(e.model().config().n_ctx_train);
  for (int64_t w : {int64_t(131072), int64_t(200000)})
    if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
  std::sort(windows.begin(), windows.end());
  windows.erase(std::unique(windows.begin(), windows.end()), windows.end());
  report["prefill"] = bench::prefill_json(points, windows);

  if (!conc.empty()) {
    bench::EngineTarget target(e, a.conc_prompt, a.n_tokens, a.seed + 2);
    auto levels = bench::run_load(target, load_options(a, conc, rates, prog));
    if (!levels) {
      prog.done();
      return fail(levels.status().message());
    }
    json lv = json::array();
    for (const auto& l : *levels) {
      lv.push_back(bench::load_level_json(l));
      if (!l.error.empty())
        report["notes"].push_back(fmt::format("{} level {}: {} failed request(s), last error: {}",
                                              l.mode, l.concurrency, l.metrics.failed, l.error));
    }
    report["concurrency"] = {{"target", "in-process engine"},
                             {"prompt_length", a.conc_prompt},
                             {"prompt_unit", "tokens"},
                             {"max_tokens", a.n_tokens},
                             {"levels", lv}};
  }
  const engine::EngineStats st = e.stats();
  report["conditions"] = {
      {"target", {{"kind", "in-process"}}},
      {"model", bench::model_conditions(e)},
      {"kv", bench::kv_conditions(e)},
      {"engine", bench::engine_conditions(e.config())},
      {"machine", machine_conditions()},
      {"build", build_conditions()},
      {"sampler", sampler_conditions(a.seed)},
      {"workload",
       {{"ctx_requested", *ctx},
        {"ctx_measured", measured_ctx},
        {"n_tokens", a.n_tokens},
        {"reps", a.reps},
        {"warmup", "1 request per rung (the timed fill)"},
        {"ladder_method",
         "each rung's prompt extends the previous one; the prefix cache serves the shared "
         "pages, so the fill computes only the new tail at depth from_ctx"},
        {"budget_s", budget},
        {"prefill", prefill},
        {"prefill_reps", a.prefill_reps},
        {"concurrency", conc},
        {"concurrency_prompt_tokens", a.conc_prompt},
        {"requests_per_client", a.conc_requests},
        {"poisson_rates", rates},
        {"poisson_requests", a.poisson_requests},
        {"seed", a.seed}}},
      {"engine_stats",
       {{"steps", st.steps},
        {"preemptions", st.preemptions},
        {"generated_tokens", st.generated_tokens},
        {"prompt_tokens", st.prompt_tokens},
        {"prompt_tokens_computed", st.prompt_tokens_computed},
        {"prefix_cache_hits", st.prefix_cache_hits}}}};
  report["machine"] = bench::bandwidth_json(*bw);
  eng->reset();

  if (!specs->empty() && !measured_ctx.empty()) {
    json rows = json::array();
    AblationRow row{"baseline", model, cfg};
    json prev;
    std::vector<std::pair<std::string, AblationRow>> plan = {{"", row}};
    for (const auto& s : *specs) {
      if (auto stt = apply_switch(s, row); !stt) {
        prog.done();
        return fail(stt.message());
      }
      row.name = s;
      plan.push_back({s, row});
    }
    for (size_t i = 0; i < plan.size(); ++i) {
      const AblationRow& r = plan[i].second;
      std::fprintf(stderr, "\nbench: ablation row %zu/%zu: %s\n", i + 1, plan.size(),
                   r.name.c_str());
      auto re = engine::Engine::create(r.cfg);
      if (!re) {
        prog.done();
        return fail(fmt::format("ablation row '{}': {}", r.name, re.status().message()));
      }
      bench::LadderOptions ao = lo;
      ao.ctx = measured_ctx;
      ao.budget_s = 0;
      auto lad = bench::run_context_ladder(**re, ao);
      if (!lad) {
        prog.done();
        return fail(fmt::format("ablation row '{}': {}", r.name, lad.status().message()));
      }
      json cells = json::array();
      const json full = bench::ladder_json(lad->rungs, bench::model_cost(**re), &*bw);
      for (size_t k = 0; k < full.size(); ++k) {
        json c = {{"ctx", full[k]["ctx"]},
                  {"tok_s_p50", full[k]["decode"]["tok_s_p50"]},
                  {"tok_s_p95", full[k]["decode"]["tok_s_p95"]},
                  {"tpot_ms_p50", full[k]["decode"]["tpot_ms_p50"]},
                  {"tok_s_spread", full[k]["decode"]["tok_s_spread"]},
                  {"prefill_tok_s", full[k]["prefill"]["tok_s"]},
                  {"kv_bytes", full[k]["kv_bytes"]},
                  {"delta_pct", nullptr}};
        if (!prev.is_null() && k < prev.size()) {
          const double p = prev[k]["tok_s_p50"].get<double>();
          if (p > 0) c["delta_pct"] = 100.0 * (c["tok_s_p50"].get<double>() - p) / p;
        }
        cells.push_back(c);
      }
      rows.push_back({{"name", i == 0 ? "baseline" : r.name},
                      {"switch", i == 0 ? "-" : plan[i].first},
                      {"model", bench::model_conditions(**re)},
                      {"kv", bench::kv_conditions(**re)},
                      {"engine", bench::engine_conditions(r.cfg)},
                      {"ladder", cells},
                      {"quality", nullptr}});
      prev = cells;
    }
    prog.done();
    json quality_summary = nullptr;
    std::string quality_note = "quality not measured (--quality off)";
    std::vector<json> row_quality(plan.size(), {{"skipped", "--quality off"}});
    if (quality) {
      std::vector<bench::QualityConfig> qrows;
      for (size_t i = 0; i < plan.size(); ++i) {
        const engine::EngineConfig& c = plan[i].second.cfg;
        qrows.push_back({i == 0 ? "baseline" : plan[i].second.name, c.model_path,
                         bench::kv_spelling(c.k_type), bench::kv_spelling(c.v_type),
                         std::min(c.batch_tokens, c.ubatch_tokens), c.n_threads, c.kv_tiled});
      }
      StderrObserver obs;
      auto q = bench::measure_quality(qopt, qrows, obs);
      if (q) {
        row_quality = q->rows;
        quality_summary = q->summary;
        for (const auto& n : q->notes) {
          std::fprintf(stderr, "bench: %s\n", n.c_str());
          report["notes"].push_back(n);
        }
        quality_note =
            "quality cost vs row 0: KL(row 0 ‖ row) of the next-token distributions in the "
            "bucket (C/2, C] of each quality context C (one lockstep pass, eval kl), and needle "
            "accuracy of the built-in retriever with the row's KV formats";
      } else {
        quality_note = "quality not measured: " + q.status().message();
        report["notes"].push_back(quality_note);
        std::fprintf(stderr, "bench: %s\n", quality_note.c_str());
        row_quality.assign(plan.size(), {{"skipped", quality_note}});
      }
    }
    for (size_t i = 0; i < rows.size(); ++i) rows[i]["quality"] = row_quality[i];
    report["ablation"] = {
        {"rows", rows},
        {"method",
         "each row applies its switch on top of the row above; delta_pct = change of "
         "decode tok/s P50 vs the row above at the same context"},
        {"quality", quality_summary},
        {"quality_note", quality_note}};
  }
  prog.done();
  return finish_report(report, a);
}


}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand(
      "bench",
      "Measure sustained speed: context ladder, prefill gradient, concurrency ladder, ablation "
      "matrix and roofline → report.json / report.md / report.html");
  sub->add_option("-m,--model", a->model,
                  "GGUF model (default: a synthetic " + std::string(kDefaultPreset) + " " +
                      kDefaultType + ", made once and cached)");
  sub->add_option("--preset", a->preset, "synthetic model shape (see `sustain synth --list`)");
  sub->add_option("--type", a->type, "synthetic model weight format: " + tools::file_type_names());
  sub->add_option("--ctx", a->ctx,
                  std::string("context ladder, ascending (default ") + kDefaultCtx +
                      ", stopped where the --budget runs out)");
  sub->add_option("-n,--n-predict", a->n_tokens, "tokens generated per request")
      ->capture_default_str();
  sub->add_option("-r,--repetitions", a->reps, "timed repetitions per rung, after a warm-up")
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--cache-type-k", a->cache_type_k, "K cache format (alias -ctk)")
      ->capture_default_str();
  sub->add_option("--cache-type-v", a->cache_type_v, "V cache format (alias -ctv)")
      ->capture_default_str();
  add_kv_layout_flag(sub, a->kv_layout, "--kv-layout");
  sub->add_option("-b,--batch-size", a->batch, "tokens per engine step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  sub->add_option("--ubatch-size", a->ubatch, "tokens computed at once (alias -ub)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  sub->add_option("-o,--output", a->out, "report directory (default: reports/<UTC time>)");
  sub->add_option("--prefill", a->prefill,
                  "prefill gradient from an empty cache at these prompt lengths (e.g. 10K,50K)");
  sub->add_option("--prefill-reps", a->prefill_reps, "repetitions per --prefill length")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  sub->add_option("--concurrency", a->concurrency, "concurrency ladder levels")
      ->capture_default_str();
  sub->add_option("--conc-prompt", a->conc_prompt,
                  "prompt length of the concurrency ladder (tokens; words with --url)")
      ->capture_default_str();
  sub->add_option("--conc-requests", a->conc_requests, "requests per client at each level")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  sub->add_option("--rate", a->rates,
                  "Poisson arrival rates, requests/s (default: 50 % and 90 % of the measured "
                  "capacity)");
  sub->add_option("--poisson-requests", a->poisson_requests, "requests per Poisson rate")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_flag("--no-concurrency", a->no_concurrency, "skip the concurrency ladder");
  sub->add_option("--ablate", a->ablate,
                  "ablation row switching one thing on top of the row above, key=value[,...] "
                  "with keys ctk, ctv, kv, layout (tiled|rows), prefix, batch, ubatch, threads, model "
                  "(repeatable)");
  sub->add_option("--ablate-file", a->ablate_file, "ablation rows, one per line (# comments)");
  sub->add_option("--budget", a->budget,
                  "seconds the context ladder may take; later rungs projected past it are "
                  "skipped (default 300 for the default ladder, none for --ctx; 0 = none)");
  sub->add_option("--seed", a->seed, "seed of the random prompts")->capture_default_str();
  sub->add_option("--quality", a->quality,
                  "with --ablate: measure each row's quality cost against row 0 (KL, needle)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--quality-ctx", a->quality_ctx,
                  "quality contexts C, each at least 2x the one below: KL in the bucket "
                  "(C/2, C] of one pass to the largest, needle cases of C tokens")
      ->capture_default_str();
  sub->add_option("--quality-text", a->quality_text,
                  "KL input: this text (tokenized by the baseline model) instead of seeded "
                  "random ids; at least the largest --quality-ctx tokens");
  sub->add_option("--quality-budget", a->quality_budget,
                  "seconds the quality pass may take; contexts projected past it are skipped "
                  "with a note (0 = none)")
      ->capture_default_str();
  sub->add_option("--quality-needle", a->quality_needle,
                  "needle retriever variant for the needle accuracy (default, dense, cut<F>, "
                  "control) or off")
      ->capture_default_str();
  sub->add_option("--quality-trials", a->quality_trials,
                  "needle cases per (context, depth); depths 0.1, 0.5, 0.9")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--bw-mib", a->bw_mib, "bandwidth buffer size (MiB)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(64), int64_t(1) << 20));
  sub->add_option("--bw-reps", a->bw_reps, "bandwidth repetitions")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--url", a->url,
                  "run the concurrency ladder against an OpenAI-compatible server "
                  "(http://HOST:PORT) instead of the in-process engine");
  sub->add_option("--api-key", a->api_key, "with --url: bearer token");
  sub->add_option("--model-name", a->model_name,
                  "with --url: the request's model field (default: first of GET /v1/models)");
  auto* bwc = sub->add_subcommand("bandwidth", "measure read bandwidth and peak FLOP/s only");
  auto as_json = std::make_shared<bool>(false);
  bwc->add_flag("--json", *as_json, "print JSON");
  bwc->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  bwc->add_option("--bw-mib", a->bw_mib, "buffer size (MiB)")
      ->check(CLI::Range(int64_t(64), int64_t(1) << 20));
  bwc->add_option("--bw-reps", a->bw_reps, "repetitions")->check(CLI::Range(1, 1000));
  return [a, bwc, as_json] {
    if (bwc->parsed()) return run_bandwidth(*a, *as_json);
    a->command_line = "sustain bench";
    if (!a->model.empty()) a->command_line += " -m " + a->model;
    if (!a->preset.empty()) a->command_line += " --preset " + a->preset;
    if (!a->type.empty()) a->command_line += " --type " + a->type;
    if (!a->ctx.empty()) a->command_line += " --ctx " + a->ctx;
    a->command_line += fmt::format(" -n {} -r {}", a->n_tokens, a->reps);
    if (!a->url.empty()) {
      a->command_line += " --url " + a->url;
      return run_http(*a);
    }
    return run_in_process(*a);
  };
}

}  // namespace sustain::cli

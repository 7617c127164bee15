// `sustain bench`: the speed–context curve (context ladder), the prefill
// gradient, the concurrency ladder (in-process, or any OpenAI endpoint with
// --url), the ablation matrix and the roofline, written as report.json,
// report.md and report.html. `sustain bench bandwidth` measures the machine
// alone. The run lives in src/bench (bench/run.h); this file parses the
// flags into a bench::BenchConfig, shows progress and writes the report.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/ablation.h"
#include "bench/ablation_quality.h"
#include "bench/conditions.h"
#include "bench/model_cache.h"
#include "bench/report.h"
#include "bench/results.h"
#include "bench/run.h"
#include "bench/verify_curve.h"
#include "cli/cmd_bench_soak.h"
#include "cli/commands.h"
#include "cli/file_io.h"
#include "cli/model_session.h"
#include "cli/progress.h"
#include "cli/ranks.h"
#include "cli/serving_flags.h"
#include "cli/spec_flags.h"
#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "grammar/schema.h"
#include "sampling/sampler.h"
#include "tools/quant_mix.h"

namespace sustain::cli {
namespace {

struct BenchArgs {
  std::string model, preset, type;
  std::string mmproj;
  std::vector<std::string> images;
  ServingArgs serving;
  SpecArgs spec;
  SplitArgs split;
  std::string ctx;
  int n_tokens = 32;
  int reps = 3;
  std::string fill = "prefill";
  int threads = 0;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string kv_layout = "tiled";
  bool swa_full = false;
  bool repack = false, repack_asked = false;
  int64_t batch = 512, ubatch = 512;
  std::string out;
  std::string prefill;
  std::string verify_curve, verify_depths;
  int prefill_reps = 1;
  std::string concurrency = "1,2,4,8";
  int64_t conc_prompt = 256;
  int conc_requests = 2;
  std::string rates;
  int poisson_requests = 8;
  bool no_concurrency = false;
  std::vector<std::string> ablate;
  std::string ablate_file;
  bool ablate_bracket = false;
  double budget = -1;  // < 0: 300 s for the default ladder, none for an explicit --ctx
  uint64_t seed = 1234;
  float temperature = 0.0f;  // --temp
  // --top-k, --top-p, --min-p; below 0: not given (the sampler's default).
  int32_t top_k = -1;
  float top_p = -1.0f, min_p = -1.0f;
  int32_t logprobs = -1;  // --logprobs; below 0: not asked for
  int64_t bw_mib = 1024;
  int bw_reps = 5;
  std::string url, api_key, model_name;
  std::string json_schema_file;  // with --url
  // The ablation rows' quality cost against row 0 (bench/ablation_quality.h).
  std::string quality = "on";
  std::string quality_ctx = "8192";
  std::string quality_text;
  double quality_budget = 600;
  std::string quality_needle = "default";
  int quality_trials = 1;
};

Expected<std::vector<int64_t>> parse_list(const std::string& s, const char* flag,
                                          bool allow_zero = false) {
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
    if (item.empty() || *end != '\0' || errno != 0 || v < (allow_zero ? 0 : 1) ||
        v > (int64_t(1) << 32) / mult)
      return error(Code::kInvalidArgument, "{} '{}': '{}' is not a {} count (e.g. 512,2K,8192)",
                   flag, s, item, allow_zero ? "non-negative" : "positive");
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

// --ablate rows, then those of --ablate-file (one per line, # comments).
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

// The flags as a bench::BenchConfig. Only the lists the run uses are
// parsed (the HTTP target has no ladder, --no-concurrency no levels), and
// the ablation rows and quality contexts are checked here, in flag order,
// so that errors quote what was typed.
Expected<bench::BenchConfig> bench_config(const BenchArgs& a) {
  bench::BenchConfig c;
  c.model = a.model;
  c.preset = a.preset;
  c.type = a.type;
  c.budget_s = a.budget;
  c.n_tokens = a.n_tokens;
  c.reps = a.reps;
  c.random_fill = a.fill == "random";
  c.threads = a.threads > 0 ? a.threads : default_threads();
  c.cache_type_k = a.cache_type_k;
  c.cache_type_v = a.cache_type_v;
  c.kv_tiled = kv_tiled(a.kv_layout);
  c.swa_full = a.swa_full;
  c.repack = a.repack;
  c.batch = a.batch;
  c.ubatch = a.ubatch;
  {
    engine::EngineConfig ec;
    SUSTAIN_TRY(apply_serving_flags(a.serving, ec));
    c.tpot_target_ms = ec.tpot_target_ms;
    c.prefill_age_bound_s = ec.prefill_age_bound_s;
    c.batch_invariant = ec.batch_invariant;
  }
  SUSTAIN_ASSIGN_OR_RETURN(c.spec, spec_config(a.spec));
  c.prefill_reps = a.prefill_reps;
  c.conc_prompt = a.conc_prompt;
  c.conc_requests = a.conc_requests;
  c.poisson_requests = a.poisson_requests;
  c.quality = a.quality == "on";
  c.quality_text = a.quality_text;
  c.quality_budget_s = a.quality_budget;
  c.quality_needle = a.quality_needle;
  c.quality_trials = a.quality_trials;
  c.seed = a.seed;
  c.chain.temperature = a.temperature;
  if (a.top_k >= 0 || a.top_p >= 0.0f || a.min_p >= 0.0f) {
    if (a.temperature <= 0.0f)
      return error(Code::kInvalidArgument,
                   "bench: --top-k, --top-p and --min-p shape a sampling chain, which needs "
                   "--temp above 0 (at --temp 0 every request is greedy)");
    if (a.top_k >= 0) c.chain.top_k = a.top_k;
    if (a.top_p >= 0.0f) c.chain.top_p = a.top_p;
    if (a.min_p >= 0.0f) c.chain.min_p = a.min_p;
    SUSTAIN_TRY(sampling::validate(bench::bench_sampler(c.chain)).with_context("bench"));
  }
  c.chain.top_logprobs = a.logprobs;
  c.bw_mib = a.bw_mib;
  c.bw_reps = a.bw_reps;
  c.url = a.url;
  c.api_key = a.api_key;
  c.model_name = a.model_name;
  c.concurrency.clear();
  c.mmproj = a.mmproj;
  c.images = a.images;
  if (!a.json_schema_file.empty()) {
    if (a.url.empty())
      return error(Code::kInvalidArgument,
                   "--json-schema constrains the requests sent to --url; the in-process engine "
                   "takes --ablate grammar=FILE");
    std::ifstream f(a.json_schema_file);
    if (!f) return error(Code::kNotFound, "--json-schema {}: cannot open the file", a.json_schema_file);
    std::stringstream ss;
    ss << f.rdbuf();
    c.json_schema = nlohmann::json::parse(ss.str(), nullptr, false);
    if (c.json_schema.is_discarded() || !c.json_schema.is_object())
      return error(Code::kInvalidArgument, "--json-schema {}: not a JSON object",
                   a.json_schema_file);
  }
  if (!a.url.empty()) {
    if (!a.images.empty() || !a.mmproj.empty())
      return error(Code::kInvalidArgument,
                   "--mmproj/--image measure the in-process engine; not with --url");
    if (c.random_fill)
      return error(Code::kInvalidArgument,
                   "--fill random fills the in-process context ladder's cache; --url runs no "
                   "ladder (a server's prompts are always prefilled)");
    SUSTAIN_ASSIGN_OR_RETURN(c.concurrency, parse_list(a.concurrency, "--concurrency"));
    SUSTAIN_ASSIGN_OR_RETURN(c.rates, parse_rates(a.rates));
    return c;
  }
  if (!a.ctx.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(c.ctx, parse_list(a.ctx, "--ctx"));
  }
  if (!a.verify_curve.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(c.verify_ks, bench::parse_verify_ks(a.verify_curve));
  }
  if (!a.verify_depths.empty()) {
    if (a.verify_curve.empty())
      return error(Code::kInvalidArgument,
                   "--verify-depths: give the draft lengths to time with --verify-curve "
                   "(e.g. --verify-curve 0,1,2,4,8,16)");
    SUSTAIN_ASSIGN_OR_RETURN(c.verify_depths, parse_list(a.verify_depths, "--verify-depths", true));
    for (size_t i = 1; i < c.verify_depths.size(); ++i)
      if (c.verify_depths[i] <= c.verify_depths[i - 1])
        return error(Code::kInvalidArgument, "--verify-depths: the list must ascend ({} after {})",
                     c.verify_depths[i], c.verify_depths[i - 1]);
  }
  if (!a.prefill.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(c.prefill, parse_list(a.prefill, "--prefill"));
  }
  if (!a.no_concurrency) {
    SUSTAIN_ASSIGN_OR_RETURN(c.concurrency, parse_list(a.concurrency, "--concurrency"));
    SUSTAIN_ASSIGN_OR_RETURN(c.rates, parse_rates(a.rates));
  }
  SUSTAIN_ASSIGN_OR_RETURN(c.ablate, ablation_specs(a));
  SUSTAIN_TRY(bench::check_ablation(c.ablate));
  if (a.ablate_bracket && c.ablate.empty())
    return error(Code::kInvalidArgument,
                 "--ablate-bracket: give the rows to bracket with --ablate or --ablate-file");
  c.ablate_bracket = a.ablate_bracket;
  if (!c.ablate.empty() && c.quality) {
    SUSTAIN_ASSIGN_OR_RETURN(c.quality_ctx, parse_list(a.quality_ctx, "--quality-ctx"));
    SUSTAIN_TRY(bench::check_quality_ctx(c.quality_ctx, a.quality_ctx));
  }
  return c;
}

std::string command_line(const BenchArgs& a) {
  std::string s = "sustain bench";
  if (!a.model.empty()) s += " -m " + a.model;
  if (!a.preset.empty()) s += " --preset " + a.preset;
  if (!a.type.empty()) s += " --type " + a.type;
  if (!a.ctx.empty()) s += " --ctx " + a.ctx;
  s += fmt::format(" -n {} -r {}", a.n_tokens, a.reps);
  if (!a.url.empty()) s += " --url " + a.url;
  if (!a.json_schema_file.empty()) s += " --json-schema " + a.json_schema_file;
  if (a.temperature > 0.0f) s += fmt::format(" --temp {}", a.temperature);
  if (a.top_k >= 0) s += fmt::format(" --top-k {}", a.top_k);
  if (a.top_p >= 0.0f) s += fmt::format(" --top-p {}", a.top_p);
  if (a.min_p >= 0.0f) s += fmt::format(" --min-p {}", a.min_p);
  if (a.logprobs >= 0) s += fmt::format(" --logprobs {}", a.logprobs);
  if (!a.mmproj.empty()) s += " --mmproj " + a.mmproj;
  for (const auto& i : a.images) s += " --image " + i;
  return s;
}

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

// --ablate grammar=json|FILE: any JSON object, or the JSON schema in FILE,
// as the sampler's constraint on the row's engine, recording mask times.
Expected<bench::BenchConstraint> bench_constraint(const std::string& spec, engine::Engine& e) {
  Expected<grammar::Grammar> g = Status(Code::kInternal, "unset");
  if (spec == "json") {
    g = grammar::parse_gbnf(grammar::json_object_gbnf());
  } else {
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_text_file(spec, "JSON schema"));
    auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded())
      return error(Code::kInvalidArgument, "--ablate grammar={}: the file is not valid JSON", spec);
    g = grammar::compile_json_schema(j);
  }
  if (!g) return g.status().with_context("--ablate grammar=" + spec);
  auto c = std::make_shared<grammar::GrammarConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(*g)),
      grammar::TokenVocab::from_tokenizer(e.tokenizer()));
  SUSTAIN_TRY(c->check_startable());
  c->record_mask_times(true);
  bench::BenchConstraint out;
  out.factory = c;
  out.take_mask_times_us = [c] { return c->take_mask_times_us(); };
  return out;
}

// The bench on this process alone (ranks null) or on rank 0 of a split.
int bench_main(const BenchArgs& a, const engine::EngineRanks* ranks) {
  auto c = bench_config(a);
  if (!c) return fail(c.status().message());
  c->command_line = command_line(a);
  c->make_constraint = bench_constraint;
  c->ranks = ranks;
  StderrObserver obs;
  auto report = bench::run_bench(*c, obs);
  if (!report) return fail(report.status().message());
  const std::string dir = a.out.empty() ? "reports/" + bench::utc_now("%Y%m%d-%H%M%S") : a.out;
  if (auto st = bench::write_reports(*report, dir); !st) return fail(st.message());
  std::printf("%s/report.json\n%s/report.md\n%s/report.html\n", dir.c_str(), dir.c_str(),
              dir.c_str());
  return 0;
}

// `mpirun -np R sustain bench -m M --split layer|tensor`: rank 0 runs the
// bench, every engine it makes over the ranks; the others follow.
int run_bench(const BenchArgs& a) {
  const bool split = !a.split.split.empty() && a.split.split != "none";
  if (split && a.model.empty())
    return fail(
        "bench --split needs the model as a file (-m): every rank opens it (make a "
        "preset's file with `sustain synth --preset P --type T -o FILE`)");
  if (split && !a.url.empty())
    return fail(
        "bench --split measures the in-process engine over ranks; --url measures a "
        "server (start that one with mpirun ... sustain serve --split)");
  return run_engine_command(a.split, a.model,
                            [&a](const engine::EngineRanks* r) { return bench_main(a, r); });
}

int run_bandwidth(const BenchArgs& a, bool as_json) {
  StderrObserver obs;
  auto bw = bench::measure_machine(a.threads > 0 ? a.threads : default_threads(), a.bw_mib,
                                   a.bw_reps, obs);
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

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand(
      "bench",
      "Measure sustained speed: context ladder, prefill gradient, concurrency ladder, ablation "
      "matrix and roofline → report.json / report.md / report.html; `bench soak`: mixed traffic "
      "against a server for a duration, with a verdict");
  sub->add_option("-m,--model", a->model,
                  "GGUF model (default: a synthetic " + std::string(bench::kDefaultPreset) + " " +
                      bench::kDefaultType + ", made once and cached)");
  sub->add_option("--preset", a->preset, "synthetic model shape (see `sustain synth --list`)");
  sub->add_option("--type", a->type, "synthetic model weight format: " + tools::file_type_names());
  sub->add_option(
      "--ctx", a->ctx,
      fmt::format("context ladder, ascending (default {}, stopped where the --budget runs out)",
                  fmt::join(bench::kDefaultLadder, ",")));
  sub->add_option("-n,--n-predict", a->n_tokens, "tokens generated per request")
      ->capture_default_str();
  sub->add_option("-r,--repetitions", a->reps, "timed repetitions per rung, after a warm-up")
      ->capture_default_str();
  sub->add_option("--fill", a->fill,
                  "how the context ladder's prompts get their K/V: prefill (computed, timed as "
                  "the rung's prefill) or random (random values written straight into the "
                  "cache, then decode timed at that depth: a 32K rung costs seconds instead of "
                  "minutes of prefill; prefill is not measured, the text generated means "
                  "nothing; not over ranks, with sliding-window layers, or with spec=draft/mtp)")
      ->check(CLI::IsMember({"prefill", "random"}))
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--cache-type-k", a->cache_type_k, "K cache format (alias -ctk)")
      ->capture_default_str();
  sub->add_option("--cache-type-v", a->cache_type_v, "V cache format (alias -ctv)")
      ->capture_default_str();
  add_kv_layout_flag(sub, a->kv_layout, "--kv-layout");
  add_repack_flags(sub, a->repack, a->repack_asked);
  sub->add_flag("--swa-full", a->swa_full,
                "sliding-window models (Gemma 3): keep the window layers' K/V for the whole "
                "context (by default they keep only their windows)");
  sub->add_option("-b,--batch-size", a->batch, "tokens per engine step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  sub->add_option("--ubatch-size", a->ubatch, "tokens computed at once (alias -ub)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  add_serving_flags(sub, a->serving);
  add_spec_flags(sub, a->spec);
  add_split_flags(sub, a->split);
  sub->add_option("-o,--output", a->out, "report directory (default: reports/<UTC time>)");
  sub->add_option("--prefill", a->prefill,
                  "prefill gradient from an empty cache at these prompt lengths (e.g. 10K,50K)");
  sub->add_option("--verify-curve", a->verify_curve,
                  "time a speculative verify step of k drafts (k + 1 tokens, logits for each) at "
                  "every ladder depth for these k (e.g. 0,1,2,4,8,16; k = 0 is the decode step "
                  "they are compared with), over random K/V; reports each k's cost ratio and "
                  "the best k and speedup it implies at acceptance 0.5..0.9");
  sub->add_option("--verify-depths", a->verify_depths,
                  "with --verify-curve: the depths to time it at (e.g. 0,4K,32K,128K) instead of "
                  "the ladder's; the cache is filled with random K/V, so no prefill is needed "
                  "and depths past the ladder cost seconds");
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
  sub->add_option(
      "--ablate", a->ablate,
      "ablation row switching one thing on top of the row above, key=value[,...] "
      "with keys ctk, ctv, kv, layout (tiled|rows), prefix, batch, ubatch, threads, repack "
      "(on|off: --repack / --no-repack), sampling (pool|serial: a step's streams, verify rows and "
      "draft draws "
      "sampled over the threads "
      "or one after another; also runs the concurrency levels), model, "
      "spec (off|ngram|draft|mtp|oracle:ALPHA; an oracle is for measurement only: it drafts "
      "the greedy continuation the rung's first run made, each token wrong with probability "
      "1-ALPHA), draft (tokens drafted at most, 1..16), mtp_depth (spec=mtp: tokens chained a "
      "step, 1..16), gate (on|off: the speculation gate "
      "chooses each step's draft length, or every step drafts --draft), draft_model (a GGUF "
      "for spec=draft), grammar (off|json|a JSON schema file: every generated token "
      "constrained; reports the mask time per token, and also runs the concurrency levels), "
      "split (under mpirun … --split: on|off|layer|tensor — the job's split, rank 0 alone, or "
      "the same ranks cut that way; also runs the concurrency levels, and the report names "
      "the layout that wins decode and prefill) (repeatable)");
  sub->add_option("--ablate-file", a->ablate_file, "ablation rows, one per line (# comments)");
  sub->add_flag("--ablate-bracket", a->ablate_bracket,
                "with --ablate: each row switches one thing on row 0's engine alone (not on top "
                "of the rows above), row 0's engine runs again after every row, and each row's "
                "decode speed is also given against the mean of the row-0 runs just before and "
                "after it (vs_bracket): on a machine whose speed drifts within minutes, the "
                "ratio to neighbours is what holds");
  sub->add_option("--budget", a->budget,
                  "seconds the context ladder may take; later rungs projected past it are "
                  "skipped (default 300 for the default ladder, none for --ctx; 0 = none)");
  sub->add_option("--seed", a->seed, "seed of the random prompts")->capture_default_str();
  sub->add_option("--temp", a->temperature,
                  "sampling temperature of the context and concurrency ladders' requests, in "
                  "process or --url: 0 = greedy; above 0 the sampler's default chain (`sustain "
                  "run`'s and llama.cpp's: top_k 40, "
                  "top_p 0.95, min_p 0.05, or as --top-k/--top-p/--min-p say) with a seed per "
                  "request, so a step pays for sampling")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 2.0f));
  sub->add_option("--top-k", a->top_k,
                  "with --temp: the requests' top-k (default 40; 0 = none, what an OpenAI "
                  "client that names none gets)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--top-p", a->top_p, "with --temp: the requests' top-p (default 0.95; 1 = none)")
      ->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--min-p", a->min_p, "with --temp: the requests' min-p (default 0.05; 0 = none)")
      ->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--logprobs", a->logprobs,
                  "the ladders' requests also ask for each token's logprob and this many "
                  "alternatives (0 = the token's own only; in process or --url, where it is "
                  "/v1/completions' `logprobs`), as an evaluation harness does")
      ->check(CLI::Range(0, static_cast<int>(engine::kMaxTopLogprobs)));
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
  sub->add_option("--mmproj", a->mmproj,
                  "vision projector (mmproj) for the image-cost section (with --image)");
  sub->add_option("--image", a->images,
                  "PNG/JPEG to measure (repeatable): encode time and the prefill of a prompt "
                  "holding it beside a text prompt of as many positions, -r times");
  sub->add_option("--url", a->url,
                  "run the concurrency ladder against an OpenAI-compatible server "
                  "(http://HOST:PORT) instead of the in-process engine");
  sub->add_option("--api-key", a->api_key, "with --url: bearer token");
  sub->add_option("--json-schema", a->json_schema_file,
                  "with --url: constrain every request by the JSON schema in FILE, sent as "
                  "response_format and as llama-server's json_schema field");
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
  auto soak = add_bench_soak(*sub);
  auto* soak_cmd = sub->get_subcommand("soak");
  return [a, bwc, as_json, soak, soak_cmd] {
    if (bwc->parsed()) return run_bandwidth(*a, *as_json);
    if (soak_cmd->parsed()) return soak();
    return run_bench(*a);
  };
}

}  // namespace sustain::cli

#include "bench/run.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "bench/ablation.h"
#include "bench/ablation_quality.h"
#include "bench/conditions.h"
#include "bench/http_target.h"
#include "bench/load.h"
#include "bench/model_cache.h"
#include "bench/plan_input.h"
#include "bench/report.h"
#include "bench/results.h"
#include "bench/sysinfo.h"
#include "bench/verify_curve.h"
#include "bench/vision.h"
#include "bench/workloads.h"
#include "engine/image_input.h"
#include "plan/plan.h"
#include "tensor/kv_names.h"
#include "tools/needle_retriever.h"

namespace sustain::bench {
namespace {

using nlohmann::json;

int resolve_threads(int threads) {
  return threads > 0 ? threads : ThreadPool::hardware_threads();
}

LoadOptions load_options(const BenchConfig& c, const std::vector<int64_t>& conc,
                         const std::vector<double>& rates, PhaseBars& prog) {
  LoadOptions lo;
  lo.concurrency.assign(conc.begin(), conc.end());
  lo.requests_per_client = c.conc_requests;
  lo.poisson_rates = rates;
  lo.poisson_requests = c.poisson_requests;
  lo.seed = c.seed;
  lo.progress = [&prog](const std::string& p, double f, const std::string& d) { prog(p, f, d); };
  return lo;
}

void push_level_errors(const std::vector<LoadLevel>& levels, json& report) {
  for (const auto& l : levels)
    if (!l.error.empty())
      report["notes"].push_back(fmt::format("{} level {}: {} failed request(s), last error: {}",
                                            l.mode, l.concurrency, l.metrics.failed, l.error));
}

Expected<json> checked(json report) {
  if (auto st = validate_report(report); !st)
    return error(Code::kInternal, "internal: the report does not match its schema: {}",
                 st.message());
  return report;
}

// `sustain plan`'s prediction for the engine this run used, beside the
// peak RSS the ladder measured (DESIGN §6: memory as measured, beside the
// plan). The pool is given as a byte budget, so the plan's KV is the pool.
void add_memory_plan(json& report, const engine::EngineConfig& cfg, const engine::Engine& e,
                     int threads) {
  plan::PlanInput in;
  if (auto st = read_plan_file(cfg.model_path, in); !st.is_ok()) {
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
  in.kernel_scratch_bytes = kernel_scratch(in, in.ubatch, threads);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  in.host_capacity = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  auto pl = plan::make_plan(in);
  if (!pl) {
    report["notes"].push_back("memory: no plan (" + pl.status().message() + ")");
    return;
  }
  uint64_t peak = 0;
  for (const auto& r : report["ladder"])
    peak = std::max<uint64_t>(peak, r.value("peak_rss_bytes", 0));
  json m = {{"plan_total_bytes", pl->total_bytes}, {"plan_weights_bytes", pl->weights_bytes},
            {"plan_kv_bytes", pl->kv_bytes},       {"plan_scratch_bytes", pl->scratch_bytes},
            {"plan_host_bytes", pl->host_bytes},   {"engine_kv_bytes", e.kv_bytes()},
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

Expected<json> run_http(const BenchConfig& c, Observer& obs) {
  HttpTargetOptions ho;
  ho.url = c.url;
  ho.model = c.model_name;
  ho.api_key = c.api_key;
  ho.prompt_words = c.conc_prompt;
  ho.max_tokens = c.n_tokens;
  ho.seed = c.seed;
  ho.chain = c.chain;
  ho.json_schema = c.json_schema;
  SUSTAIN_ASSIGN_OR_RETURN(auto target, HttpTarget::create(ho));
  json report = new_report(c.command_line);
  PhaseBars prog(obs);
  auto levels = run_load(*target, load_options(c, c.concurrency, c.rates, prog));
  prog.done();
  if (!levels) return levels.status();
  json lv = load_levels_json(*levels);
  report["concurrency"] = {{"target", c.url},
                           {"prompt_length", c.conc_prompt},
                           {"prompt_unit", "words"},
                           {"max_tokens", c.n_tokens},
                           {"levels", lv}};
  report["conditions"] = {{"target",
                           {{"kind", "http"},
                            {"url", c.url},
                            {"model", target->model()},
                            {"endpoint", "/v1/completions (stream, stream_options.include_usage)"},
                            {"token_count", "usage.completion_tokens"},
                            {"emission", "an SSE event whose choices[].text is non-empty"}}},
                          {"machine", machine_conditions()},
                          {"build", build_conditions()},
                          {"sampler", sampler_conditions(c.seed, c.chain)},
                          {"workload",
                           {{"concurrency", c.concurrency},
                            {"requests_per_client", c.conc_requests},
                            {"poisson_rates", c.rates},
                            {"poisson_requests", c.poisson_requests},
                            {"prompt_words", c.conc_prompt},
                            {"max_tokens", c.n_tokens},
                            {"seed", c.seed},
                            {"json_schema", c.json_schema}}}};
  report["notes"].push_back(
      "HTTP target: no context ladder or roofline (the server's machine is not this one); "
      "conditions.machine describes the client");
  push_level_errors(*levels, report);
  return checked(std::move(report));
}

// Everything but the model, checked before anything runs; `quality_ctx`
// comes back sorted.
Status check_config(const BenchConfig& c, const std::vector<int64_t>& ctx, bool quality,
                    std::vector<int64_t>& quality_ctx) {
  for (int64_t v : ctx)
    if (v <= 0) return error(Code::kInvalidArgument, "--ctx: {} is not a positive count", v);
  for (int64_t v : c.prefill)
    if (v <= 0) return error(Code::kInvalidArgument, "--prefill: {} is not a positive count", v);
  SUSTAIN_TRY(check_ablation(c.ablate));
  SUSTAIN_TRY(check_split_rows(c.ablate, c.ranks));
  if (quality) {
    SUSTAIN_TRY(check_quality_ctx(quality_ctx, fmt::format("{}", fmt::join(quality_ctx, ","))));
    if (!(c.quality_budget_s >= 0))
      return error(Code::kInvalidArgument, "--quality-budget {}: give seconds >= 0 (0 = none)",
                   c.quality_budget_s);
    if (c.quality_needle != "off")
      if (auto v = tools::retriever_variant(c.quality_needle); !v)
        return v.status().with_context("--quality-needle");
  }
  if (c.n_tokens < 2)
    return error(Code::kInvalidArgument, "-n {}: need >= 2 tokens per request", c.n_tokens);
  if (c.reps < 1) return error(Code::kInvalidArgument, "-r {}: need >= 1 repetition", c.reps);
  if (c.conc_prompt < 1)
    return error(Code::kInvalidArgument, "--conc-prompt {}: need >= 1", c.conc_prompt);
  if (!c.images.empty() && c.mmproj.empty())
    return error(Code::kInvalidArgument, "--image needs --mmproj (the vision projector)");
  if (c.images.empty() && !c.mmproj.empty())
    return error(Code::kInvalidArgument, "--mmproj {}: give the images to measure with --image",
                 c.mmproj);
  for (const auto& path : c.images)
    if (!std::ifstream(path, std::ios::binary))
      return error(Code::kIo, "--image {}: cannot open", path);
  return Status::ok();
}

// The model file to run: c.model, or the cached synthetic model.
Expected<std::string> pick_model(const BenchConfig& c, int threads, Observer& obs) {
  if (c.model.empty()) {
    if (!c.type.empty() && c.preset.empty())
      obs.message(fmt::format("bench: --type without --preset: using the default preset {}",
                              kDefaultPreset));
    return cached_synth_model(c.preset.empty() ? kDefaultPreset : c.preset,
                              c.type.empty() ? kDefaultType : c.type, threads, obs);
  }
  if (!c.preset.empty() || !c.type.empty())
    return error(Code::kInvalidArgument,
                 "-m and --preset/--type both pick the model: give one or the other");
  return c.model;
}

Expected<json> run_in_process(const BenchConfig& c, Observer& obs) {
  const bool default_ladder = c.ctx.empty();
  std::vector<int64_t> ctx = c.ctx;
  if (default_ladder) ctx.assign(kDefaultLadder.begin(), kDefaultLadder.end());
  const double budget =
      c.budget_s >= 0 ? c.budget_s : (default_ladder ? kDefaultLadderBudgetS : 0.0);
  std::sort(ctx.begin(), ctx.end());
  ctx.erase(std::unique(ctx.begin(), ctx.end()), ctx.end());
  const std::vector<int64_t>& conc = c.concurrency;
  const bool quality = !c.ablate.empty() && c.quality;
  if (quality && c.ranks != nullptr)
    return error(Code::kUnsupported,
                 "bench: the ablation's quality columns do not run over ranks (--split) yet; "
                 "give --quality off");
  std::vector<int64_t> quality_ctx = c.quality_ctx;
  SUSTAIN_TRY(check_config(c, ctx, quality, quality_ctx));

  const int threads = resolve_threads(c.threads);
  SUSTAIN_ASSIGN_OR_RETURN(const std::string model, pick_model(c, threads, obs));
  SUSTAIN_ASSIGN_OR_RETURN(const QType kt, kv_cache_type(c.cache_type_k, "--cache-type-k (-ctk)"));
  SUSTAIN_ASSIGN_OR_RETURN(const QType vt, kv_cache_type(c.cache_type_v, "--cache-type-v (-ctv)"));
  QualityOptions qopt;
  if (quality) {
    // Read now: a short quality text must not cost a whole bench first.
    SUSTAIN_ASSIGN_OR_RETURN(qopt.tokens, quality_tokens(model, c.quality_text, quality_ctx.back(),
                                                         c.seed, &qopt.input));
    qopt.ctx = quality_ctx;
    qopt.budget_s = c.quality_budget_s;
    qopt.needle = c.quality_needle;
    qopt.needle_trials = c.quality_trials;
    qopt.seed = c.seed;
    qopt.threads = threads;
  }

  constexpr int kPage = 32;
  engine::EngineConfig cfg;
  cfg.model_path = model;
  cfg.n_threads = threads;
  cfg.k_type = kt;
  cfg.v_type = vt;
  cfg.kv_tiled = c.kv_tiled;
  cfg.swa_full = c.swa_full;
  cfg.repack = c.repack;
  cfg.page_tokens = kPage;
  cfg.batch_tokens = c.batch;
  cfg.ubatch_tokens = c.ubatch;
  cfg.tpot_target_ms = c.tpot_target_ms;
  cfg.prefill_age_bound_s = c.prefill_age_bound_s;
  cfg.batch_invariant = c.batch_invariant;
  cfg.spec = c.spec;
  cfg.prefix_cache = true;
  cfg.ranks = c.ranks;
  const int64_t max_conc = conc.empty() ? 1 : *std::max_element(conc.begin(), conc.end());
  const int64_t ladder_need = ctx.back() + c.n_tokens;
  const int64_t prefill_need =
      c.prefill.empty() ? 0 : *std::max_element(c.prefill.begin(), c.prefill.end()) + 1;
  const int64_t conc_need = conc.empty() ? 0 : c.conc_prompt + c.n_tokens;
  int64_t image_need = 0, image_width = 0;
  if (!c.images.empty()) {
    // The projector is opened now too: a bad file, or images that cannot
    // fit a forward chunk, fail before the ladder.
    SUSTAIN_ASSIGN_OR_RETURN(auto in, engine::ImageInput::open(c.mmproj, 1));
    const int64_t per = in->tokens_per_image();
    if (per > std::min(c.batch, c.ubatch))
      return error(Code::kInvalidArgument,
                   "--mmproj {}: an image takes {} positions, more than -b/-ub {} (raise them)",
                   c.mmproj, per, std::min(c.batch, c.ubatch));
    image_need = per + 16;
    image_width = in->out_dim();
  }
  cfg.n_ctx = std::max({ladder_need, prefill_need, conc_need, image_need});
  cfg.n_parallel = static_cast<int>(max_conc);
  // Room for the longest sequence plus its prefix-cache pages, or for every
  // concurrent request at once, whichever is larger.
  cfg.kv_tokens = std::max(cfg.n_ctx + 4 * kPage, max_conc * (conc_need + 2 * kPage));

  obs.message(fmt::format("bench: loading {} (KV {}/{}, {} threads)", model, c.cache_type_k,
                          c.cache_type_v, threads));
  SUSTAIN_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng, engine::Engine::create(cfg));
  engine::Engine& e = *eng;
  if (image_width != 0 && image_width != e.model().config().n_embd)
    return error(Code::kInvalidArgument,
                 "--mmproj {}: the projector makes embeddings of width {}, but the model's width "
                 "is {}",
                 c.mmproj, image_width, e.model().config().n_embd);

  // Measured with the engine loaded (its KV pool allocated), so the buffer
  // is capped by what memory remains, and a bad model fails before this.
  SUSTAIN_ASSIGN_OR_RETURN(const BandwidthResult bw,
                           measure_machine(threads, c.bw_mib, c.bw_reps, obs));
  obs.message(fmt::format("bench: {:.1f} GB/s read, {:.1f} GFLOP/s f32 FMA", bw.read_gbps_best,
                          bw.fma_gflops_best));

  json report = new_report(c.command_line);
  // The bandwidth buffer is freed, but the peak-RSS watermark still holds it.
  if (!reset_peak_rss())
    report["notes"].push_back(
        "peak_rss_bytes includes the bandwidth buffer (this kernel does not let "
        "/proc/self/clear_refs reset the watermark)");
  const ModelCost cost = model_cost(e);
  PhaseBars prog(obs);
  const auto progress = [&prog](const std::string& p, double f, const std::string& d) {
    prog(p, f, d);
  };
  if (default_ladder)
    obs.message(fmt::format(
        "bench: context ladder {}, -n {}, -r {}; rungs projected to end past {:.0f} s are "
        "skipped (--budget)",
        fmt::join(ctx, ","), c.n_tokens, c.reps, budget));
  LadderOptions lo;
  lo.ctx = ctx;
  lo.n_tokens = c.n_tokens;
  lo.reps = c.reps;
  lo.seed = c.seed;
  lo.chain = c.chain;
  lo.random_fill = c.random_fill;
  lo.budget_s = budget;
  lo.progress = progress;
  auto ladder = run_context_ladder(e, lo);
  prog.done();
  if (!ladder) return ladder.status();
  for (const auto& n : ladder->notes) {
    obs.message("bench: " + n);
    report["notes"].push_back(n);
  }
  report["ladder"] = ladder_json(ladder->rungs, cost, &bw);
  if (const std::string n = lost_path_note("the context ladder", cfg, report["ladder"]);
      !n.empty()) {
    obs.message("bench: " + n);
    report["notes"].push_back(n);
  }
  add_memory_plan(report, cfg, e, threads);
  std::vector<int64_t> measured_ctx;
  for (const auto& r : ladder->rungs) measured_ctx.push_back(r.ctx);

  std::vector<PrefillPoint> points;
  if (c.random_fill)
    report["notes"].push_back(
        "--fill random: the context ladder's prompts were filled with random K/V, not "
        "prefilled; its decode figures are timed at each depth over those values (attention "
        "costs the same whatever it reads), its prefill figures are not measured, and what it "
        "generated means nothing");
  for (const auto& r : ladder->rungs) {
    if (r.random_fill) continue;  // no prefill was timed
    PrefillPoint p;
    p.source = "ladder";
    p.from_ctx = r.fill_from;
    p.ctx = r.ctx;
    p.new_tokens = r.fill_new_tokens;
    p.ttft_s = {r.fill_ttft_s};
    points.push_back(p);
  }
  if (!c.prefill.empty()) {
    auto pp = run_prefill_points(e, c.prefill, c.prefill_reps, c.seed + 1, progress);
    if (!pp) {
      prog.done();
      return pp.status();
    }
    points.insert(points.end(), pp->begin(), pp->end());
  }
  std::vector<int64_t> windows = measured_ctx;
  if (e.model().config().n_ctx_train > 0) windows.push_back(e.model().config().n_ctx_train);
  for (int64_t w : {int64_t(131072), int64_t(200000)})
    if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
  std::sort(windows.begin(), windows.end());
  windows.erase(std::unique(windows.begin(), windows.end()), windows.end());
  report["prefill"] = prefill_json(points, windows);

  if (!c.verify_ks.empty()) {
    if (cfg.ranks != nullptr) {
      report["notes"].push_back(
          "verify-cost curve not measured: the model is split over ranks (--split), and the "
          "curve runs the model in this process");
    } else {
      VerifyCurveOptions vo;
      vo.depths = c.verify_depths.empty() ? measured_ctx : c.verify_depths;
      vo.ks = c.verify_ks;
      vo.seed = c.seed + 3;
      prog("verify curve", 0.0,
           fmt::format("{} depths x k = {}", vo.depths.size(), fmt::join(vo.ks, ",")));
      ThreadPool pool(threads);
      auto curve = measure_verify_curve(e, pool, vo);
      prog.done();
      if (!curve) return curve.status();
      report["verify_curve"] = verify_curve_json(*curve, vo);
    }
  }

  if (!conc.empty()) {
    EngineTarget target(e, c.conc_prompt, c.n_tokens, c.seed + 2, nullptr, c.chain);
    auto levels = run_load(target, load_options(c, conc, c.rates, prog));
    if (!levels) {
      prog.done();
      return levels.status();
    }
    json lv = load_levels_json(*levels);
    push_level_errors(*levels, report);
    report["concurrency"] = {{"target", "in-process engine"},
                             {"prompt_length", c.conc_prompt},
                             {"prompt_unit", "tokens"},
                             {"max_tokens", c.n_tokens},
                             {"levels", lv}};
  }
  const engine::EngineStats st = e.stats();
  report["conditions"] = {
      {"target", {{"kind", "in-process"}}},
      {"model", model_conditions(e)},
      {"kv", kv_conditions(e)},
      {"engine", engine_conditions(e.config())},
      {"machine", machine_conditions()},
      {"build", build_conditions()},
      {"sampler", sampler_conditions(c.seed, c.chain)},
      {"workload",
       {{"ctx_requested", ctx},
        {"ctx_measured", measured_ctx},
        {"n_tokens", c.n_tokens},
        {"reps", c.reps},
        {"warmup", "1 request per rung (the timed fill)"},
        {"ladder_fill", c.random_fill ? "random" : "prefill"},
        {"ladder_method",
         "each rung's prompt extends the previous one; the prefix cache serves the shared "
         "pages, so the fill computes only the new tail at depth from_ctx"},
        {"budget_s", budget},
        {"prefill", c.prefill},
        {"prefill_reps", c.prefill_reps},
        {"concurrency", conc},
        {"concurrency_prompt_tokens", c.conc_prompt},
        {"requests_per_client", c.conc_requests},
        {"poisson_rates", c.rates},
        {"poisson_requests", c.poisson_requests},
        {"seed", c.seed}}},
      {"engine_stats",
       {{"steps", st.steps},
        {"preemptions", st.preemptions},
        {"generated_tokens", st.generated_tokens},
        {"prompt_tokens", st.prompt_tokens},
        {"prompt_tokens_computed", st.prompt_tokens_computed},
        {"prefix_cache_hits", st.prefix_cache_hits}}}};
  if (st.split_ranks > 0) {
    // Rank 0's transport over the whole run (ladder, prefill points,
    // concurrency): what one step costs in bytes and in time spent waiting
    // inside the exchanges (docs/split.md).
    const double steps = static_cast<double>(std::max<uint64_t>(st.steps, 1));
    report["conditions"]["split"] = {
        {"mode", st.split_tensor ? "tensor" : "layer"},
        {"ranks", st.split_ranks},
        {"comm_bytes", st.comm_bytes},
        {"comm_seconds", st.comm_seconds},
        {"comm_calls", st.comm_calls},
        {"steps", st.steps},
        {"comm_bytes_per_step", static_cast<double>(st.comm_bytes) / steps},
        {"comm_ms_per_step", 1e3 * st.comm_seconds / steps},
        {"note",
         "rank 0's own transport calls; the model figures (bytes per token, roofline) are "
         "rank 0's share of the model"}};
  }
  if (!c.images.empty()) {
    obs.message(fmt::format("bench: image cost of {} image(s) with {}", c.images.size(), c.mmproj));
    VisionOptions vo;
    vo.mmproj = c.mmproj;
    vo.images = c.images;
    vo.reps = c.reps;
    vo.threads = threads;
    vo.seed = c.seed + 3;
    SUSTAIN_ASSIGN_OR_RETURN(report["vision"], run_vision(e, vo));
  }
  report["machine"] = bandwidth_json(bw);
  eng.reset();

  if (!c.ablate.empty() && !measured_ctx.empty()) {
    AblationInput in;
    in.specs = c.ablate;
    in.bracket = c.ablate_bracket;
    in.base = cfg;
    in.ladder = lo;
    in.ladder.ctx = measured_ctx;
    in.bw = &bw;
    in.quality = quality ? &qopt : nullptr;
    in.make_constraint = c.make_constraint;
    in.concurrency = conc;
    in.conc_prompt = c.conc_prompt;
    in.conc_requests = c.conc_requests;
    SUSTAIN_TRY(run_ablation(in, prog, obs, report));
  }
  prog.done();
  return checked(std::move(report));
}

}  // namespace

Expected<BandwidthResult> measure_machine(int threads, int64_t bw_mib, int bw_reps, Observer& obs) {
  threads = resolve_threads(threads);
  obs.message(
      fmt::format("bench: measuring memory bandwidth and peak FLOP/s ({} threads)...", threads));
  size_t bytes = static_cast<size_t>(bw_mib) << 20;
  // Never more than an eighth of the machine's memory.
  if (const int64_t mem = total_memory_bytes(); mem > 0)
    bytes = std::min(bytes, std::max(size_t(64) << 20, static_cast<size_t>(mem / 8)));
  return measure_bandwidth(threads, bytes, bw_reps);
}

Expected<json> run_bench(const BenchConfig& c, Observer& obs) {
  return c.url.empty() ? run_in_process(c, obs) : run_http(c, obs);
}

}  // namespace sustain::bench

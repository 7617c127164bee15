#include "bench/workloads.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "bench/sysinfo.h"

namespace sustain::bench {

using nlohmann::json;

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t matrix_bytes(const kernels::WeightView& w) {
  return w.data ? w.n_out * static_cast<int64_t>(w.row_bytes) : 0;
}

// One request run to the end, timed by the client (submit, end) and the
// engine (each token's emission).
struct OneRun {
  RequestTiming timing;
  engine::Usage usage;
  int64_t pool_pages_used = -1;  // KV pages the request's sequence held at its end
  std::vector<uint64_t> token_steps;  // the engine step of each of timing.token_times
};

Expected<OneRun> run_one(engine::Engine& e, std::vector<int32_t> prompt, int32_t max_tokens,
                         BenchClock::time_point origin, bool sample_kv,
                         const std::shared_ptr<const sampling::ConstraintFactory>& constraint,
                         const sampling::SamplerConfig& sampler = bench_sampler(),
                         int32_t top_logprobs = -1, bool random_fill = false) {
  engine::Request req;
  req.synthetic_prefix = random_fill;
  req.prompt = std::move(prompt);
  req.max_tokens = max_tokens;
  req.sampling = sampler;
  req.logprobs = top_logprobs >= 0;
  req.top_logprobs = std::max(0, top_logprobs);
  req.sampling.constraint = constraint;
  req.ignore_eos = true;
  OneRun out;
  out.timing.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  out.timing.t_submit = seconds_between(origin, BenchClock::now());
  SUSTAIN_ASSIGN_OR_RETURN(engine::Stream stream, e.submit(std::move(req)));
  for (;;) {
    std::optional<engine::Event> ev = stream.next(std::chrono::milliseconds(600000));
    if (!ev) return error(Code::kInternal, "bench: no event from the engine for 600 s");
    for (const auto& t : ev->tokens) {
      out.timing.token_times.push_back(seconds_between(origin, t.t));
      out.token_steps.push_back(t.step);
    }
    if (ev->done) {
      if (ev->finish == engine::Finish::kError) return ev->error;
      if (ev->finish == engine::Finish::kCancelled)
        return error(Code::kInternal, "bench: the engine cancelled a request");
      out.usage = ev->usage;
      // From the engine, not sampled from its stats mid-decode: a fast
      // request may be done (its pages cached, not used) before a sample.
      if (sample_kv) out.pool_pages_used = ev->usage.kv_pages;
      break;
    }
  }
  out.timing.t_end = seconds_between(origin, BenchClock::now());
  out.timing.output_tokens = static_cast<int64_t>(out.timing.token_times.size());
  if (out.usage.completion_tokens != out.timing.output_tokens)
    return error(Code::kInternal,
                 "bench: the engine reported {} completion tokens but emitted {} token events",
                 out.usage.completion_tokens, out.timing.output_tokens);
  return out;
}

std::vector<int32_t> head(const std::vector<int32_t>& v, int64_t n) {
  return std::vector<int32_t>(v.begin(), v.begin() + n);
}

}  // namespace

sampling::SamplerConfig bench_sampler(const BenchChain& chain, uint64_t seed) {
  sampling::SamplerConfig s;
  s.temperature = chain.temperature;
  s.top_k = chain.top_k;
  s.top_p = chain.top_p;
  s.min_p = chain.min_p;
  s.seed = seed;
  if (chain.temperature <= 0.0f) {
    s.temperature = 0.0f;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.seed = 0;
  }
  return s;
}

std::vector<int32_t> random_prompt(const engine::Engine& e, int64_t n, uint64_t seed) {
  const auto& tok = e.tokenizer();
  const int32_t n_vocab = static_cast<int32_t>(e.model().config().n_vocab);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (n > 0 && tok.bos() >= 0 && tok.add_bos()) out.push_back(tok.bos());
  uint64_t s = seed;
  while (static_cast<int64_t>(out.size()) < n) {
    const auto id = static_cast<int32_t>(splitmix64(s) % static_cast<uint64_t>(n_vocab));
    if (id == tok.bos() || tok.is_eog(id)) continue;
    out.push_back(id);
  }
  return out;
}

ModelCost model_cost(const engine::Engine& e) {
  const Model& m = e.model();
  const ArchConfig& c = m.config();
  const ModelWeights& w = m.weights();
  ModelCost k;
  int64_t bytes = 0, params = 0;
  for (const LayerWeights& l : w.layers) {
    for (const kernels::WeightView* v :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      bytes += matrix_bytes(*v);
      params += v->n_out * v->n_in;
    }
    for (const auto* f : {&l.attn_norm, &l.ffn_norm, &l.q_norm, &l.k_norm, &l.bq, &l.bk, &l.bv})
      bytes += static_cast<int64_t>(f->size() * sizeof(float));
  }
  bytes += matrix_bytes(w.output) + static_cast<int64_t>(w.token_embd.row_bytes) +
           static_cast<int64_t>(w.output_norm.size() * sizeof(float));
  params += w.output.n_out * w.output.n_in;
  k.weight_bytes_per_step = bytes;
  k.matmul_params = params;
  k.n_layer = c.n_layer;
  k.n_head = c.n_head;
  k.head_dim = c.head_dim_k;
  const auto& ec = e.config();
  // What attention reads (a sliding layer reads its window, --swa-full or not).
  const kv::KvGeometry g = m.kv_geometry(ec.k_type, ec.v_type, ec.page_tokens);
  k.kv_bytes_per_token = static_cast<int64_t>(g.bytes_per_token());
  k.window_bytes_per_token =
      static_cast<int64_t>(g.layer_bytes_per_token()) * g.n_window_layers();
  k.window = g.window;
  return k;
}

json model_conditions(const engine::Engine& e) {
  const Model& m = e.model();
  const ArchConfig& c = m.config();
  const ModelWeights& w = m.weights();
  // Format of each tensor class, with counts where a mix (Q4_K_M) uses several.
  std::map<std::string, std::map<std::string, int>> formats;
  uint64_t params = 0;
  const auto add = [&](const char* cls, const kernels::WeightView& v) {
    if (!v.data) return;
    ++formats[cls][std::string(qtype_name(v.type))];
  };
  add("token_embd", w.token_embd);
  params += static_cast<uint64_t>(w.token_embd.n_out * w.token_embd.n_in);
  if (!c.tied_output) {
    add("output", w.output);
    params += static_cast<uint64_t>(w.output.n_out * w.output.n_in);
  }
  params += w.output_norm.size();
  for (const LayerWeights& l : w.layers) {
    add("attn_q", l.wq);
    add("attn_k", l.wk);
    add("attn_v", l.wv);
    add("attn_output", l.wo);
    add("ffn_gate", l.w_gate);
    add("ffn_up", l.w_up);
    add("ffn_down", l.w_down);
    for (const kernels::WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      params += static_cast<uint64_t>(v->n_out * v->n_in);
    for (const auto* f : {&l.attn_norm, &l.ffn_norm, &l.q_norm, &l.k_norm, &l.bq, &l.bk, &l.bv})
      params += f->size();
  }
  json tf = json::object();
  for (const auto& [cls, m2] : formats) {
    std::string s;
    for (const auto& [t, n] : m2) s += (s.empty() ? "" : ", ") + fmt::format("{}×{}", t, n);
    tf[cls] = s;
  }
  if (c.tied_output) tf["output"] = "tied to token_embd";
  const ModelCost cost = model_cost(e);
  return {{"path", e.config().model_path},
          {"name", c.name},
          {"arch", arch_name(c.arch)},
          {"parameters", params},
          {"n_layer", c.n_layer},
          {"n_embd", c.n_embd},
          {"n_ff", c.n_ff},
          {"n_head", c.n_head},
          {"n_head_kv", c.n_head_kv},
          {"head_dim", c.head_dim_k},
          {"n_vocab", c.n_vocab},
          {"n_ctx_train", c.n_ctx_train},
          {"tensor_formats", tf},
          {"weight_bytes_per_step", cost.weight_bytes_per_step},
          {"matmul_params", cost.matmul_params}};
}

json kv_conditions(const engine::Engine& e) {
  const auto& ec = e.config();
  const kv::KvGeometry& g = e.kv_geometry();
  return {{"k_type", std::string(qtype_name(ec.k_type))},
          {"v_type", std::string(qtype_name(ec.v_type))},
          {"page_tokens", ec.page_tokens},
          {"kv_layout", ec.kv_tiled ? "tiled" : "rows"},
          {"swa_full", ec.swa_full},
          {"bytes_per_token", g.bytes_per_token()},
          {"pool_bytes", e.kv_bytes()},
          {"pool_tokens", e.kv_capacity_tokens()}};
}

json engine_conditions(const engine::EngineConfig& c) {
  json j = {{"threads", c.n_threads},
            {"n_ctx", c.n_ctx},
            {"n_parallel", c.n_parallel},
            {"kv_tokens", c.kv_tokens},
            {"batch_tokens", c.batch_tokens},
            {"ubatch_tokens", c.ubatch_tokens},
            {"prefix_cache", c.prefix_cache},
            {"deterministic", c.deterministic},
            {"batch_invariant", c.batch_invariant},
            {"repack", c.repack},
            {"pool_sampling", c.pool_sampling}};
  json spec = nullptr;
  if (c.spec.enabled()) {
    std::string types;
    for (const auto& t : c.spec.types) types += (types.empty() ? "" : ",") + t;
    spec = {{"types", types}, {"draft_max", c.spec.draft_max}, {"draft_min", c.spec.draft_min}};
  }
  j["spec"] = spec;
  return j;
}

Expected<LadderResult> run_context_ladder(engine::Engine& e, const LadderOptions& opt) {
  if (opt.ctx.empty()) return error(Code::kInvalidArgument, "--ctx: the list is empty");
  for (size_t i = 0; i < opt.ctx.size(); ++i) {
    if (opt.ctx[i] < 2)
      return error(Code::kInvalidArgument, "--ctx: context {} is under 2 tokens", opt.ctx[i]);
    if (i > 0 && opt.ctx[i] <= opt.ctx[i - 1])
      return error(Code::kInvalidArgument, "--ctx: the list must ascend ({} after {})", opt.ctx[i],
                   opt.ctx[i - 1]);
  }
  if (opt.n_tokens < 2)
    return error(Code::kInvalidArgument, "-n {}: the ladder needs >= 2 tokens per repetition",
                 opt.n_tokens);
  if (opt.reps < 1) return error(Code::kInvalidArgument, "-r {}: need >= 1 repetition", opt.reps);
  const int64_t need = opt.ctx.back() + opt.n_tokens;
  if (need > e.config().n_ctx)
    return error(Code::kInvalidArgument,
                 "--ctx {} + -n {} = {} tokens exceeds the engine's context of {} tokens",
                 opt.ctx.back(), opt.n_tokens, need, e.config().n_ctx);
  // The KV a sequence holds, as the engine's pool keeps it.
  const kv::KvGeometry& geo = e.kv_geometry();
  const auto page_bytes = static_cast<int64_t>(geo.page_bytes());
  const auto bytes_per_token = static_cast<int64_t>(geo.bytes_per_token());
  const auto window_bytes_per_token =
      static_cast<int64_t>(geo.layer_bytes_per_token()) * geo.n_window_layers();
  const std::vector<int32_t> prompt = random_prompt(e, opt.ctx.back(), opt.seed);
  const auto origin = BenchClock::now();
  LadderResult res;
  std::vector<double> fill_from, fill_to, fill_s;
  double decode_s_per_token = 0;  // from the last rung, for the projection
  for (size_t i = 0; i < opt.ctx.size(); ++i) {
    const int64_t L = opt.ctx[i];
    const double elapsed = seconds_between(origin, BenchClock::now());
    if (opt.budget_s > 0 && i > 0) {
      const PrefillFit fit = fit_prefill(fill_from.data(), fill_to.data(), fill_s.data(),
                                         static_cast<int>(fill_s.size()));
      const double prev = static_cast<double>(opt.ctx[i - 1]);
      const double grow = (L + opt.n_tokens / 2.0) / (prev + opt.n_tokens / 2.0);
      const double projected = fit.seconds(prev, static_cast<double>(L)) +
                               (opt.reps + 1) * opt.n_tokens * decode_s_per_token * grow;
      if (elapsed + projected > opt.budget_s) {
        std::string skipped;
        for (size_t j = i; j < opt.ctx.size(); ++j)
          skipped += (skipped.empty() ? "" : ", ") + std::to_string(opt.ctx[j]);
        res.notes.push_back(fmt::format(
            "context ladder stopped at {}: the next rung ({} tokens) was projected to take "
            "{:.0f} s, past the {:.0f} s budget (--budget); skipped: {}",
            opt.ctx[i - 1], L, projected, opt.budget_s, skipped));
        break;
      }
    }
    const double base = static_cast<double>(i) / opt.ctx.size();
    const double step = 1.0 / opt.ctx.size();
    if (opt.progress) opt.progress("ladder", base, fmt::format("ctx {}: fill", L));
    LadderRung r;
    r.ctx = L;
    r.n_tokens = opt.n_tokens;
    r.speculative = e.config().spec.enabled();
    r.random_fill = opt.random_fill;
    // The fill (timed) doubles as the warm-up of this rung's decode.
    SUSTAIN_ASSIGN_OR_RETURN(
        OneRun fill,
        run_one(e, head(prompt, L), opt.n_tokens, origin, false, opt.constraint,
                bench_sampler(opt.chain, opt.seed), opt.chain.top_logprobs, opt.random_fill));
    r.fill_from = fill.usage.cached_prompt_tokens;
    // A random fill computes the prompt's last token only.
    r.fill_new_tokens =
        opt.random_fill ? 1 : fill.usage.prompt_tokens - fill.usage.cached_prompt_tokens;
    r.fill_ttft_s = fill.timing.token_times.front() - fill.timing.t_submit;
    fill_from.push_back(static_cast<double>(r.fill_from));
    fill_to.push_back(static_cast<double>(L));
    fill_s.push_back(r.fill_ttft_s);
    for (int rep = 0; rep < opt.reps; ++rep) {
      if (opt.progress)
        opt.progress("ladder", base + step * (rep + 1) / (opt.reps + 1),
                     fmt::format("ctx {}: decode rep {}/{}", L, rep + 1, opt.reps));
      SUSTAIN_ASSIGN_OR_RETURN(
          OneRun run, run_one(e, head(prompt, L), opt.n_tokens, origin, rep == 0, opt.constraint,
                              bench_sampler(opt.chain, opt.seed + rep + 1), opt.chain.top_logprobs,
                              opt.random_fill));
      const auto& tt = run.timing.token_times;
      SUSTAIN_ASSIGN_OR_RETURN(std::vector<double> gaps, per_token_decode_s(tt, run.token_steps));
      const double span = tt.size() >= 2 ? tt.back() - tt.front() : 0.0;
      r.rep_tok_s.push_back(span > 0 ? (tt.size() - 1) / span : 0.0);
      r.rep_gaps_s.push_back(std::move(gaps));
      r.rep_visible_tokens.push_back(run.timing.output_tokens);
      r.spec_drafted += run.usage.spec_drafted;
      r.spec_accepted += run.usage.spec_accepted;
      r.spec_steps += run.usage.spec_steps;
      if (run.pool_pages_used >= 0) r.kv_pool_used_bytes = run.pool_pages_used * page_bytes;
    }
    r.kv_bytes = bytes_per_token * (L + opt.n_tokens) +
                 window_bytes_per_token * std::min<int64_t>(L + opt.n_tokens, geo.window);
    r.peak_rss_bytes = peak_rss_bytes();
    const DecodeStats d = decode_stats(r);
    decode_s_per_token = d.tpot_s.p50;
    res.rungs.push_back(std::move(r));
  }
  if (opt.progress) opt.progress("ladder", 1.0, "done");
  return res;
}

Expected<std::vector<PrefillPoint>> run_prefill_points(engine::Engine& e,
                                                       const std::vector<int64_t>& lengths,
                                                       int reps, uint64_t seed,
                                                       const ProgressFn& progress) {
  if (reps < 1) return error(Code::kInvalidArgument, "prefill reps {} (need >= 1)", reps);
  std::vector<PrefillPoint> out;
  const auto origin = BenchClock::now();
  int64_t total = 0, done = 0;
  for (int64_t n : lengths) total += n * reps;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t n = lengths[i];
    if (n < 1 || n + 1 > e.config().n_ctx)
      return error(Code::kInvalidArgument,
                   "--prefill {}: needs 1..{} tokens (the engine's context minus one)", n,
                   e.config().n_ctx - 1);
    PrefillPoint p;
    p.source = "prefill";
    p.ctx = n;
    for (int rep = 0; rep < reps; ++rep) {
      if (progress)
        progress("prefill", total ? static_cast<double>(done) / total : 0,
                 fmt::format("{} tokens, rep {}/{}", n, rep + 1, reps));
      // Its own seed per repetition: nothing to reuse from the prefix cache.
      const uint64_t s = seed ^ (0xA24BAED4963EE407ull * (i * 131 + rep + 1));
      SUSTAIN_ASSIGN_OR_RETURN(OneRun run,
                               run_one(e, random_prompt(e, n, s), 1, origin, false, nullptr));
      p.from_ctx = run.usage.cached_prompt_tokens;
      p.new_tokens = run.usage.prompt_tokens - run.usage.cached_prompt_tokens;
      p.ttft_s.push_back(run.timing.token_times.front() - run.timing.t_submit);
      done += n;
    }
    out.push_back(std::move(p));
  }
  return out;
}

RequestTiming EngineTarget::run(int64_t index, BenchClock::time_point origin) {
  const uint64_t s = seed_ ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(index + 1));
  auto r = run_one(e_, random_prompt(e_, prompt_tokens_, s), max_tokens_, origin, false,
                   constraint_, bench_sampler(chain_, s), chain_.top_logprobs);
  if (!r) {
    std::lock_guard<std::mutex> lk(mu_);
    last_error_ = r.status().message();
    RequestTiming t;
    t.ok = false;
    return t;
  }
  return r->timing;
}

std::string EngineTarget::last_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_error_;
}

void EngineTarget::level_begin() { before_ = e_.stats(); }

std::vector<std::pair<std::string, double>> EngineTarget::level_counters() {
  const engine::EngineStats a = e_.stats();
  const engine::EngineStats& b = before_;
  auto d = [](uint64_t x, uint64_t y) { return static_cast<double>(x - y); };
  // The step histogram's count and sum over the level: its mean step.
  const double steps = d(a.step.count, b.step.count);
  return {{"steps", d(a.steps, b.steps)},
          {"decode_steps", steps},
          {"decode_step_mean_ms", steps > 0 ? (a.step.sum - b.step.sum) / steps * 1e3 : 0.0},
          {"target_steps", d(a.target_steps, b.target_steps)},
          {"target_ms", a.target_s * 1e3},
          {"target_missed_decode_alone",
           d(a.target_missed_decode_alone, b.target_missed_decode_alone)},
          {"target_missed_min_chunk", d(a.target_missed_min_chunk, b.target_missed_min_chunk)},
          {"target_missed_estimate", d(a.target_missed_estimate, b.target_missed_estimate)},
          {"prefill_tokens_deferred", d(a.prefill_tokens_deferred, b.prefill_tokens_deferred)},
          {"preemptions", d(a.preemptions, b.preemptions)}};
}

}  // namespace sustain::bench

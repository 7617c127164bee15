// `sustain eval ab`: a prompt set generated N times under configurations A and
// B (KV formats and/or weight file) with paired sampling seeds; reports
// per-prompt agreement next to the agreement of A with itself under another
// seed, and says whether B differs beyond that seed noise. The statistics
// live in src/eval/ab.h; this file runs the generations.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/file_io.h"
#include "eval/ab.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace sustain::cli {
namespace {

using eval::ModelRunner;
using eval::RunnerOptions;

constexpr int64_t kMaxPredict = int64_t{1} << 24;

struct AbArgs {
  std::string model, model_b, prompts;
  std::string ctk_a = "f16", ctv_a = "f16", ctk_b = "f16", ctv_b = "f16";
  int64_t n_predict = 64;
  int64_t repeats = 8;
  sampling::SamplerConfig sc;
  uint64_t seed = 1;
  bool ignore_eos = false;
  double alpha = 0.05;
  int64_t ctx = 0;  // 0: the longest prompt + n_predict
  int threads = 0;
  int64_t batch = 512;
  bool json = false;
  std::string out_json, out_md, html;
};

// One generation: the prompt, then up to n sampled tokens (stopping at an
// end-of-generation token unless ignore_eos). Returns the generated ids.
Expected<std::vector<int32_t>> generate(ModelRunner& r, const std::vector<int32_t>& prompt,
                                        const sampling::SamplerConfig& sc, int64_t n,
                                        const tokenizer::Tokenizer& tok, bool ignore_eos,
                                        std::vector<float>& logits) {
  r.reset();
  sampling::Sampler s(sc);
  for (int32_t t : prompt) s.accept(t);
  SUSTAIN_TRY(r.feed(prompt.data(), static_cast<int64_t>(prompt.size()), false, &logits));
  const int32_t nv = static_cast<int32_t>(r.n_vocab());
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < n) {
    const int32_t t = s.sample(logits.data(), nv);
    if (!ignore_eos && tok.is_eog(t)) break;
    out.push_back(t);
    if (static_cast<int64_t>(out.size()) == n) break;
    SUSTAIN_TRY(r.feed(&t, 1, false, &logits));
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_ab(const AbArgs& a) {
  if (a.repeats < 1) return fail(fmt::format("--repeats {} must be at least 1", a.repeats));
  if (a.n_predict < 1 || a.n_predict > kMaxPredict)
    return fail(fmt::format("--n-predict {} must be in [1, {}]", a.n_predict, kMaxPredict));
  if (a.ctx < 0) return fail(fmt::format("-c {} must be positive (or 0: automatic)", a.ctx));
  if (!(a.alpha > 0.0 && a.alpha < 1.0))
    return fail(fmt::format("--alpha {} must be in (0, 1)", a.alpha));
  if (Status st = sampling::validate(a.sc); !st) return fail(st.message());
  for (const auto& [flag, name] : {std::pair{"--ctk-a", a.ctk_a}, std::pair{"--ctv-a", a.ctv_a},
                                   std::pair{"--ctk-b", a.ctk_b}, std::pair{"--ctv-b", a.ctv_b}})
    if (auto t = eval::parse_kv_type(name, flag); !t) return fail(t.status().message());

  auto text = read_text_file(a.prompts, "--prompts file");
  if (!text) return fail(text.status().message());
  auto prompts = eval::parse_ab_prompts(*text, a.prompts);
  if (!prompts) return fail(prompts.status().message());

  // Prompts are tokenized once, with A's vocabulary (BOS as it says); B must
  // read them as the same ids or the comparison would not be of one input.
  auto ma = Model::load(a.model);
  if (!ma) return fail(ma.status().message());
  auto tok = tokenizer::Tokenizer::from_gguf((*ma)->file());
  if (!tok) return fail(tok.status().with_context(a.model).message());
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : *prompts) {
    auto e = tok->encode(p.text, true, false);
    if (!e)
      return fail(e.status().with_context(fmt::format("{} line {}", a.prompts, p.line)).message());
    if (e->empty())
      return fail(fmt::format("{} line {}: the prompt gives no tokens", a.prompts, p.line));
    ids.push_back(std::move(*e));
  }
  const std::string model_b = a.model_b.empty() ? a.model : a.model_b;
  if (!a.model_b.empty()) {
    auto mb = Model::load(a.model_b);
    if (!mb) return fail(mb.status().message());
    auto tb = tokenizer::Tokenizer::from_gguf((*mb)->file());
    if (!tb) return fail(tb.status().with_context(a.model_b).message());
    if (tb->n_vocab() != tok->n_vocab())
      return fail(fmt::format("{} has {} tokens but {} has {}: A and B need one vocabulary",
                              a.model_b, tb->n_vocab(), a.model, tok->n_vocab()));
    for (size_t i = 0; i < prompts->size(); ++i) {
      auto e = tb->encode((*prompts)[i].text, true, false);
      if (!e || *e != ids[i])
        return fail(fmt::format("{} line {}: {} and {} tokenize the prompt differently", a.prompts,
                                (*prompts)[i].line, a.model, a.model_b));
    }
  }
  int64_t longest = 0;
  for (const auto& v : ids) longest = std::max<int64_t>(longest, static_cast<int64_t>(v.size()));
  const int64_t ctx = a.ctx > 0 ? a.ctx : longest + a.n_predict;
  for (size_t i = 0; i < ids.size(); ++i)
    if (static_cast<int64_t>(ids[i].size()) + a.n_predict > ctx)
      return fail(fmt::format("{} line {}: {} prompt tokens + -n {} exceed -c {}", a.prompts,
                              (*prompts)[i].line, ids[i].size(), a.n_predict, ctx));

  const int threads = a.threads > 0 ? a.threads : default_threads();
  auto open = [&](const std::string& m, const std::string& k, const std::string& v) {
    RunnerOptions o;
    o.model = m;
    o.cache_k = k;
    o.cache_v = v;
    o.ctx = ctx;
    o.threads = threads;
    o.batch = a.batch;
    return ModelRunner::open(o);
  };
  auto ra = open(a.model, a.ctk_a, a.ctv_a);
  if (!ra) return fail(ra.status().message());
  auto rb = open(model_b, a.ctk_b, a.ctv_b);
  if (!rb) return fail(rb.status().message());

  eval::AbResult res;
  res.greedy = a.sc.temperature == 0.0f;
  res.alpha = a.alpha;
  // Greedy decoding ignores the seed: every repeat would be a copy of the first.
  res.repeats = res.greedy ? 1 : a.repeats;
  if (res.greedy && a.repeats > 1)
    std::fprintf(stderr, "sustain: note: --temp 0 is greedy, so 1 repeat instead of %lld\n",
                 static_cast<long long>(a.repeats));
  res.n_predict = a.n_predict;
  res.label_a = fmt::format("{} {}/{}", a.model, a.ctk_a, a.ctv_a);
  res.label_b = fmt::format("{} {}/{}", model_b, a.ctk_b, a.ctv_b);
  res.sampler = res.greedy
                    ? "greedy (temp 0)"
                    : fmt::format("temp {}, top-k {}, top-p {}, min-p {}, seed {}",
                                  a.sc.temperature, a.sc.top_k, a.sc.top_p, a.sc.min_p, a.seed);
  if (a.ignore_eos) res.sampler += ", EOS ignored";

  const bool tty = isatty(fileno(stderr)) != 0;
  std::vector<float> logits;
  for (size_t p = 0; p < prompts->size(); ++p) {
    eval::AbPromptResult pr;
    pr.prompt = (*prompts)[p];
    pr.prompt_tokens = static_cast<int64_t>(ids[p].size());
    for (int64_t r = 0; r < res.repeats; ++r) {
      sampling::SamplerConfig s1 = a.sc, s2 = a.sc;
      s1.seed = eval::ab_seed(a.seed, static_cast<int64_t>(p), r, 0);
      s2.seed = eval::ab_seed(a.seed, static_cast<int64_t>(p), r, 1);
      const auto where = fmt::format("{} line {}, repeat {}", a.prompts, pr.prompt.line, r + 1);
      auto t0 = std::chrono::steady_clock::now();
      auto ga = generate(**ra, ids[p], s1, a.n_predict, *tok, a.ignore_eos, logits);
      if (!ga) return fail(ga.status().with_context(where + ", A").message());
      auto ga2 = generate(**ra, ids[p], s2, a.n_predict, *tok, a.ignore_eos, logits);
      if (!ga2) return fail(ga2.status().with_context(where + ", A'").message());
      res.seconds_a += seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      auto gb = generate(**rb, ids[p], s2, a.n_predict, *tok, a.ignore_eos, logits);
      if (!gb) return fail(gb.status().with_context(where + ", B").message());
      res.seconds_b += seconds_since(t0);
      pr.repeats.push_back(eval::score_repeat(*ga, *ga2, *gb));
      if (r == 0) {
        pr.sample_a = tok->decode(*ga2, false);
        pr.sample_b = tok->decode(*gb, false);
      }
      if (tty)
        std::fprintf(stderr, "\rab: prompt %zu/%zu, repeat %lld/%lld   ", p + 1, prompts->size(),
                     static_cast<long long>(r + 1), static_cast<long long>(res.repeats));
    }
    res.prompts.push_back(std::move(pr));
  }
  if (tty) std::fprintf(stderr, "\n");
  eval::finish_ab(res);

  eval::Conditions cond;
  cond.model = a.model;
  if (!a.model_b.empty()) cond.base_model = a.model_b;
  cond.input = fmt::format("prompts {} ({} prompts)", a.prompts, prompts->size());
  cond.threads = threads;
  cond.batch = a.batch;
  cond.commit = SUSTAIN_GIT_COMMIT;
  const std::string js = eval::ab_json(cond, res), md = eval::ab_markdown(cond, res);
  for (const auto& [path, out] : {std::pair{a.out_json, js}, std::pair{a.out_md, md},
                                  std::pair{a.html, eval::ab_html(cond, res)}})
    if (!path.empty())
      if (Status st = write_text_file(path, out); !st) return fail(st.message());
  std::printf("%s\n", a.json ? js.c_str() : md.c_str());
  return 0;
}

}  // namespace

void add_eval_ab(CLI::App* ev, std::vector<std::pair<CLI::App*, Runner>>& subs) {
  auto a = std::make_shared<AbArgs>();
  auto* sub = ev->add_subcommand(
      "ab",
      "Generate a prompt set N times under configurations A and B with paired seeds; "
      "report agreement next to the seed noise and whether B differs beyond it");
  sub->add_option("-m,--model", a->model, "GGUF model file (A, and B unless --model-b)")
      ->required();
  sub->add_option("--model-b", a->model_b, "B's model file (default: -m), e.g. its Q4_K_M");
  sub->add_option("--prompts", a->prompts,
                  "prompts file: one per line, or JSON Lines with a \"prompt\" field")
      ->required();
  sub->add_option("--ctk-a", a->ctk_a, "A's K cache format: " + std::string(eval::kv_type_names()))
      ->capture_default_str();
  sub->add_option("--ctv-a", a->ctv_a, "A's V cache format")->capture_default_str();
  sub->add_option("--ctk-b", a->ctk_b, "B's K cache format")->capture_default_str();
  sub->add_option("--ctv-b", a->ctv_b, "B's V cache format")->capture_default_str();
  sub->add_option("-n,--n-predict", a->n_predict, "tokens generated per run")
      ->capture_default_str();
  sub->add_option("--repeats", a->repeats, "repeats per prompt (each: A, A' and B)")
      ->capture_default_str();
  sub->add_option("--temp", a->sc.temperature, "temperature (0 = greedy: no seed noise)")
      ->capture_default_str();
  sub->add_option("--top-k", a->sc.top_k, "top-k (0 = off)")->capture_default_str();
  sub->add_option("--top-p", a->sc.top_p, "top-p (1 = off)")->capture_default_str();
  sub->add_option("--min-p", a->sc.min_p, "min-p (0 = off)")->capture_default_str();
  sub->add_option("-s,--seed", a->seed, "base seed; each (prompt, repeat) derives its own")
      ->capture_default_str();
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  sub->add_option("--alpha", a->alpha, "significance level of the verdicts")->capture_default_str();
  sub->add_option("-c,--ctx-size", a->ctx, "KV capacity (default: longest prompt + -n)");
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("-b,--batch-size", a->batch, "prompt tokens per forward call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  sub->add_flag("--json", a->json, "print JSON instead of Markdown");
  sub->add_option("--out-json", a->out_json, "write the JSON report here");
  sub->add_option("--out-md", a->out_md, "write the Markdown report here");
  sub->add_option("--html", a->html, "write a self-contained HTML report here");
  subs.push_back({sub, [a] { return run_ab(*a); }});
}

}  // namespace sustain::cli

// `sustain eval`: what an optimization costs in quality.
//   eval kl      KL(base‖test), top-1 agreement, Δp and perplexity per context bucket
//   eval needle  needle-in-a-haystack accuracy by context × depth for each KV format
// The logic lives in src/eval/; this file parses flags and prints.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.h"
#include "eval/baseline.h"
#include "eval/kl.h"
#include "eval/needle.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "tokenizer/tokenizer.h"

namespace sustain::cli {
namespace {

using eval::ModelRunner;
using eval::RunnerOptions;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

Expected<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(Code::kIo, "cannot read {} '{}'", what, path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return error(Code::kIo, "cannot write '{}'", path);
  f << text;
  if (!f) return error(Code::kIo, "writing '{}' failed", path);
  return Status::ok();
}

// K/V configurations from -ctk and -ctv lists: equal lengths pair up, a
// single entry applies to every entry of the other, --kv-grid takes all pairs.
Expected<std::vector<std::pair<std::string, std::string>>> kv_configs(const std::string& ks,
                                                                       const std::string& vs,
                                                                       bool grid) {
  const auto k = split_list(ks), v = split_list(vs);
  for (const auto& n : k) SUSTAIN_TRY(eval::parse_kv_type(n, "--cache-type-k").status());
  for (const auto& n : v) SUSTAIN_TRY(eval::parse_kv_type(n, "--cache-type-v").status());
  std::vector<std::pair<std::string, std::string>> out;
  if (grid) {
    for (const auto& a : k)
      for (const auto& b : v) out.push_back({a, b});
  } else if (k.size() == v.size()) {
    for (size_t i = 0; i < k.size(); ++i) out.push_back({k[i], v[i]});
  } else if (k.size() == 1 || v.size() == 1) {
    for (size_t i = 0; i < std::max(k.size(), v.size()); ++i)
      out.push_back({k[k.size() == 1 ? 0 : i], v[v.size() == 1 ? 0 : i]});
  } else {
    return error(Code::kInvalidArgument,
                 "--cache-type-k has {} formats and --cache-type-v {}: give lists of equal length, "
                 "one format for either, or --kv-grid for every pair",
                 k.size(), v.size());
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

eval::Conditions conditions(const std::string& model, int threads, int64_t batch) {
  eval::Conditions c;
  c.model = model;
  c.threads = threads;
  c.batch = batch;
  c.commit = SUSTAIN_GIT_COMMIT;
  return c;
}

// ---------------------------------------------------------------- needle

struct NeedleArgs {
  std::string model, cases, write_cases;
  std::string ctx = "1024", depths = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9";
  int trials = 4;
  uint64_t seed = 1;
  int distractor_pairs = 8;
  double value_share = 0.3;
  std::string ctk = "f16", ctv = "f16";
  bool kv_grid = false;
  int threads = 0;
  int64_t batch = 512;
  bool json = false, per_case = false;
  std::string out_json, out_md, html;
};

Expected<std::vector<eval::NeedleCase>> needle_cases(const NeedleArgs& a, std::string* input) {
  if (!a.cases.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_file(a.cases, "--cases file"));
    *input = fmt::format("cases file {}", a.cases);
    return eval::parse_needle_cases(text, a.cases);
  }
  eval::NeedleGenSpec spec;
  for (const auto& s : split_list(a.ctx)) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0')
      return error(Code::kInvalidArgument, "--ctx: '{}' in '{}' is not an integer", s, a.ctx);
    spec.ctx.push_back(v);
  }
  for (const auto& s : split_list(a.depths)) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      return error(Code::kInvalidArgument, "--depths: '{}' in '{}' is not a number", s, a.depths);
    spec.depths.push_back(v);
  }
  spec.trials = a.trials;
  spec.seed = a.seed;
  spec.distractor_pairs = a.distractor_pairs;
  spec.distractor_value_share = a.value_share;
  *input = fmt::format("generated: ctx {}, depths {}, {} trials, seed {}, {} distractor pairs, "
                       "{:.0f}% distractor values",
                       a.ctx, a.depths, a.trials, a.seed, a.distractor_pairs, 100 * a.value_share);
  return eval::generate_needle_cases(spec);
}

int run_needle(const NeedleArgs& a) {
  std::string input;
  auto cases = needle_cases(a, &input);
  if (!cases) return fail(cases.status().message());
  if (!a.write_cases.empty()) {
    std::string text;
    for (const auto& c : *cases) text += eval::format_needle_case(c) + "\n";
    if (Status st = write_file(a.write_cases, text); !st) return fail(st.message());
  }
  auto cfgs = kv_configs(a.ctk, a.ctv, a.kv_grid);
  if (!cfgs) return fail(cfgs.status().message());
  int64_t max_ctx = 0;
  for (const auto& c : *cases) max_ctx = std::max(max_ctx, c.ctx);
  const int threads = a.threads > 0 ? a.threads : default_threads();
  const bool tty = isatty(fileno(stderr)) != 0;
  std::vector<eval::NeedleRun> runs;
  for (const auto& [k, v] : *cfgs) {
    RunnerOptions o;
    o.model = a.model;
    o.cache_k = k;
    o.cache_v = v;
    o.ctx = max_ctx;
    o.threads = threads;
    o.batch = a.batch;
    auto r = ModelRunner::open(o);
    if (!r) return fail(r.status().message());
    eval::NeedleRun run;
    run.cache_k = k;
    run.cache_v = v;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits;
    for (size_t i = 0; i < cases->size(); ++i) {
      const auto& c = (*cases)[i];
      (*r)->reset();
      const auto tc = std::chrono::steady_clock::now();
      Status st = (*r)->feed(c.ids.data(), c.ctx, false, &logits);
      if (!st) return fail(st.with_context(fmt::format("case {} ({})", i + 1, c.tag)).message());
      eval::NeedleResult res = eval::score_needle(c, logits.data(), (*r)->n_vocab());
      res.seconds = seconds_since(tc);
      run.table.add(c, res.correct);
      run.tags.push_back(c.tag);
      run.answers.push_back(c.answer);
      run.results.push_back(res);
      if (tty)
        std::fprintf(stderr, "\r%s/%s: case %zu/%zu, %d/%d correct   ", k.c_str(), v.c_str(),
                     i + 1, cases->size(), run.table.correct, run.table.total);
    }
    run.seconds = seconds_since(t0);
    std::fprintf(stderr, "%s%s/%s: %d/%d correct in %.1f s\n", tty ? "\r" : "", k.c_str(),
                 v.c_str(), run.table.correct, run.table.total, run.seconds);
    runs.push_back(std::move(run));
  }
  eval::Conditions cond = conditions(a.model, threads, a.batch);
  cond.input = input;
  const std::string js = eval::needle_json(cond, runs, a.per_case);
  const std::string md = eval::needle_markdown(cond, runs);
  for (const auto& [path, text] : {std::pair{a.out_json, js}, std::pair{a.out_md, md},
                                   std::pair{a.html, eval::needle_html(cond, runs)}})
    if (!path.empty())
      if (Status st = write_file(path, text); !st) return fail(st.message());
  std::printf("%s\n", a.json ? js.c_str() : md.c_str());
  return 0;
}

void add_needle(CLI::App* ev, std::vector<std::pair<CLI::App*, Runner>>& subs) {
  auto a = std::make_shared<NeedleArgs>();
  auto* sub = ev->add_subcommand(
      "needle", "Needle-in-a-haystack accuracy by context length and needle depth per KV format");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("--cases", a->cases,
                  "token-id cases to run as given (`answer ctx:depth:pos id id ...` per line)");
  sub->add_option("--ctx", a->ctx, "generated cases: prompt lengths, comma-separated")
      ->capture_default_str();
  sub->add_option("--depths", a->depths, "generated cases: needle depths in [0, 1]")
      ->capture_default_str();
  sub->add_option("--trials", a->trials, "generated cases per (ctx, depth)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--seed", a->seed, "generator seed")->capture_default_str();
  sub->add_option("--distractor-pairs", a->distractor_pairs, "K' V' pairs per case")
      ->capture_default_str();
  sub->add_option("--value-share", a->value_share, "share of haystack tokens that are values")
      ->capture_default_str();
  sub->add_option("--write-cases", a->write_cases, "also write the cases to this file");
  sub->add_option("--cache-type-k", a->ctk,
                  "K cache formats (alias -ctk), comma-separated: " +
                      std::string(eval::kv_type_names()))
      ->capture_default_str();
  sub->add_option("--cache-type-v", a->ctv, "V cache formats (alias -ctv), comma-separated")
      ->capture_default_str();
  sub->add_flag("--kv-grid", a->kv_grid, "run every (K, V) pair of the two lists");
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("-b,--batch-size", a->batch, "prompt tokens per forward call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  sub->add_flag("--json", a->json, "print the JSON summary instead of Markdown");
  sub->add_flag("--per-case", a->per_case, "JSON: include every case's prediction and margin");
  sub->add_option("--out-json", a->out_json, "write the JSON report here");
  sub->add_option("--out-md", a->out_md, "write the Markdown report here");
  sub->add_option("--html", a->html, "write a self-contained HTML report (heatmaps) here");
  subs.push_back({sub, [a] { return run_needle(*a); }});
}

// ---------------------------------------------------------------- kl

struct KlArgs {
  std::string model, base_model;
  std::string base_ctk = "f16", base_ctv = "f16";
  std::string ctk = "f16", ctv = "f16";
  bool kv_grid = false;
  std::string text_file, tokens_file, synthetic;
  uint64_t seed = 1;
  int64_t ctx = 4096;
  std::string buckets = "512,4096,16384,32768";
  std::string save_base, base_file;
  int top_k = 256;
  int threads = 0;
  int64_t batch = 512;
  bool json = false;
  std::string out_json, out_md;
};

// The evaluation tokens: from a text file (the base model's tokenizer, BOS
// added), a file of ids, or generated (`random`: uniform ids; `needle`: one
// needle case's haystack, the retriever's input).
Expected<std::vector<int32_t>> kl_tokens(const KlArgs& a, const Model& m, std::string* input) {
  const int n_sources = !a.text_file.empty() + !a.tokens_file.empty() + !a.synthetic.empty();
  if (n_sources != 1)
    return error(Code::kInvalidArgument,
                 "give exactly one of -f TEXT, --tokens FILE, --synthetic random|needle (got {})",
                 n_sources);
  const int64_t nv = m.config().n_vocab;
  std::vector<int32_t> ids;
  if (!a.text_file.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_file(a.text_file, "text file"));
    SUSTAIN_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_gguf(m.file()));
    SUSTAIN_ASSIGN_OR_RETURN(ids, tok.encode(text, true, false));
    *input = fmt::format("text {}", a.text_file);
  } else if (!a.tokens_file.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_file(a.tokens_file, "token file"));
    std::istringstream in(text);
    std::string t;
    while (in >> t) {
      char* end = nullptr;
      const long long v = std::strtoll(t.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v >= nv)
        return error(Code::kInvalidArgument, "{}: '{}' (token {}) is not an id in [0, {})",
                     a.tokens_file, t, ids.size(), nv);
      ids.push_back(static_cast<int32_t>(v));
    }
    *input = fmt::format("token ids {}", a.tokens_file);
  } else if (a.synthetic == "random") {
    uint64_t s = a.seed * 0x9e3779b97f4a7c15ull + 1;
    ids.push_back(1);
    while (static_cast<int64_t>(ids.size()) < a.ctx) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
      ids.push_back(static_cast<int32_t>(3 + s % static_cast<uint64_t>(nv - 3)));
    }
    *input = fmt::format("random ids, seed {}", a.seed);
  } else if (a.synthetic == "needle") {
    eval::NeedleGenSpec spec;
    spec.ctx = {a.ctx};
    spec.depths = {0.5};
    spec.trials = 1;
    spec.seed = a.seed;
    if (nv < spec.vocab.n_vocab)
      return error(Code::kInvalidArgument, "--synthetic needle needs a {}-token vocabulary ({} has {})",
                   spec.vocab.n_vocab, m.file().path(), nv);
    SUSTAIN_ASSIGN_OR_RETURN(auto cases, eval::generate_needle_cases(spec));
    ids = cases[0].ids;
    *input = fmt::format("needle haystack ({} tokens, needle at depth 0.5), seed {}", a.ctx, a.seed);
  } else {
    return error(Code::kInvalidArgument, "--synthetic '{}' is not one of: random, needle", a.synthetic);
  }
  if (static_cast<int64_t>(ids.size()) > a.ctx) ids.resize(static_cast<size_t>(a.ctx));
  if (ids.size() < 2)
    return error(Code::kInvalidArgument, "{} gives {} tokens; at least 2 are needed", *input, ids.size());
  return ids;
}

int run_kl(const KlArgs& a) {
  auto edges = eval::parse_edges(a.buckets, "--buckets");
  if (!edges) return fail(edges.status().message());
  auto cfgs = kv_configs(a.ctk, a.ctv, a.kv_grid);
  if (!cfgs) return fail(cfgs.status().message());
  if (!a.base_file.empty() && !a.save_base.empty())
    return fail("--base-file and --save-base exclude each other");
  if (a.top_k < 1) return fail(fmt::format("--top-k {} must be at least 1", a.top_k));
  const int threads = a.threads > 0 ? a.threads : default_threads();
  const std::string base_model = a.base_model.empty() ? a.model : a.base_model;

  std::unique_ptr<ModelRunner> base;
  eval::SavedBaseline saved;
  std::vector<int32_t> ids;
  std::string input;
  if (!a.base_file.empty()) {
    auto b = eval::read_baseline(a.base_file);
    if (!b) return fail(b.status().message());
    saved = std::move(*b);
    ids = saved.tokens;
    input = fmt::format("saved baseline {} ({}; {})", a.base_file, saved.source, saved.model);
  } else {
    RunnerOptions o;
    o.model = base_model;
    o.cache_k = a.base_ctk;
    o.cache_v = a.base_ctv;
    o.ctx = 1;  // resized below once the token count is known
    o.threads = threads;
    o.batch = a.batch;
    // The tokens come from the base model's tokenizer: open it once to read them.
    auto m = Model::load(base_model);
    if (!m) return fail(m.status().message());
    auto t = kl_tokens(a, **m, &input);
    if (!t) return fail(t.status().message());
    ids = std::move(*t);
    o.ctx = static_cast<int64_t>(ids.size());
    auto r = ModelRunner::open(o);
    if (!r) return fail(r.status().message());
    base = std::move(*r);
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<std::unique_ptr<ModelRunner>> tests;
  for (const auto& [k, v] : *cfgs) {
    RunnerOptions o;
    o.model = a.model;
    o.cache_k = k;
    o.cache_v = v;
    o.ctx = n;
    o.threads = threads;
    o.batch = a.batch;
    auto r = ModelRunner::open(o);
    if (!r) return fail(r.status().message());
    const int64_t nv_base = base ? base->n_vocab() : saved.n_vocab;
    if ((*r)->n_vocab() != nv_base)
      return fail(fmt::format("{} has {} tokens but the baseline has {}: KL needs one vocabulary",
                              a.model, (*r)->n_vocab(), nv_base));
    tests.push_back(std::move(*r));
  }
  if (!a.save_base.empty()) {
    saved.model = base_model;
    saved.cache_k = a.base_ctk;
    saved.cache_v = a.base_ctv;
    saved.source = input;
    saved.n_vocab = base->n_vocab();
    saved.top_k = static_cast<int>(std::min<int64_t>(a.top_k, base->n_vocab()));
    saved.tokens = ids;
  }
  const int64_t nv = tests[0]->n_vocab();
  std::vector<eval::KlAccumulator> acc(tests.size(), eval::KlAccumulator(*edges));
  std::vector<double> secs(tests.size(), 0.0);
  std::vector<float> base_logits, test_logits;
  // Base and tests advance in lockstep, one chunk at a time, so memory holds
  // two chunks of logits, never a whole 32K × vocabulary matrix.
  const int64_t chunk = a.batch;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk);
    if (base) {
      Status st = base->feed(ids.data() + c0, c1 - c0, true, &base_logits);
      if (!st) return fail(st.with_context("baseline").message());
      if (!a.save_base.empty())
        for (int64_t i = c0; i < c1; ++i) {
          const float* row = base_logits.data() + (i - c0) * nv;
          saved.rows.push_back(eval::compress_row(row, nv, saved.top_k));
          saved.next_logit.push_back(i + 1 < n ? row[ids[static_cast<size_t>(i + 1)]] : 0.0f);
        }
    }
    for (size_t t = 0; t < tests.size(); ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = tests[t]->feed(ids.data() + c0, c1 - c0, true, &test_logits);
      secs[t] += seconds_since(t0);
      if (!st) return fail(st.with_context(fmt::format("test {}/{}", (*cfgs)[t].first, (*cfgs)[t].second)).message());
      for (int64_t i = c0; i < c1; ++i) {
        const int32_t next = i + 1 < n ? ids[static_cast<size_t>(i + 1)] : -1;
        const float* trow = test_logits.data() + (i - c0) * nv;
        const eval::PositionStats s =
            base ? eval::compare_rows(base_logits.data() + (i - c0) * nv, trow, nv, next)
                 : eval::compare_saved(saved.rows[static_cast<size_t>(i)],
                                       saved.next_logit[static_cast<size_t>(i)], trow, nv, next);
        acc[t].add(i, s);
      }
    }
    if (isatty(fileno(stderr)))
      std::fprintf(stderr, "\rkl: %lld/%lld tokens   ", static_cast<long long>(c1),
                   static_cast<long long>(n));
  }
  if (!a.save_base.empty())
    if (Status st = eval::write_baseline(a.save_base, saved); !st) return fail(st.message());

  std::vector<eval::KlRun> runs;
  const std::string base_label =
      base ? fmt::format("{}{}/{}", a.base_model.empty() ? "" : base_model + " ", a.base_ctk, a.base_ctv)
           : fmt::format("saved {} {}/{}", saved.model, saved.cache_k, saved.cache_v);
  for (size_t t = 0; t < tests.size(); ++t) {
    eval::KlRun r;
    r.base_label = base_label;
    r.test_label = fmt::format("{}{}/{}", a.base_model.empty() ? "" : a.model + " ",
                               (*cfgs)[t].first, (*cfgs)[t].second);
    r.buckets = acc[t].buckets();
    r.from_saved = !base && saved.top_k < saved.n_vocab;
    r.top_k = saved.top_k;
    r.seconds = secs[t];
    runs.push_back(std::move(r));
  }
  eval::Conditions cond = conditions(a.model, threads, a.batch);
  cond.base_model = base_model;
  cond.input = fmt::format("{}, {} tokens", input, n);
  const std::string js = eval::kl_json(cond, runs), md = eval::kl_markdown(cond, runs);
  for (const auto& [path, text] : {std::pair{a.out_json, js}, std::pair{a.out_md, md}})
    if (!path.empty())
      if (Status st = write_file(path, text); !st) return fail(st.message());
  std::printf("%s\n", a.json ? js.c_str() : md.c_str());
  return 0;
}

void add_kl(CLI::App* ev, std::vector<std::pair<CLI::App*, Runner>>& subs) {
  auto a = std::make_shared<KlArgs>();
  auto* sub = ev->add_subcommand(
      "kl", "KL divergence, top-1 agreement, Δp and perplexity of a test configuration against a "
            "baseline, per context bucket");
  sub->add_option("-m,--model", a->model, "GGUF model file (the test side)")->required();
  sub->add_option("--base-model", a->base_model,
                  "baseline model (default: -m), e.g. the F16 file when -m is its Q4_K_M");
  sub->add_option("--base-ctk", a->base_ctk, "baseline K cache format")->capture_default_str();
  sub->add_option("--base-ctv", a->base_ctv, "baseline V cache format")->capture_default_str();
  sub->add_option("--cache-type-k", a->ctk,
                  "test K cache formats (alias -ctk), comma-separated: " +
                      std::string(eval::kv_type_names()))
      ->capture_default_str();
  sub->add_option("--cache-type-v", a->ctv, "test V cache formats (alias -ctv), comma-separated")
      ->capture_default_str();
  sub->add_flag("--kv-grid", a->kv_grid, "run every (K, V) pair of the two lists");
  sub->add_option("-f,--file", a->text_file, "text to evaluate (tokenized with BOS)");
  sub->add_option("--tokens", a->tokens_file, "token ids to evaluate (whitespace-separated)");
  sub->add_option("--synthetic", a->synthetic,
                  "generated input: random (uniform ids) or needle (a needle case's haystack)");
  sub->add_option("--seed", a->seed, "seed for --synthetic")->capture_default_str();
  sub->add_option("-c,--ctx-size", a->ctx, "tokens to evaluate (the input is cut to this)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  sub->add_option("--buckets", a->buckets, "bucket edges (positions), comma-separated")
      ->capture_default_str();
  sub->add_option("--save-base", a->save_base, "save the baseline (top-k + log-sum-exp) to FILE");
  sub->add_option("--base-file", a->base_file, "compare against a saved baseline instead of running it");
  sub->add_option("--top-k", a->top_k, "logits kept per position by --save-base (KL error bounded; "
                                       "exact when >= the vocabulary)")
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("-b,--batch-size", a->batch, "tokens per forward call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  sub->add_flag("--json", a->json, "print JSON instead of Markdown");
  sub->add_option("--out-json", a->out_json, "write the JSON report here");
  sub->add_option("--out-md", a->out_md, "write the Markdown report here");
  subs.push_back({sub, [a] { return run_kl(*a); }});
}

}  // namespace

Runner add_eval(CLI::App& app) {
  auto* ev = app.add_subcommand("eval", "What an optimization costs in quality: kl, needle");
  ev->require_subcommand(1);
  auto subs = std::make_shared<std::vector<std::pair<CLI::App*, Runner>>>();
  add_kl(ev, *subs);
  add_needle(ev, *subs);
  return [subs] {
    for (const auto& [sub, run] : *subs)
      if (sub->parsed()) return run();
    return fail("eval: give a subcommand (kl, needle)");
  };
}

}  // namespace sustain::cli

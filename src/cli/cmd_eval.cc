// `sustain eval`: what an optimization costs in quality.
//   eval kl      KL(base‖test), top-1 agreement, Δp and perplexity per context bucket
//   eval needle  needle-in-a-haystack accuracy by context × depth for each KV format
//   eval ab      generated-text agreement of two configurations vs seed noise (cmd_eval_ab.cc)
// The logic lives in src/eval/; this file parses flags and prints.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_session.h"
#include "cli/file_io.h"
#include "eval/baseline.h"
#include "eval/kl.h"
#include "eval/kl_run.h"
#include "eval/needle.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "eval/text_needle.h"
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
  std::string model, cases, write_cases, haystack;
  std::string ctx = "1024", depths = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9";
  int trials = 4;
  uint64_t seed = 1;
  int distractor_pairs = 8;
  double value_share = 0.3;
  int phrasings = 0, distractors = 0, gen_tokens = 12;  // text cases
  std::string ctk = "f16", ctv = "f16";
  bool kv_grid = false;
  std::string kv_layout = "tiled";
  int threads = 0;
  int64_t batch = 512;
  bool json = false, per_case = false;
  std::string out_json, out_md, html;
  const CLI::App* app = nullptr;  // to tell flags given from defaults
};

Status parse_ctx_depths(const NeedleArgs& a, std::vector<int64_t>* ctx,
                        std::vector<double>* depths) {
  for (const auto& s : split_list(a.ctx)) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0')
      return error(Code::kInvalidArgument, "--ctx: '{}' in '{}' is not an integer", s, a.ctx);
    ctx->push_back(v);
  }
  for (const auto& s : split_list(a.depths)) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      return error(Code::kInvalidArgument, "--depths: '{}' in '{}' is not a number", s, a.depths);
    depths->push_back(v);
  }
  return Status::ok();
}

// Which flags belong to which form of case, so a flag that would be ignored is an error.
Status check_needle_flags(const NeedleArgs& a) {
  const bool text = !a.haystack.empty();
  if (text && !a.cases.empty())
    return error(
        Code::kInvalidArgument,
        "--cases '{}' (token-id cases) and --haystack '{}' (text cases) exclude each other",
        a.cases, a.haystack);
  for (const char* f : {"--distractor-pairs", "--value-share"})
    if (text && a.app->count(f) > 0)
      return error(Code::kInvalidArgument,
                   "{} applies to token-id cases; text cases (--haystack) take --distractors", f);
  for (const char* f : {"--phrasings", "--distractors", "--gen-tokens"})
    if (!text && a.app->count(f) > 0)
      return error(Code::kInvalidArgument, "{} applies to text cases: give --haystack FILE.txt", f);
  return Status::ok();
}

Expected<std::vector<eval::NeedleCase>> needle_cases(const NeedleArgs& a, std::string* input) {
  if (!a.cases.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_text_file(a.cases, "--cases file"));
    *input = fmt::format("cases file {}", a.cases);
    return eval::parse_needle_cases(text, a.cases);
  }
  eval::NeedleGenSpec spec;
  SUSTAIN_TRY(parse_ctx_depths(a, &spec.ctx, &spec.depths));
  spec.trials = a.trials;
  spec.seed = a.seed;
  spec.distractor_pairs = a.distractor_pairs;
  spec.distractor_value_share = a.value_share;
  *input = fmt::format("generated: ctx {}, depths {}, {} trials, seed {}, {} distractor pairs, "
                       "{:.0f}% distractor values",
                       a.ctx, a.depths, a.trials, a.seed, a.distractor_pairs, 100 * a.value_share);
  return eval::generate_needle_cases(spec);
}

// Text cases need the model's tokenizer; it lives here for the whole run.
struct TextNeedleInput {
  std::unique_ptr<Model> model;
  std::optional<tokenizer::Tokenizer> tok;
  std::vector<eval::TextNeedleCase> cases;
};

Status text_needle_cases(const NeedleArgs& a, TextNeedleInput* t, std::string* input) {
  SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_text_file(a.haystack, "--haystack file"));
  SUSTAIN_ASSIGN_OR_RETURN(eval::Haystack hay, eval::split_haystack(text, a.haystack));
  SUSTAIN_ASSIGN_OR_RETURN(t->model, Model::load(a.model));
  SUSTAIN_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_gguf(t->model->file()));
  t->tok.emplace(std::move(tok));
  eval::TextNeedleSpec spec;
  SUSTAIN_TRY(parse_ctx_depths(a, &spec.ctx, &spec.depths));
  spec.trials = a.trials;
  spec.phrasings = a.phrasings;
  spec.distractors = a.distractors;
  spec.seed = a.seed;
  spec.bos = t->tok->add_bos() ? t->tok->bos() : -1;
  SUSTAIN_ASSIGN_OR_RETURN(
      t->cases, eval::generate_text_needle_cases(spec, hay, eval::piece_tokenizer(*t->tok)));
  const int n_phr = a.phrasings > 0 ? a.phrasings : eval::text_needle_phrasing_count();
  *input = fmt::format("text cases: haystack {} ({} sentences), ctx {}, depths {}, {} trials, {} "
                       "phrasings, {} distractors, seed {}, greedy up to {} tokens",
                       a.haystack, hay.sentences.size(), a.ctx, a.depths, a.trials, n_phr,
                       a.distractors, a.seed, a.gen_tokens);
  return Status::ok();
}

std::string text_case_line(const eval::TextNeedleCase& t, const tokenizer::Tokenizer& tok) {
  nlohmann::ordered_json j;
  j["tag"] = t.c.tag;
  j["key"] = t.key;
  j["value"] = t.value;
  j["phrasing"] = t.phrasing;
  j["needle_pos"] = t.c.needle_pos;
  j["prompt"] = tok.decode(t.c.ids, false);
  j["ids"] = t.c.ids;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int run_needle(const NeedleArgs& a) {
  if (Status st = check_needle_flags(a); !st) return fail(st.message());
  const bool text = !a.haystack.empty();
  std::string input;
  std::vector<eval::NeedleCase> token_cases;
  TextNeedleInput tin;
  if (text) {
    if (Status st = text_needle_cases(a, &tin, &input); !st) return fail(st.message());
  } else {
    auto cases = needle_cases(a, &input);
    if (!cases) return fail(cases.status().message());
    token_cases = std::move(*cases);
  }
  const size_t n_cases = text ? tin.cases.size() : token_cases.size();
  auto case_at = [&](size_t i) -> const eval::NeedleCase& {
    return text ? tin.cases[i].c : token_cases[i];
  };
  if (!a.write_cases.empty()) {
    std::string out;
    for (size_t i = 0; i < n_cases; ++i)
      out +=
          (text ? text_case_line(tin.cases[i], *tin.tok) : eval::format_needle_case(case_at(i))) +
          "\n";
    if (Status st = write_text_file(a.write_cases, out); !st) return fail(st.message());
  }
  auto cfgs = kv_configs(a.ctk, a.ctv, a.kv_grid);
  if (!cfgs) return fail(cfgs.status().message());
  int64_t max_ctx = 0;
  for (size_t i = 0; i < n_cases; ++i) max_ctx = std::max(max_ctx, case_at(i).ctx);
  const int threads = a.threads > 0 ? a.threads : default_threads();
  const bool tty = isatty(fileno(stderr)) != 0;
  std::vector<eval::NeedleRun> runs;
  for (const auto& [k, v] : *cfgs) {
    RunnerOptions o;
    o.model = a.model;
    o.cache_k = k;
    o.cache_v = v;
    o.ctx = max_ctx + (text ? a.gen_tokens - 1 : 0);  // the last generated token is not fed
    o.threads = threads;
    o.batch = a.batch;
    o.kv_tiled = kv_tiled(a.kv_layout);
    auto r = ModelRunner::open(o);
    if (!r) return fail(r.status().message());
    eval::NeedleRun run;
    run.cache_k = k;
    run.cache_v = v;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits;
    for (size_t i = 0; i < n_cases; ++i) {
      const auto& c = case_at(i);
      const auto tc = std::chrono::steady_clock::now();
      eval::NeedleResult res;
      if (text) {
        const eval::TextNeedleCase& t = tin.cases[i];
        auto ans = eval::answer_text_needle(**r, *tin.tok, t, a.gen_tokens);
        if (!ans)
          return fail(
              ans.status().with_context(fmt::format("case {} ({})", i + 1, c.tag)).message());
        res.correct = ans->correct;
        res.predicted = ans->tokens.empty() ? -1 : ans->tokens.front();
        run.text.push_back({t.key, t.value, ans->text, t.phrasing});
      } else {
        (*r)->reset();
        Status st = (*r)->feed(c.ids.data(), c.ctx, false, &logits);
        if (!st) return fail(st.with_context(fmt::format("case {} ({})", i + 1, c.tag)).message());
        res = eval::score_needle(c, logits.data(), (*r)->n_vocab());
        run.answers.push_back(c.answer);
      }
      res.seconds = seconds_since(tc);
      run.table.add(c, res.correct);
      run.tags.push_back(c.tag);
      run.results.push_back(res);
      if (tty)
        std::fprintf(stderr, "\r%s/%s: case %zu/%zu, %d/%d correct   ", k.c_str(), v.c_str(),
                     i + 1, n_cases, run.table.correct, run.table.total);
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
      if (Status st = write_text_file(path, text); !st) return fail(st.message());
  std::printf("%s\n", a.json ? js.c_str() : md.c_str());
  return 0;
}

void add_needle(CLI::App* ev, std::vector<std::pair<CLI::App*, Runner>>& subs) {
  auto a = std::make_shared<NeedleArgs>();
  auto* sub = ev->add_subcommand(
      "needle", "Needle-in-a-haystack accuracy by context length and needle depth per KV format");
  a->app = sub;
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("--cases", a->cases,
                  "token-id cases to run as given (`answer ctx:depth:pos id id ...` per line)");
  sub->add_option("--haystack", a->haystack,
                  "text cases for real models: a needle sentence hidden in this text file "
                  "(repeated to fill the context), scored by greedy generation");
  sub->add_option("--ctx", a->ctx, "generated cases: prompt lengths in tokens, comma-separated")
      ->capture_default_str();
  sub->add_option("--depths", a->depths, "generated cases: needle depths in [0, 1]")
      ->capture_default_str();
  sub->add_option("--trials", a->trials, "generated cases per (ctx, depth)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--seed", a->seed, "generator seed")->capture_default_str();
  sub->add_option("--distractor-pairs", a->distractor_pairs, "token cases: K' V' pairs per case")
      ->capture_default_str();
  sub->add_option("--value-share", a->value_share,
                  "token cases: share of haystack tokens that are values")
      ->capture_default_str();
  sub->add_option("--phrasings", a->phrasings,
                  fmt::format("text cases: built-in phrasings to rotate over trials (1-{}; "
                              "default all)",
                              eval::text_needle_phrasing_count()));
  sub->add_option("--distractors", a->distractors,
                  "text cases: sentences like the needle with other keys and values")
      ->capture_default_str();
  sub->add_option("--gen-tokens", a->gen_tokens, "text cases: greedy tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--write-cases", a->write_cases,
                  "also write the cases to this file (text cases: one JSON object per line)");
  sub->add_option("--cache-type-k", a->ctk,
                  "K cache formats (alias -ctk), comma-separated: " +
                      std::string(eval::kv_type_names()))
      ->capture_default_str();
  sub->add_option("--cache-type-v", a->ctv, "V cache formats (alias -ctv), comma-separated")
      ->capture_default_str();
  sub->add_flag("--kv-grid", a->kv_grid, "run every (K, V) pair of the two lists");
  add_kv_layout_flag(sub, a->kv_layout, "--kv-layout");
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("-b,--batch-size", a->batch, "prompt tokens per forward call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  sub->add_flag("--json", a->json, "print the JSON summary instead of Markdown");
  sub->add_flag(
      "--per-case", a->per_case,
      "JSON: include every case's prediction and margin (text cases: the generated text)");
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
  std::string kv_layout = "tiled", base_kv_layout = "tiled";
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
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_text_file(a.text_file, "text file"));
    SUSTAIN_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_gguf(m.file()));
    SUSTAIN_ASSIGN_OR_RETURN(ids, tok.encode(text, true, false));
    *input = fmt::format("text {}", a.text_file);
  } else if (!a.tokens_file.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(std::string text, read_text_file(a.tokens_file, "token file"));
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
    ids = eval::random_tokens(a.ctx, nv, a.seed);
    *input = fmt::format("random ids, seed {}", a.seed);
  } else if (a.synthetic == "needle") {
    eval::NeedleGenSpec spec;
    spec.ctx = {a.ctx};
    spec.depths = {0.5};
    spec.trials = 1;
    spec.seed = a.seed;
    if (nv < spec.vocab.n_vocab)
      return error(Code::kInvalidArgument,
                   "--synthetic needle needs a {}-token vocabulary ({} has {})", spec.vocab.n_vocab,
                   m.file().path(), nv);
    SUSTAIN_ASSIGN_OR_RETURN(auto cases, eval::generate_needle_cases(spec));
    ids = cases[0].ids;
    *input =
        fmt::format("needle haystack ({} tokens, needle at depth 0.5), seed {}", a.ctx, a.seed);
  } else {
    return error(Code::kInvalidArgument, "--synthetic '{}' is not one of: random, needle",
                 a.synthetic);
  }
  if (static_cast<int64_t>(ids.size()) > a.ctx) ids.resize(static_cast<size_t>(a.ctx));
  if (ids.size() < 2)
    return error(Code::kInvalidArgument, "{} gives {} tokens; at least 2 are needed", *input,
                 ids.size());
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

  eval::KlRunSpec spec;
  eval::SavedBaseline saved;
  std::string input;
  if (!a.base_file.empty()) {
    auto b = eval::read_baseline(a.base_file);
    if (!b) return fail(b.status().message());
    saved = std::move(*b);
    spec.tokens = saved.tokens;
    spec.saved = &saved;
    input = fmt::format("saved baseline {} ({}; {})", a.base_file, saved.source, saved.model);
  } else {
    // The tokens come from the base model's tokenizer: open it once to read them.
    auto m = Model::load(base_model);
    if (!m) return fail(m.status().message());
    auto t = kl_tokens(a, **m, &input);
    if (!t) return fail(t.status().message());
    spec.tokens = std::move(*t);
    spec.base.model = base_model;
    spec.base.cache_k = a.base_ctk;
    spec.base.cache_v = a.base_ctv;
    spec.base.threads = threads;
    spec.base.batch = a.batch;
    spec.base.kv_tiled = kv_tiled(a.base_kv_layout);
    spec.base_label = fmt::format("{}{}/{}{}", a.base_model.empty() ? "" : base_model + " ",
                                  a.base_ctk, a.base_ctv, spec.base.kv_tiled ? "" : " rows");
  }
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  for (const auto& [k, v] : *cfgs) {
    RunnerOptions o;
    o.model = a.model;
    o.cache_k = k;
    o.cache_v = v;
    o.threads = threads;
    o.batch = a.batch;
    o.kv_tiled = kv_tiled(a.kv_layout);
    spec.tests.push_back(o);
    spec.test_labels.push_back(fmt::format("{}{}/{}{}", a.base_model.empty() ? "" : a.model + " ",
                                           k, v, o.kv_tiled ? "" : " rows"));
  }
  spec.edges = *edges;
  spec.chunk = a.batch;
  if (!a.save_base.empty()) {
    spec.save_to = &saved;
    spec.save_top_k = a.top_k;
  }
  const bool tty = isatty(fileno(stderr)) != 0;
  spec.progress = [tty](const eval::KlProgress& p) {
    if (tty)
      std::fprintf(stderr, "\rkl: %lld/%lld tokens   ", static_cast<long long>(p.done),
                   static_cast<long long>(p.total));
    return true;
  };
  auto runs = eval::run_kl(spec);
  if (!runs) return fail(runs.status().message());
  if (!a.save_base.empty()) {
    saved.model = base_model;
    saved.cache_k = a.base_ctk;
    saved.cache_v = a.base_ctv;
    saved.source = input;
    if (Status st = eval::write_baseline(a.save_base, saved); !st) return fail(st.message());
  }

  eval::Conditions cond = conditions(a.model, threads, a.batch);
  cond.base_model = base_model;
  cond.input = fmt::format("{}, {} tokens", input, n);
  const std::string js = eval::kl_json(cond, *runs), md = eval::kl_markdown(cond, *runs);
  for (const auto& [path, text] : {std::pair{a.out_json, js}, std::pair{a.out_md, md}})
    if (!path.empty())
      if (Status st = write_text_file(path, text); !st) return fail(st.message());
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
  add_kv_layout_flag(sub, a->kv_layout, "--kv-layout", "test ");
  add_kv_layout_flag(sub, a->base_kv_layout, "--base-kv-layout", "baseline ");
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
  sub->add_option("--base-file", a->base_file,
                  "compare against a saved baseline instead of running it");
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

void add_eval_ab(CLI::App* ev, std::vector<std::pair<CLI::App*, Runner>>& subs);  // cmd_eval_ab.cc

Runner add_eval(CLI::App& app) {
  auto* ev = app.add_subcommand("eval", "What an optimization costs in quality: kl, needle, ab");
  ev->require_subcommand(1);
  auto subs = std::make_shared<std::vector<std::pair<CLI::App*, Runner>>>();
  add_kl(ev, *subs);
  add_needle(ev, *subs);
  add_eval_ab(ev, *subs);
  return [subs] {
    for (const auto& [sub, run] : *subs)
      if (sub->parsed()) return run();
    return fail("eval: give a subcommand (kl, needle, ab)");
  };
}

}  // namespace sustain::cli

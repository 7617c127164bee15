#include "bench/ablation_quality.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "eval/kl_run.h"
#include "eval/needle.h"
#include "eval/runner.h"
#include "model/model.h"
#include "tensor/kv_names.h"
#include "tokenizer/tokenizer.h"
#include "tools/needle_retriever.h"

namespace sustain::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int64_t kMinQualityCtx = 64;  // room for a needle case and a bucket of 32 positions
constexpr int64_t kChunk = 512;         // tokens per lockstep step of the KL pass
const std::vector<double> kDepths = {0.1, 0.5, 0.9};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string ctx_label(int64_t c) {
  return c % 1024 == 0 ? fmt::format("{}K", c / 1024) : std::to_string(c);
}

// The seconds the KL pass needs to go from position `from` to `to`, from the
// chunks measured so far: a chunk's seconds per token grow linearly with its
// depth (attention reads every earlier position), t/token = a + b·depth,
// fitted by least squares. The first chunk (page faults, cold caches) is left
// out once there are three.
double project_kl(const eval::KlProgress& p, int64_t from, int64_t to) {
  std::vector<double> x, y;
  const size_t first = p.chunk_s.size() >= 3 ? 1 : 0;
  for (size_t i = first; i < p.chunk_s.size(); ++i) {
    const int64_t c0 = p.chunk_start[i];
    const int64_t c1 = i + 1 < p.chunk_start.size() ? p.chunk_start[i + 1] : p.done;
    if (c1 <= c0) continue;
    x.push_back(0.5 * static_cast<double>(c0 + c1));
    y.push_back(p.chunk_s[i] / static_cast<double>(c1 - c0));
  }
  if (x.empty()) return 0.0;
  double a = 0.0, b = 0.0;
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i)
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double den = n * sxx - sx * sx;
  if (x.size() >= 2 && den > 0) {
    b = std::max(0.0, (n * sxy - sx * sy) / den);
    a = std::max(0.0, (sy - b * sx) / n);
  } else {
    a = sy / n;
  }
  // ∫ (a + b·d) dd over [from, to).
  const double f = static_cast<double>(from), t = static_cast<double>(to);
  return a * (t - f) + 0.5 * b * (t * t - f * f);
}

json kl_cell(const eval::BucketStats& b, int64_t ctx) {
  return {{"ctx", ctx},
          {"lo", b.lo},
          {"hi", b.hi},
          {"n", b.n},
          {"kl_mean", b.kl.mean},
          {"kl_median", b.kl.median},
          {"kl_p99", b.kl.p99},
          {"kl_max", b.kl.max},
          {"same_top1", b.same_top1},
          {"ppl_ratio", b.ppl_ratio}};
}

// Removes the temporary retriever file however the needle phase ends.
struct TempFile {
  std::string path;
  ~TempFile() {
    std::error_code ec;
    if (!path.empty()) fs::remove(path, ec);
  }
};

struct NeedleCell {
  int correct = 0, total = 0;
  double min_margin = INFINITY;
  bool done = false;
};

// The KL pass over every distinct configuration; fills kl[] of each row.
Status kl_phase(const QualityOptions& opt, const std::vector<QualityConfig>& rows,
                Clock::time_point t_start, std::vector<json>& out, std::vector<std::string>& notes,
                json& summary, Observer& obs) {
  const QualityConfig& base = rows[0];
  // Rows that would compute exactly what an earlier row computes share its pass.
  std::vector<int> test_of(rows.size(), -1);
  std::vector<size_t> test_rows;  // first row of each distinct configuration
  std::map<std::string, int64_t> vocab;
  auto n_vocab = [&](const std::string& m) -> Expected<int64_t> {
    auto it = vocab.find(m);
    if (it != vocab.end()) return it->second;
    SUSTAIN_ASSIGN_OR_RETURN(auto model, Model::load(m));
    return vocab[m] = model->config().n_vocab;
  };
  SUSTAIN_ASSIGN_OR_RETURN(const int64_t nv_base, n_vocab(base.model));
  for (size_t i = 0; i < rows.size(); ++i) {
    const QualityConfig& r = rows[i];
    bool same = false;
    for (size_t t = 0; t < test_rows.size(); ++t) {
      const QualityConfig& o = rows[test_rows[t]];
      if (o.model == r.model && o.ctk == r.ctk && o.ctv == r.ctv && o.batch == r.batch &&
          o.threads == r.threads && o.kv_tiled == r.kv_tiled) {
        out[i] = {{"skipped", fmt::format("computes what row {} ({}) computes: same model, KV "
                                          "formats and layout, batch and threads (the KL pass "
                                          "has no prefix cache), so it would repeat that row's "
                                          "pass",
                                          test_rows[t], o.name)},
                  {"same_as_row", test_rows[t]}};
        same = true;
        break;
      }
    }
    if (same) continue;
    SUSTAIN_ASSIGN_OR_RETURN(const int64_t nv, n_vocab(r.model));
    if (nv != nv_base) {
      out[i] = {{"skipped", fmt::format("{} has {} tokens but the baseline's {} has {}: KL needs "
                                        "one vocabulary",
                                        r.model, nv, base.model, nv_base)}};
      continue;
    }
    test_of[i] = static_cast<int>(test_rows.size());
    test_rows.push_back(i);
  }

  eval::KlRunSpec spec;
  spec.base = {base.model, base.ctk, base.ctv, 1, base.threads, base.batch, base.kv_tiled};
  for (size_t r : test_rows) {
    const QualityConfig& q = rows[r];
    spec.tests.push_back({q.model, q.ctk, q.ctv, 1, q.threads, q.batch, q.kv_tiled});
    spec.test_labels.push_back(q.name);
  }
  spec.base_label = base.name;
  spec.tokens = opt.tokens;
  for (int64_t c : opt.ctx) {
    spec.edges.push_back(c / 2);
    spec.edges.push_back(c);
  }
  std::sort(spec.edges.begin(), spec.edges.end());
  spec.edges.erase(std::unique(spec.edges.begin(), spec.edges.end()), spec.edges.end());
  spec.chunk = kChunk;
  const int64_t n = static_cast<int64_t>(opt.tokens.size());
  obs.message(fmt::format(
      "bench: quality: KL over {} tokens ({}), the baseline and {} configuration(s) in lockstep; "
      "budget {}",
      n, opt.input, spec.tests.size(),
      opt.budget_s > 0 ? fmt::format("{:.0f} s (--quality-budget)", opt.budget_s) : "none"));
  const auto bar = obs.bar("bench quality KL");
  int64_t target = n;
  double last_projection = 0.0;
  int64_t refused = 0;  // the smallest context projected past the budget
  spec.progress = [&](const eval::KlProgress& p) {
    const double elapsed = since(t_start);
    if (opt.budget_s > 0 && p.chunk_s.size() >= 2) {
      // The largest quality context still reachable within the budget.
      target = p.done;
      for (int64_t c : opt.ctx) {
        if (c <= p.done) continue;
        const double more = project_kl(p, p.done, c);
        if (elapsed + more <= opt.budget_s) {
          target = c;
        } else {
          if (refused == 0 || c < refused) refused = c, last_projection = more;
          break;
        }
      }
    }
    const double left = project_kl(p, p.done, std::max(target, p.done));
    bar->update(
        static_cast<double>(p.done) / static_cast<double>(std::max<int64_t>(target, 1)),
        fmt::format("{}/{} tokens, {:.0f} s, ~{:.0f} s left", p.done, target, elapsed, left));
    return p.done < target;
  };
  const auto t_kl = Clock::now();
  SUSTAIN_ASSIGN_OR_RETURN(auto runs, eval::run_kl(spec));
  const double kl_s = since(t_kl);
  int64_t reached = 0;
  for (const auto& b : runs[0].buckets) reached = std::max(reached, b.hi);
  bar->finish(fmt::format("{} tokens in {:.0f} s", reached, kl_s));
  if (reached < n) {
    std::string skipped;
    for (int64_t c : opt.ctx)
      if (c > reached) skipped += (skipped.empty() ? "" : ", ") + ctx_label(c);
    notes.push_back(fmt::format(
        "quality: the KL pass stopped after {} tokens: reaching {} was projected to take {:.0f} s "
        "more, past the {:.0f} s budget (--quality-budget); KL not measured at {}",
        reached, ctx_label(refused), last_projection, opt.budget_s, skipped));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (test_of[i] < 0) continue;
    const eval::KlRun& run = runs[static_cast<size_t>(test_of[i])];
    json cells = json::array();
    for (int64_t c : opt.ctx) {
      const eval::BucketStats* hit = nullptr;
      for (const auto& b : run.buckets)
        if (b.lo == c / 2 && b.hi == c && &b != &run.buckets.back()) hit = &b;
      if (hit && hit->n == c - c / 2)
        cells.push_back(kl_cell(*hit, c));
      else
        cells.push_back({{"ctx", c}, {"skipped", "not reached within the --quality-budget"}});
    }
    out[i] = {{"kl", cells}, {"kl_seconds", run.seconds}};
  }
  summary["kl"] = {
      {"input", opt.input},
      {"tokens", n},
      {"tokens_evaluated", reached},
      {"baseline", fmt::format("row 0: {} K {} / V {}", base.model, base.ctk, base.ctv)},
      {"buckets", "positions p with context p + 1 in (C/2, C], per quality context C"},
      {"chunk_tokens", kChunk},
      {"seconds", kl_s}};
  return Status::ok();
}

// Needle accuracy of the retriever for each distinct KV configuration that
// differs from the baseline's (and the baseline's, as the reference).
Status needle_phase(const QualityOptions& opt, const std::vector<QualityConfig>& rows,
                    Clock::time_point t_start, std::vector<json>& out,
                    std::vector<std::string>& notes, json& summary, Observer& obs) {
  SUSTAIN_ASSIGN_OR_RETURN(const tools::RetrieverOptions ropt,
                           tools::retriever_variant(opt.needle));
  TempFile file;
  file.path = (fs::temp_directory_path() /
               fmt::format("sustain-bench-retriever-{}-{}.gguf", opt.needle, ::getpid()))
                  .string();
  SUSTAIN_TRY(tools::write_needle_retriever(ropt, file.path).status());
  eval::NeedleGenSpec gen;
  gen.ctx = opt.ctx;
  gen.depths = kDepths;
  gen.trials = opt.needle_trials;
  gen.seed = opt.seed;
  SUSTAIN_ASSIGN_OR_RETURN(const auto cases, eval::generate_needle_cases(gen));

  // The distinct KV configurations: formats and page layout.
  struct KvKey {
    std::string k, v;
    bool tiled;
    bool operator==(const KvKey& o) const { return k == o.k && v == o.v && tiled == o.tiled; }
    std::string label() const { return k + "/" + v + (tiled ? "" : " rows"); }
  };
  std::vector<KvKey> pairs;
  std::vector<int> pair_of(rows.size(), -1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const KvKey kv{rows[i].ctk, rows[i].ctv, rows[i].kv_tiled};
    if (i > 0 && kv == pairs[0]) continue;  // the baseline's formats: its own result
    auto it = std::find(pairs.begin(), pairs.end(), kv);
    pair_of[i] = static_cast<int>(it - pairs.begin());
    if (it == pairs.end()) pairs.push_back(kv);
  }
  std::vector<std::unique_ptr<eval::ModelRunner>> runners;
  for (const KvKey& kv : pairs) {
    SUSTAIN_ASSIGN_OR_RETURN(auto r, eval::ModelRunner::open({file.path, kv.k, kv.v, opt.ctx.back(),
                                                              opt.threads, kChunk, kv.tiled}));
    runners.push_back(std::move(r));
  }
  const size_t per_level = kDepths.size() * static_cast<size_t>(opt.needle_trials);
  obs.message(fmt::format(
      "bench: quality: needle retriever ({}), {} KV configuration(s) × {} cases at each of {} "
      "context(s)",
      opt.needle, pairs.size(), per_level, opt.ctx.size()));
  // cells[pair][level]
  std::vector<std::vector<NeedleCell>> cells(pairs.size(), std::vector<NeedleCell>(opt.ctx.size()));
  const auto bar = obs.bar("bench quality needle");
  int64_t measured_ctx = 0;
  double measured_case_s = 0.0;  // mean seconds per case at measured_ctx
  std::string stop_note;
  std::vector<float> logits;
  const auto t_needle = Clock::now();
  for (size_t level = 0; level < opt.ctx.size() && stop_note.empty(); ++level) {
    const int64_t C = opt.ctx[level];
    const double n_level = static_cast<double>(pairs.size() * per_level);
    // A case's cost grows at most with the square of its length (attention),
    // which over-estimates it: so only one case is projected this way, and the
    // level's first case then measures what the rest will take.
    if (opt.budget_s > 0 && measured_ctx > 0) {
      const double r = static_cast<double>(C) / static_cast<double>(measured_ctx);
      const double projected = measured_case_s * r * r;
      if (since(t_start) + projected > opt.budget_s) {
        stop_note = fmt::format(
            "one case at {} was projected to take up to {:.0f} s, past the "
            "{:.0f} s budget (--quality-budget)",
            ctx_label(C), projected, opt.budget_s);
        break;
      }
    }
    double level_s = 0.0;
    int level_cases = 0;
    for (size_t p = 0; p < pairs.size() && stop_note.empty(); ++p) {
      for (const auto& c : cases) {
        if (c.ctx != C) continue;
        if (opt.budget_s > 0 && level_cases > 0) {
          const double left = (n_level - level_cases) * level_s / level_cases;
          if (since(t_start) + left > opt.budget_s) {
            stop_note = fmt::format(
                "the cases at {} were projected to need {:.0f} s more, past "
                "the {:.0f} s budget (--quality-budget)",
                ctx_label(C), left, opt.budget_s);
            break;
          }
        }
        const auto t0 = Clock::now();
        runners[p]->reset();
        Status st = runners[p]->feed(c.ids.data(), c.ctx, false, &logits);
        if (!st)
          return st.with_context(fmt::format("needle case {} with KV {}", c.tag, pairs[p].label()));
        const eval::NeedleResult res = eval::score_needle(c, logits.data(), runners[p]->n_vocab());
        level_s += since(t0);
        ++level_cases;
        NeedleCell& cell = cells[p][level];
        cell.correct += res.correct;
        ++cell.total;
        cell.min_margin = std::min(cell.min_margin, res.logit_margin);
        bar->update(static_cast<double>(level_cases) / n_level,
                    fmt::format("{} {}: case {}/{}", ctx_label(C), pairs[p].label(), level_cases,
                                static_cast<int64_t>(n_level)));
      }
    }
    if (!stop_note.empty()) break;
    for (auto& pc : cells) pc[level].done = true;
    measured_ctx = C;
    measured_case_s = level_s / std::max(1, level_cases);
  }
  bar->finish(fmt::format("{:.0f} s", since(t_needle)));
  if (!stop_note.empty()) notes.push_back("quality: needle stopped: " + stop_note);

  for (size_t i = 0; i < rows.size(); ++i) {
    if (pair_of[i] < 0) continue;
    const auto& pc = cells[static_cast<size_t>(pair_of[i])];
    json arr = json::array();
    int correct = 0, total = 0;
    for (size_t level = 0; level < opt.ctx.size(); ++level) {
      const NeedleCell& c = pc[level];
      if (!c.done) {
        arr.push_back({{"ctx", opt.ctx[level]}, {"skipped", "past the --quality-budget"}});
        continue;
      }
      arr.push_back({{"ctx", opt.ctx[level]},
                     {"correct", c.correct},
                     {"total", c.total},
                     {"min_logit_margin", c.min_margin}});
      correct += c.correct;
      total += c.total;
    }
    out[i]["needle"] = {{"kv", pairs[static_cast<size_t>(pair_of[i])].label()},
                        {"cells", arr},
                        {"correct", correct},
                        {"total", total}};
  }
  summary["needle"] = {
      {"model", fmt::format("needle retriever ({}), written to a temporary file for "
                            "this run",
                            opt.needle)},
      {"depths", kDepths},
      {"trials", opt.needle_trials},
      {"seed", opt.seed},
      {"rows", "the baseline and every row whose KV formats differ from it"},
      {"seconds", since(t_needle)}};
  return Status::ok();
}

}  // namespace

Status check_quality_ctx(std::vector<int64_t>& ctx, const std::string& flag_value) {
  std::sort(ctx.begin(), ctx.end());
  ctx.erase(std::unique(ctx.begin(), ctx.end()), ctx.end());
  for (size_t i = 0; i < ctx.size(); ++i) {
    if (ctx[i] < kMinQualityCtx)
      return error(Code::kInvalidArgument,
                   "--quality-ctx '{}': {} is below the smallest quality context, {} tokens",
                   flag_value, ctx[i], kMinQualityCtx);
    if (i > 0 && ctx[i] / 2 < ctx[i - 1])
      return error(Code::kInvalidArgument,
                   "--quality-ctx '{}': the bucket of {} is ({}, {}], which overlaps that of {}; "
                   "give contexts at least 2x apart (e.g. 8192,32768)",
                   flag_value, ctx[i], ctx[i] / 2, ctx[i], ctx[i - 1]);
  }
  if (ctx.empty()) return error(Code::kInvalidArgument, "--quality-ctx '{}' is empty", flag_value);
  return Status::ok();
}

Expected<std::vector<int32_t>> quality_tokens(const std::string& model,
                                              const std::string& text_file, int64_t n,
                                              uint64_t seed, std::string* input) {
  SUSTAIN_ASSIGN_OR_RETURN(auto m, Model::load(model));
  if (text_file.empty()) {
    *input = fmt::format("random ids, seed {}", seed);
    auto ids = eval::random_tokens(n, m->config().n_vocab, seed);
    if (static_cast<int64_t>(ids.size()) != n)
      return error(Code::kInvalidArgument, "{}: a vocabulary of {} tokens has no ids to draw",
                   model, m->config().n_vocab);
    return ids;
  }
  std::ifstream f(text_file, std::ios::binary);
  if (!f) return error(Code::kIo, "--quality-text: cannot read '{}'", text_file);
  std::stringstream ss;
  ss << f.rdbuf();
  SUSTAIN_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_gguf(m->file()));
  auto ids = tok.encode(ss.str(), true, false);
  if (!ids) return ids.status().with_context("--quality-text " + text_file);
  if (static_cast<int64_t>(ids->size()) < n)
    return error(Code::kInvalidArgument,
                 "--quality-text '{}' is {} tokens with {}'s tokenizer; --quality-ctx needs {} "
                 "(its largest context)",
                 text_file, ids->size(), model, n);
  ids->resize(static_cast<size_t>(n));
  *input = fmt::format("text {}", text_file);
  return std::move(*ids);
}

std::string kv_spelling(QType t) {
  std::stringstream ss(kv_cache_type_names());
  std::string name;
  while (std::getline(ss, name, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    auto q = kv_cache_type(name, "");
    if (q && *q == t) return name;
  }
  return std::string(qtype_name(t));
}

Expected<QualityResult> measure_quality(const QualityOptions& opt,
                                        const std::vector<QualityConfig>& rows, Observer& obs) {
  if (rows.empty()) return error(Code::kInvalidArgument, "quality: no ablation rows");
  if (opt.ctx.empty() || static_cast<int64_t>(opt.tokens.size()) != opt.ctx.back())
    return error(Code::kInternal, "quality: {} tokens for a largest context of {}",
                 opt.tokens.size(), opt.ctx.empty() ? 0 : opt.ctx.back());
  const auto t_start = Clock::now();
  QualityResult res;
  res.rows.assign(rows.size(), json::object());
  res.summary = {{"vs", "row 0 (baseline)"}, {"ctx", opt.ctx}, {"budget_s", opt.budget_s}};
  SUSTAIN_TRY(kl_phase(opt, rows, t_start, res.rows, res.notes, res.summary, obs));
  if (opt.needle != "off")
    SUSTAIN_TRY(needle_phase(opt, rows, t_start, res.rows, res.notes, res.summary, obs));
  res.summary["seconds"] = since(t_start);
  return res;
}

}  // namespace sustain::bench

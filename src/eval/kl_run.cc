#include "eval/kl_run.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <fmt/format.h>

namespace sustain::eval {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string kv_label(const RunnerOptions& o) {
  return o.cache_k + "/" + o.cache_v;
}

}  // namespace

std::vector<int32_t> random_tokens(int64_t n, int64_t n_vocab, uint64_t seed) {
  std::vector<int32_t> ids;
  if (n <= 0 || n_vocab <= 3) return ids;
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  ids.push_back(1);
  while (static_cast<int64_t>(ids.size()) < n) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
    ids.push_back(static_cast<int32_t>(3 + s % static_cast<uint64_t>(n_vocab - 3)));
  }
  return ids;
}

Expected<std::vector<KlRun>> run_kl(const KlRunSpec& spec) {
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (n < 2) return error(Code::kInvalidArgument, "KL needs at least 2 tokens, got {}", n);
  if (spec.tests.empty()) return error(Code::kInvalidArgument, "KL needs a test configuration");
  if (spec.chunk < 1)
    return error(Code::kInvalidArgument, "KL chunk {} must be positive", spec.chunk);
  if (!spec.test_labels.empty() && spec.test_labels.size() != spec.tests.size())
    return error(Code::kInvalidArgument, "{} test labels for {} test configurations",
                 spec.test_labels.size(), spec.tests.size());
  const SavedBaseline* saved = spec.saved;
  if (saved) {
    if (saved->tokens != spec.tokens)
      return error(Code::kInvalidArgument,
                   "the saved baseline's {} tokens differ from the {} tokens to evaluate",
                   saved->tokens.size(), n);
    if (saved->rows.size() != spec.tokens.size() || saved->next_logit.size() != spec.tokens.size())
      return error(Code::kInvalidArgument, "the saved baseline has {} rows for {} tokens",
                   saved->rows.size(), n);
  }
  const auto t_open = std::chrono::steady_clock::now();
  std::unique_ptr<ModelRunner> base;
  if (!saved) {
    RunnerOptions o = spec.base;
    o.ctx = n;
    SUSTAIN_ASSIGN_OR_RETURN(base, ModelRunner::open(o));
  }
  const int64_t nv_base = base ? base->n_vocab() : saved->n_vocab;
  std::vector<std::unique_ptr<ModelRunner>> tests;
  for (const RunnerOptions& t : spec.tests) {
    RunnerOptions o = t;
    o.ctx = n;
    SUSTAIN_ASSIGN_OR_RETURN(auto r, ModelRunner::open(o));
    if (r->n_vocab() != nv_base)
      return error(Code::kInvalidArgument,
                   "{} has {} tokens but the baseline has {}: KL needs one vocabulary", t.model,
                   r->n_vocab(), nv_base);
    tests.push_back(std::move(r));
  }
  SavedBaseline* save = base ? spec.save_to : nullptr;
  if (save) {
    save->n_vocab = nv_base;
    save->top_k = static_cast<int>(std::clamp<int64_t>(spec.save_top_k, 1, nv_base));
    save->tokens = spec.tokens;
    save->rows.clear();
    save->next_logit.clear();
  }

  const int64_t nv = nv_base;
  const std::vector<int32_t>& ids = spec.tokens;
  std::vector<KlAccumulator> acc(tests.size(), KlAccumulator(spec.edges));
  std::vector<double> secs(tests.size(), 0.0);
  std::vector<float> base_logits, test_logits;
  KlProgress prog;
  prog.total = n;
  for (int64_t c0 = 0; c0 < n; c0 += spec.chunk) {
    const int64_t c1 = std::min(n, c0 + spec.chunk);
    const auto t_chunk = std::chrono::steady_clock::now();
    if (base) {
      Status st = base->feed(ids.data() + c0, c1 - c0, true, &base_logits);
      if (!st) return st.with_context("baseline");
      if (save)
        for (int64_t i = c0; i < c1; ++i) {
          const float* row = base_logits.data() + (i - c0) * nv;
          save->rows.push_back(compress_row(row, nv, save->top_k));
          save->next_logit.push_back(i + 1 < n ? row[ids[static_cast<size_t>(i + 1)]] : 0.0f);
        }
    }
    for (size_t t = 0; t < tests.size(); ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = tests[t]->feed(ids.data() + c0, c1 - c0, true, &test_logits);
      secs[t] += seconds_since(t0);
      if (!st) return st.with_context("test " + kv_label(spec.tests[t]));
      for (int64_t i = c0; i < c1; ++i) {
        const int32_t next = i + 1 < n ? ids[static_cast<size_t>(i + 1)] : -1;
        const float* trow = test_logits.data() + (i - c0) * nv;
        const auto k = static_cast<size_t>(i);
        const PositionStats s =
            base ? compare_rows(base_logits.data() + (i - c0) * nv, trow, nv, next)
                 : compare_saved(saved->rows[k], saved->next_logit[k], trow, nv, next);
        acc[t].add(i, s);
      }
    }
    prog.done = c1;
    prog.elapsed_s = seconds_since(t_open);
    prog.chunk_s.push_back(seconds_since(t_chunk));
    prog.chunk_start.push_back(c0);
    if (spec.progress && !spec.progress(prog)) break;
  }
  if (save && save->rows.size() < save->tokens.size()) {
    // Stopped early: the saved baseline covers what was fed, its last row without a next token.
    save->tokens.resize(save->rows.size());
    save->next_logit.back() = 0.0f;
  }

  std::vector<KlRun> runs;
  const std::string base_label =
      !spec.base_label.empty() ? spec.base_label
      : base                   ? kv_label(spec.base)
             : fmt::format("saved {} {}/{}", saved->model, saved->cache_k, saved->cache_v);
  for (size_t t = 0; t < tests.size(); ++t) {
    KlRun r;
    r.base_label = base_label;
    r.test_label = spec.test_labels.empty() ? kv_label(spec.tests[t]) : spec.test_labels[t];
    r.buckets = acc[t].buckets();
    r.from_saved = saved && saved->top_k < saved->n_vocab;
    r.top_k = saved ? saved->top_k : (save ? save->top_k : 0);
    r.seconds = secs[t];
    runs.push_back(std::move(r));
  }
  return runs;
}

}  // namespace sustain::eval

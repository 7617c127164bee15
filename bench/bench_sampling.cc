// Sampler::sample per token, for the chains a server meets: greedy, the
// sampler's default chain (top-k 40 first), and what OpenAI-style clients
// send (temperature alone, or with top_p, no top-k: the full vocabulary).
// Sampling runs serially on the engine thread between decode steps, so at
// eight streams every microsecond here is eight of every step.
//
// Logits: a model's own when SUSTAIN_BENCH_MODEL names a GGUF (one row per
// position of a fixed English paragraph), else synthetic rows of 49,152
// (smollm2's vocabulary) and 151,936 (Qwen's): Gaussian, sd 3, the spread
// of a language model's logits, or uniform in [0, 1), nearly flat, the
// worst case for top-p (its nucleus is almost the whole vocabulary).
//
// The verify/ rows time Sampler::sample_speculative, which a speculative
// step runs once per drafted row: the draft is the row's argmax and a
// token it rarely keeps by turns (q 0.7 on it), so both acceptance and the
// residual draw are in the figure.
//
// The logprobs/ rows time what a request with logprobs and top_logprobs 20
// adds per token: the log-softmax denominator and the 20 best, as the
// engine computes them (log_sum_exp, top_k_logits) and, in the scalar/
// rows, as it did before 2026-12-06 (a double exp per logit, a partial
// sort of every id).
//
//   bench_sampling --benchmark_repetitions=5 --benchmark_report_aggregates_only
//   SUSTAIN_BENCH_MODEL=smollm2-135m-Q4_K_M.gguf bench_sampling --benchmark_filter=model
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/processors.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace sustain {
namespace {

struct Rows {
  int32_t n_vocab = 0;
  std::vector<std::vector<float>> rows;
};

Rows synthetic(int32_t n_vocab, bool uniform) {
  Rows r{n_vocab, {}};
  std::mt19937 rng(42);
  std::normal_distribution<float> gauss(0.0f, 3.0f);
  std::uniform_real_distribution<float> flat(0.0f, 1.0f);
  for (int i = 0; i < 16; ++i) {
    std::vector<float> row(static_cast<size_t>(n_vocab));
    for (float& x : row) x = uniform ? flat(rng) : gauss(rng);
    r.rows.push_back(std::move(row));
  }
  return r;
}

constexpr const char* kParagraph =
    "The river rose through the night, and by morning the lower streets of the town were under "
    "water. People carried what they could up the hill to the church, where the priest had "
    "opened the doors and lit the stoves. Nobody knew how long it would last.";

// Logits at every position of kParagraph, or an empty set (with a message)
// when the model cannot be run.
Rows model_rows(const std::string& path) {
  auto model = Model::load(path);
  if (!model) {
    std::fprintf(stderr, "bench_sampling: %s\n", model.status().message().c_str());
    return {};
  }
  const Model& m = **model;
  auto tok = tokenizer::Tokenizer::from_gguf(m.file());
  if (!tok) return {};
  auto ids = tok->encode(kParagraph, true, false);
  if (!ids) return {};
  const auto n = static_cast<int64_t>(ids->size());
  ThreadPool pool(ThreadPool::hardware_threads());
  Workspace ws = m.make_workspace(n, pool.size());
  auto cache = kv::KvCache::create(m.kv_geometry(QType::F16, QType::F16, 32, 1), n + 64);
  if (!cache) return {};
  kv::PageTable t;
  if (!cache->reserve(t, n).is_ok()) return {};
  Batch b;
  b.seqs = {&t};
  for (int64_t i = 0; i < n; ++i) b.tokens.push_back({(*ids)[i], 0, i, true});
  const auto n_vocab = static_cast<int32_t>(m.config().n_vocab);
  std::vector<float> all(static_cast<size_t>(n * n_vocab));
  if (!m.forward(b, *cache, ws, pool, all.data()).is_ok()) return {};
  Rows r{n_vocab, {}};
  for (int64_t i = 0; i < n; ++i)
    r.rows.emplace_back(all.begin() + i * n_vocab, all.begin() + (i + 1) * n_vocab);
  return r;
}

sampling::SamplerConfig chain(int which) {
  sampling::SamplerConfig c;  // the default chain: 0.8, top-k 40, top-p 0.95, min-p 0.05
  c.seed = 7;
  switch (which) {
    case 0:  // greedy
      c.temperature = 0.0f;
      break;
    case 1:  // default
      break;
    case 2:  // OpenAI: temperature only
      c.top_k = 0, c.top_p = 1.0f, c.min_p = 0.0f;
      break;
    case 3:  // OpenAI: temperature and top_p
      c.top_k = 0, c.min_p = 0.0f;
      break;
    case 4:  // top_p and min_p, no top-k
      c.temperature = 1.0f, c.top_k = 0, c.top_p = 0.9f;
      break;
  }
  return c;
}
constexpr const char* kChainNames[] = {"greedy", "default", "temp", "temp_top_p", "top_p_min_p"};

void run(benchmark::State& state, const Rows* rows, int which, bool verify) {
  if (rows->rows.empty()) {
    state.SkipWithError("no logits (SUSTAIN_BENCH_MODEL unset or unusable)");
    return;
  }
  sampling::Sampler s(chain(which));
  // Each row's draft for verify/: its argmax, and a neighbour of it.
  std::vector<int32_t> top;
  for (const std::vector<float>& r : rows->rows)
    top.push_back(static_cast<int32_t>(std::max_element(r.begin(), r.end()) - r.begin()));
  size_t i = 0, live = 0, step = 0, accepted = 0;
  for (auto _ : state) {
    if (verify) {
      const int32_t draft = step++ % 2 ? top[i] : (top[i] + 1) % rows->n_vocab;
      const sampling::TokenProb q[] = {{draft, 0.7f, 0.0f},
                                       {(draft + 7) % rows->n_vocab, 0.3f, 0.0f}};
      const int32_t got = s.sample_speculative(rows->rows[i].data(), rows->n_vocab, draft, q);
      accepted += got == draft;
    } else {
      benchmark::DoNotOptimize(s.sample(rows->rows[i].data(), rows->n_vocab));
    }
    live += s.n_live();
    i = (i + 1) % rows->rows.size();
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["live"] = static_cast<double>(live) / n;
  if (verify) state.counters["accepted"] = static_cast<double>(accepted) / n;
}

void logprobs(benchmark::State& state, const Rows* rows, bool scalar) {
  if (rows->rows.empty()) {
    state.SkipWithError("no logits (SUSTAIN_BENCH_MODEL unset or unusable)");
    return;
  }
  constexpr int32_t kTop = 20;
  const int32_t n = rows->n_vocab;
  std::vector<float> weights(static_cast<size_t>(n));
  std::vector<sampling::Candidate> cands(static_cast<size_t>(n));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  size_t i = 0;
  for (auto _ : state) {
    const float* row = rows->rows[i].data();
    double lse;
    float best;
    if (scalar) {
      float mx = row[0];
      for (int32_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
      double sum = 0.0;
      for (int32_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
      lse = mx + std::log(sum);
      for (int32_t j = 0; j < n; ++j) ids[static_cast<size_t>(j)] = j;
      std::partial_sort(ids.begin(), ids.begin() + kTop, ids.end(), [&](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      best = row[ids[0]];
    } else {
      lse = sampling::log_sum_exp(row, n, weights.data());
      sampling::Candidates c;
      sampling::top_k_logits(c, cands.data(), row, n, kTop);
      best = c.data[0].logit;
    }
    benchmark::DoNotOptimize(lse);
    benchmark::DoNotOptimize(best);
    i = (i + 1) % rows->rows.size();
  }
}

}  // namespace
}  // namespace sustain

int main(int argc, char** argv) {
  using namespace sustain;
  static Rows gauss49 = synthetic(49152, false), gauss152 = synthetic(151936, false),
              flat49 = synthetic(49152, true), real;
  if (const char* path = std::getenv("SUSTAIN_BENCH_MODEL")) real = model_rows(path);
  const std::pair<const char*, const Rows*> sets[] = {
      {"model", &real}, {"gauss49k", &gauss49}, {"gauss152k", &gauss152}, {"flat49k", &flat49}};
  for (const auto& [name, rows] : sets)
    for (int which = 0; which < 5; ++which)
      for (bool verify : {false, true}) {
        if (verify && which == 0) continue;  // greedy verifies by sample()
        const std::string label =
            std::string(verify ? "verify/" : "") + name + "/" + kChainNames[which];
        benchmark::RegisterBenchmark(label.c_str(), run, rows, which, verify)
            ->Unit(benchmark::kMicrosecond);
      }
  for (const auto& [name, rows] : sets)
    for (bool scalar : {false, true})
      benchmark::RegisterBenchmark(
          (std::string(scalar ? "logprobs/scalar/" : "logprobs/") + name).c_str(), logprobs, rows,
          scalar)
          ->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

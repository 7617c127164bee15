// Sustained speed at depth, model level: for each K/V cache format and each
// depth d, fill the cache to d tokens (untimed), then time
//   pp: one 512-token prompt chunk at depth d  (prompt tok/s)
//   tg: n single-token decode steps at depth d (decode tok/s)
// the same two measurements as `llama-bench -d D -p 512 -n 64`, so the two
// tools can be run side by side on one GGUF file. Each figure is the median
// of -r repetitions, with the min..max spread.
//
//   bench_depth -m model.gguf -d 0,4096,16384,32768 -ctk f16,q8_0,q4_0 -t 2
//   bench_depth -m model.gguf -d 262144 -ctk q4_0 --fill random -p 0
//
// --fill real (default) runs the model over d random tokens, as llama-bench
// does; --fill random writes random K/V rows straight into the cache (the
// decode cost of attention does not depend on the values), which makes
// depths like 256K measurable where a real fill would take hours on 2 cores.
// Rows are labeled with the fill used.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv/random_fill.h"
#include "model/model.h"
#include "tensor/qtype.h"

namespace sustain {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  bool repack = false;  // --repack
  std::string model;
  std::vector<int64_t> depths = {0, 4096, 16384, 32768};
  std::vector<std::string> kv = {"f16"};  // each entry "k" or "k:v"
  int64_t n_prompt = 512, n_gen = 64;
  int reps = 3, threads = 0;
  bool random_fill = false;
  std::vector<bool> tiled = {true};  // --layout: page layouts of the block formats
  // --verify: draft lengths k whose verify step (k + 1 tokens of one
  // sequence, logits for each) is timed at every depth; empty = off.
  std::vector<int64_t> verify;
  // --batch: numbers of sequences B whose batched decode step (one token of
  // each of B sequences, every one at the depth, logits for each) is timed
  // at every depth; empty = off.
  std::vector<int64_t> batch;
};

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "bench_depth: error: %s\n", m.c_str());
  std::exit(1);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) if (!x.empty()) v.push_back(x);
  return v;
}

int64_t to_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || x < lo || x > hi)
    die(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
        "], got '" + v + "'");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(f + " needs a value");
      return argv[++i];
    };
    if (f == "-m") a.model = val();
    else if (f == "-d") {
      a.depths.clear();
      for (auto& x : split(val())) a.depths.push_back(to_int("-d", x, 0, int64_t(1) << 24));
    } else if (f == "-ctk" || f == "--kv") a.kv = split(val());
    else if (f == "-p") a.n_prompt = to_int("-p", val(), 0, 1 << 16);
    else if (f == "-n") a.n_gen = to_int("-n", val(), 1, 1 << 16);
    else if (f == "-r") a.reps = static_cast<int>(to_int("-r", val(), 1, 100));
    else if (f == "-t") a.threads = static_cast<int>(to_int("-t", val(), 1, 1024));
    else if (f == "--fill") {
      const std::string v = val();
      if (v != "real" && v != "random") die("--fill must be real or random, got '" + v + "'");
      a.random_fill = v == "random";
    } else if (f == "--layout") {
      const std::string v = val();
      if (v == "tiled") a.tiled = {true};
      else if (v == "rows") a.tiled = {false};
      else if (v == "both") a.tiled = {false, true};
      else die("--layout must be tiled, rows or both, got '" + v + "'");
    } else if (f == "--verify") {
      for (auto& x : split(val())) a.verify.push_back(to_int("--verify", x, 0, 64));
    } else if (f == "--repack") {
      a.repack = true;
    } else if (f == "--batch") {
      for (auto& x : split(val())) a.batch.push_back(to_int("--batch", x, 1, 64));
    } else if (f == "-h" || f == "--help") {
      std::printf(
          "bench_depth -m MODEL [-d 0,4096,...] [-ctk f16,q8_0,q4_0:f16,...] [-p 512] [-n 64]\n"
          "            [-r 3] [-t THREADS] [--fill real|random] [--layout tiled|rows|both]\n"
          "            [--verify 0,1,2,4,8,16] [--batch 1,2,4,8,16] [--repack]\n"
          "  --repack: Q4_0/Q5_0/Q8_0/Q4_K/Q6_K weights repacked at load (model/repack.h).\n"
          "  --verify: also time a speculative verify step (k + 1 tokens of one sequence,\n"
          "            logits for each) at every depth, -n steps per k; prints ms per step\n"
          "            and the cost relative to k = 0 (the verify-cost curve).\n"
          "  --batch:  also time a batched decode step (one token of each of B sequences,\n"
          "            all at the depth, logits for each), -n steps per B; prints ms per\n"
          "            step, tok/s and the aggregate relative to B = 1.\n"
          "  -ctk entries are K formats (V the same) or K:V pairs.\n"
          "  --layout: page layout of the 32-element block formats and fp8 (kv/tiled.h);\n"
          "            both "
          "runs each format row by row, then tiled.\n");
      std::exit(0);
    } else
      die("unknown flag '" + f + "' (see --help)");
  }
  if (a.model.empty()) die("-m MODEL is required");
  return a;
}

QType kv_type(const std::string& s) {
  auto t = qtype_from_name(s);
  if (!t) die("unknown KV cache type '" + s + "'");
  return *t;
}

struct Stat {
  double median = 0, lo = 0, hi = 0;
};
Stat stat(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace
}  // namespace sustain

int main(int argc, char** argv) {
  using namespace sustain;
  const Args a = parse(argc, argv);
  set_weight_repack(a.repack);
  auto model = Model::load(a.model);
  if (!model) die(model.status().message());
  const Model& m = **model;
  ThreadPool pool(a.threads > 0 ? a.threads : ThreadPool::hardware_threads());
  const int64_t n_vocab = m.config().n_vocab;
  const int64_t max_depth = *std::max_element(a.depths.begin(), a.depths.end());
  // Large enough for the prompt and every verify step in one chunk (a
  // smaller workspace would split a verify step into single tokens).
  int64_t ws_tokens = std::max<int64_t>(a.n_prompt, 1);
  for (int64_t k : a.verify) ws_tokens = std::max(ws_tokens, k + 1);
  for (int64_t b : a.batch) ws_tokens = std::max(ws_tokens, b);
  const int64_t max_batch = a.batch.empty() ? 1 : *std::max_element(a.batch.begin(), a.batch.end());
  Workspace ws = m.make_workspace(ws_tokens, pool.size());
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  std::mt19937 rng(1234);
  auto token = [&] { return static_cast<int32_t>(3 + rng() % (n_vocab - 3)); };

  std::printf("model %s, %d threads, fill %s, pp %lld tokens, tg %lld tokens, %d reps\n\n",
              a.model.c_str(), pool.size(), a.random_fill ? "random K/V" : "real (model run)",
              (long long)a.n_prompt, (long long)a.n_gen, a.reps);
  std::printf(
      "| K | V | layout | depth | pp t/s (median, min..max) | tg t/s (median, min..max) | KV MiB "
      "|\n");
  std::printf("|---|---|---|---:|---:|---:|---:|\n");
  for (const std::string& spec : a.kv)
  for (const bool tiled : a.tiled) {
    const auto colon = spec.find(':');
    const QType kt = kv_type(spec.substr(0, colon));
    const QType vt = kv_type(colon == std::string::npos ? spec.substr(0, colon) : spec.substr(colon + 1));
    // Hybrid models: a second state slot holds the state at depth, restored
    // after each timed run (a recurrent state cannot be truncated).
    // (With --batch, two more for each batched sequence: its state and the
    // copy each run is rewound to.)
    kv::KvGeometry g =
        m.kv_geometry(kt, vt, 32, 2 + (a.batch.empty() ? 0 : 2 * static_cast<int>(max_batch)));
    g.tiled = tiled;
    // Sliding-window blocks keep every position here (as --swa-full does):
    // each timed run is rewound to `depth`, which needs the window before it
    // still held, and the random fill writes the whole depth at once. A
    // window block's attention reads the same W keys either way.
    g.window_layers.clear();
    if (!tiled && a.tiled.size() > 1 && !kv::tileable(kt) && !kv::tileable(vt))
      continue;  // --layout both: a format without a tiled layout runs once
    // Room for the sequence at its deepest, and with --batch for max_batch
    // more (each rounded up to whole pages, plus the page a step may open).
    const int64_t per_seq = (max_depth + std::max(a.n_prompt, a.n_gen) + 1 + g.page_tokens - 1) /
                                g.page_tokens * g.page_tokens +
                            g.page_tokens;
    auto cache = kv::KvCache::create(g, per_seq * (a.batch.empty() ? 1 : max_batch + 1));
    if (!cache) die(cache.status().message());
    for (int64_t depth : a.depths) {
      kv::PageTable t;
      // Untimed fill to `depth`.
      if (a.random_fill) {
        // (A hybrid's DeltaNet state is fixed-size whatever the depth:
        // random values at the right position cost what real ones do.)
        if (auto s = kv::fill_random(*cache, t, depth, rng()); !s.is_ok()) die(s.message());
      } else {
        for (int64_t done = 0; done < depth;) {
          const int64_t n = std::min<int64_t>(ws.max_tokens, depth - done);
          if (!cache->reserve(t, n).is_ok()) die("KV reserve failed");
          Batch b;
          b.seqs = {&t};
          for (int64_t i = 0; i < n; ++i) b.tokens.push_back({token(), 0, done + i, i == n - 1});
          auto s = m.forward(b, *cache, ws, pool, logits.data());
          if (!s.is_ok()) die(s.message());
          done += n;
        }
      }
      int32_t saved = -1;
      if (cache->has_state()) {
        if (t.state < 0 && !cache->reserve(t, 0).is_ok()) die("state slot");
        saved = cache->states().alloc();
        cache->states().copy(t.state, saved);
      }
      auto rewind = [&] {
        cache->truncate(t, depth);
        if (saved >= 0) cache->states().copy(saved, t.state);
      };
      std::vector<double> pp, tg;
      for (int r = 0; r < a.reps; ++r) {
        if (a.n_prompt > 0) {
          if (!cache->reserve(t, a.n_prompt).is_ok()) die("KV reserve failed");
          Batch b;
          b.seqs = {&t};
          for (int64_t i = 0; i < a.n_prompt; ++i)
            b.tokens.push_back({token(), 0, depth + i, i == a.n_prompt - 1});
          const auto t0 = Clock::now();
          auto s = m.forward(b, *cache, ws, pool, logits.data());
          const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
          if (!s.is_ok()) die(s.message());
          pp.push_back(double(a.n_prompt) / sec);
          rewind();
        }
        Batch b;
        b.seqs = {&t};
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < a.n_gen; ++i) {
          if (!cache->reserve(t, 1).is_ok()) die("KV reserve failed");
          b.tokens.assign(1, {token(), 0, depth + i, true});
          auto s = m.forward(b, *cache, ws, pool, logits.data());
          if (!s.is_ok()) die(s.message());
        }
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        tg.push_back(double(a.n_gen) / sec);
        rewind();
      }
      // The verify-cost curve: each step appends k + 1 tokens at `depth`
      // and is rewound, so every step sees the same depth.
      std::vector<double> verify_ms;
      for (int64_t k : a.verify) {
        if (!cache->reserve(t, k + 1).is_ok()) die("KV reserve failed");
        Batch b;
        b.seqs = {&t};
        for (int64_t i = 0; i <= k; ++i) b.tokens.push_back({token(), 0, depth + i, true});
        if (logits.size() < size_t(k + 1) * m.config().n_vocab)
          logits.resize(size_t(k + 1) * m.config().n_vocab);
        std::vector<double> ms;
        for (int r = 0; r < a.reps; ++r) {
          const auto t0 = Clock::now();
          for (int64_t i = 0; i < a.n_gen; ++i) {
            auto s = m.forward(b, *cache, ws, pool, logits.data());
            if (!s.is_ok()) die(s.message());
            if (saved >= 0) cache->states().copy(saved, t.state);
          }
          ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / a.n_gen);
        }
        rewind();
        verify_ms.push_back(stat(ms).median);
      }
      if (saved >= 0) cache->states().free(saved);
      // Batched decode: B sequences of random K/V at the depth (the values
      // do not change the cost), one token of each per step, every run of -n
      // steps rewound so each step sees about the same depth.
      std::vector<double> batch_ms;
      if (!a.batch.empty()) {
        std::vector<kv::PageTable> seqs(static_cast<size_t>(max_batch));
        for (auto& st : seqs) {
          if (auto s = kv::fill_random(*cache, st, depth, rng()); !s.is_ok()) die(s.message());
        }
        // A hybrid's batched sequences start from this one's state, and each
        // run of -n steps is rewound to it (a state cannot be truncated).
        std::vector<int32_t> bsaved;
        if (cache->has_state()) {
          for (auto& st : seqs) {
            if (st.state < 0 && !cache->reserve(st, 0).is_ok()) die("state slot");
            cache->states().copy(t.state, st.state);
            bsaved.push_back(cache->states().alloc());
            if (bsaved.back() < 0) die("state slot");
            cache->states().copy(t.state, bsaved.back());
          }
        }
        for (int64_t nb : a.batch) {
          Batch b;
          for (int64_t s = 0; s < nb; ++s) {
            b.seqs.push_back(&seqs[size_t(s)]);
            b.tokens.push_back({token(), static_cast<int>(s), depth, true});
          }
          if (logits.size() < size_t(nb) * n_vocab) logits.resize(size_t(nb) * n_vocab);
          std::vector<double> ms;
          for (int r = 0; r < a.reps; ++r) {
            const auto t0 = Clock::now();
            for (int64_t i = 0; i < a.n_gen; ++i) {
              for (int64_t s = 0; s < nb; ++s) {
                if (!cache->reserve(seqs[size_t(s)], 1).is_ok()) die("KV reserve failed");
                b.tokens[size_t(s)].pos = depth + i;
              }
              auto st = m.forward(b, *cache, ws, pool, logits.data());
              if (!st.is_ok()) die(st.message());
            }
            ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / a.n_gen);
            for (int64_t s = 0; s < nb; ++s) {
              cache->truncate(seqs[size_t(s)], depth);
              if (!bsaved.empty()) cache->states().copy(bsaved[size_t(s)], seqs[size_t(s)].state);
            }
          }
          batch_ms.push_back(stat(ms).median);
        }
        for (int32_t slot : bsaved) cache->states().free(slot);
        for (auto& st : seqs) cache->release(st);
      }
      for (size_t i = 0; i < a.batch.size(); ++i)
        std::printf(
            "| batch | %s | %s | %lld | B=%lld | %.2f ms/step | %.1f tok/s | %.2fx B=%lld |\n",
            std::string(qtype_name(kt)).c_str(), std::string(qtype_name(vt)).c_str(),
            (long long)depth, (long long)a.batch[i], batch_ms[i],
            1e3 * double(a.batch[i]) / batch_ms[i],
            (double(a.batch[i]) / batch_ms[i]) / (double(a.batch[0]) / batch_ms[0]),
            (long long)a.batch[0]);
      for (size_t i = 0; i < a.verify.size(); ++i)
        std::printf("| verify | %s | %s | %lld | k=%lld | %.2f ms/step | %.2fx k=0 |\n",
                    std::string(qtype_name(kt)).c_str(), std::string(qtype_name(vt)).c_str(),
                    (long long)depth, (long long)a.verify[i], verify_ms[i],
                    verify_ms[i] / verify_ms[0]);
      const Stat sp = a.n_prompt > 0 ? stat(pp) : Stat{}, st = stat(tg);
      char pps[64] = "-";
      if (a.n_prompt > 0) std::snprintf(pps, sizeof pps, "%.1f (%.1f..%.1f)", sp.median, sp.lo, sp.hi);
      const char* layout = g.k_tiled() || g.v_tiled() ? "tiled" : "rows";
      std::printf("| %s | %s | %s | %lld | %s | %.2f (%.2f..%.2f) | %.1f |\n",
                  std::string(qtype_name(kt)).c_str(), std::string(qtype_name(vt)).c_str(), layout,
                  (long long)depth, pps, st.median, st.lo, st.hi,
                  double(g.bytes_per_token()) * double(depth) / (1 << 20));
      std::fflush(stdout);
      cache->release(t);
    }
  }
  return 0;
}

// Attention for smollm2-135m's geometry (30 layers, 9 query heads, 3 KV
// heads, head dim 64) on 2 threads, K/V in every format attend() reads:
// decode (one query) at 4K / 16K / 32K tokens of context, and a 512-token
// prefill chunk at 16K, as ms per layer and the KV bandwidth achieved.
// ReadBandwidth, in the same run, is the bound to hold it against (PERF.md:
// only ratios taken side by side count on these machines).
//
//   bench_attention --benchmark_repetitions=5 --benchmark_report_aggregates_only
//   bench_attention --benchmark_filter='Decode.*/16384/32/1/'  (one depth, every format)
//   bench_attention --benchmark_filter='Decode.*/32768/32/1/4/'  (Q4_0 tiled and rows)
//   bench_attention --benchmark_filter=Verify  (k + 1 queries of one sequence at 32K)
//   bench_attention --benchmark_filter=Resident  (the same without DRAM: arithmetic)
//   bench_attention --benchmark_filter=Wide  (qwen3.5-4b's and qwen3-4b's head shapes)
//   bench_attention --benchmark_filter=BatchDecode  (8 / 16 short sequences at once)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attention.h"
#include "kv/kv_cache.h"

namespace sustain {
namespace {

constexpr int kLayers = 30, kHeads = 9, kHeadsKv = 3, kHeadDim = 64, kThreads = 2;

// The attention shapes timed: smollm2-135m's (the default above: 30 layers,
// 9 query heads over 3 KV heads of 64); the hybrid's full-attention blocks
// (qwen3.5-4b: 8 of its 32 blocks, 16 query heads over 4 KV heads of 256),
// where a step reads 1 GiB of f16 KV at 32K; qwen3-4b's heads (32 query
// heads over 8 KV heads of 128, as llama-3.1-8b's), 16 of its 36 layers.
struct Shape {
  int layers, heads, heads_kv, dim;
  auto operator<=>(const Shape&) const = default;
};
constexpr Shape kSmol{kLayers, kHeads, kHeadsKv, kHeadDim};
constexpr Shape kWide[] = {{8, 16, 4, 256}, {16, 32, 8, 128}};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;
Buffer aligned_buffer(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

ThreadPool& pool() {
  static ThreadPool p(kThreads);
  return p;
}

// One filled cache per (type, page size, context), kept across benchmarks:
// filling 32K tokens is slower than measuring them.
struct Setup {
  std::unique_ptr<kv::KvCache> cache;
  kv::PageTable table;
};

Setup& setup(QType type, int page_tokens, int64_t ctx, bool tiled = true, Shape sh = kSmol) {
  static std::map<std::tuple<QType, int, int64_t, bool, Shape>, Setup> cache;
  Setup& s = cache[{type, page_tokens, ctx, tiled, sh}];
  if (s.cache) return s;
  cache.clear();  // one at a time: a 32K f16 cache is 740 MB
  Setup& fresh = cache[{type, page_tokens, ctx, tiled, sh}];
  kv::KvGeometry g;
  g.n_layer = sh.layers;
  g.n_head_kv = sh.heads_kv;
  g.head_dim_k = g.head_dim_v = sh.dim;
  g.k_type = g.v_type = type;
  g.page_tokens = page_tokens;
  g.tiled = tiled;
  auto c = kv::KvCache::create(g, ctx);
  if (!c) std::abort();
  fresh.cache = std::make_unique<kv::KvCache>(std::move(c.value()));
  if (!fresh.cache->reserve(fresh.table, ctx)) std::abort();
  // Random rows from a small pool (generating 30 × 32K rows is slow).
  constexpr int kPool = 997;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t row = size_t(sh.heads_kv) * sh.dim;
  std::vector<float> rows(size_t(kPool + 1) * row);
  for (float& x : rows) x = nd(rng);
  for (int layer = 0; layer < sh.layers; ++layer) {
    for (int64_t pos = 0; pos < ctx; ++pos) {
      const float* k = rows.data() + size_t((pos * 31 + layer) % kPool) * row;
      const float* v = rows.data() + size_t((pos * 17 + layer + 5) % kPool) * row;
      fresh.cache->store(fresh.table, layer, pos, k, v);
    }
  }
  return fresh;
}

// Every KV format attend() reads (K and V the same), by benchmark argument.
constexpr QType kTypes[] = {QType::F32,  QType::F16,  QType::BF16, QType::Q8_0,    QType::Q4_0,
                            QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::FP8_E4M3};

attention::AttnParams bench_params(bool split, Shape sh = kSmol) {
  attention::AttnParams p;
  p.n_head = sh.heads;
  p.n_head_kv = sh.heads_kv;
  p.head_dim_k = p.head_dim_v = sh.dim;
  p.scale = 1.0f / std::sqrt(float(sh.dim));
  p.split_kv = split ? attention::SplitKv::kAuto : attention::SplitKv::kOff;
  return p;
}

// Times `layers` attend() calls per iteration (one per layer, as a forward
// pass makes them) and reports per-layer and per-token figures.
template <class Fn>
void time_layers(benchmark::State& state, const kv::KvCache& cache, int64_t ctx, int layers,
                 Fn&& fn) {
  double seconds = 0.0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int layer = 0; layer < layers; ++layer) fn(layer);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double cpu = process_cpu_seconds() - cpu0;
  const double bytes =
      double(ctx) * cache.geometry().bytes_per_token() / cache.geometry().n_layer * layers;
  const double n = double(state.iterations());
  state.counters["ms_per_layer"] = 1e3 * seconds / n / layers;
  state.counters["KV_MB"] = bytes / 1e6;
  state.counters["KV_GBps"] = bytes * n / seconds / 1e9;
  // The same from CPU time: what kThreads cores of their own would reach. On
  // a shared VM (other jobs running) wall time overstates the cost, and the
  // pool's barrier waits for the slowest thread's time slice.
  state.counters["cpu_ms_per_layer"] = 1e3 * cpu / kThreads / n / layers;
  state.counters["KV_GBps_cpu"] = bytes * n / (cpu / kThreads) / 1e9;
}

// Decode (one query token) over all kLayers layers.
// args: context, page tokens, split (0 off, 1 auto), format (index in kTypes),
// page layout of the block formats (1 tiled, 0 rows; kv/tiled.h)
void BM_DecodeAttention(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const int page_tokens = static_cast<int>(state.range(1));
  const QType type = kTypes[state.range(3)];
  const bool tiled = state.range(4) != 0;
  Setup& s = setup(type, page_tokens, ctx, tiled);
  const attention::AttnParams p = bench_params(state.range(2) != 0);
  const std::vector<attention::QueryInfo> queries = {{&s.table, ctx}};
  std::vector<float> q(kHeads * kHeadDim), out(kHeads * kHeadDim);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  Buffer scratch = aligned_buffer(attention::attention_scratch_bytes(p, 1, kThreads));
  time_layers(state, *s.cache, ctx, kLayers, [&](int layer) {
    attention::attend(*s.cache, layer, p, queries, q.data(), out.data(), pool(), scratch.get());
    benchmark::DoNotOptimize(out.data());
  });
  state.SetLabel(std::string(qtype_name(type)) + (state.range(2) ? " split" : " nosplit") +
                 (s.cache->geometry().k_tiled() ? " tiled" : ""));
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  for (int t = 0; t < int(std::size(kTypes)); ++t)
    for (int64_t ctx : {4096, 16384, 32768}) b->Args({ctx, 32, 1, t, 1});
  // Block formats row by row, against tiled: from memory (32K), and from
  // cache (2K: 30 layers of KV in 13-25 MB, so the kernels' compute alone).
  for (int t = 3; t <= 7; ++t) b->Args({32768, 32, 1, t, 0});
  for (int t = 3; t <= 7; ++t)
    for (int tiled : {1, 0}) b->Args({2048, 32, 1, t, tiled});
  b->Args({16384, 32, 0, 1, 1});  // no split-KV: one item per KV head
  for (int t : {1, 4}) {  // page size (F16: rows within a page; Q4_0: tiles across pages)
    b->Args({16384, 16, 1, t, 1});
    b->Args({16384, 256, 1, t, 1});
  }
}
BENCHMARK(BM_DecodeAttention)
    ->Apply(DecodeArgs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Decode over wider heads (kWide: qwen3.5-4b's full-attention blocks,
// qwen3-4b), 32-token pages, split-KV on, the block formats tiled.
// args: shape (index in kWide), context, format (index in kTypes)
void BM_DecodeAttentionWide(benchmark::State& state) {
  const Shape sh = kWide[state.range(0)];
  const int64_t ctx = state.range(1);
  const QType type = kTypes[state.range(2)];
  Setup& s = setup(type, 32, ctx, true, sh);
  const attention::AttnParams p = bench_params(true, sh);
  const std::vector<attention::QueryInfo> queries = {{&s.table, ctx}};
  std::vector<float> q(size_t(sh.heads) * sh.dim), out(q.size());
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  Buffer scratch = aligned_buffer(attention::attention_scratch_bytes(p, 1, kThreads));
  time_layers(state, *s.cache, ctx, sh.layers, [&](int layer) {
    attention::attend(*s.cache, layer, p, queries, q.data(), out.data(), pool(), scratch.get());
    benchmark::DoNotOptimize(out.data());
  });
  state.SetLabel(std::string(qtype_name(type)) + " " + std::to_string(sh.heads) + "/" +
                 std::to_string(sh.heads_kv) + " heads of " + std::to_string(sh.dim));
}
BENCHMARK(BM_DecodeAttentionWide)
    ->ArgsProduct({{0, 1}, {4096, 32768}, {1, 3, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// B sequences decoding together, each at `ctx` tokens with a page table of
// its own: the serving shape of batched decode (issue 20's eight streams of
// a few hundred tokens), where the items are whole sequences and the KV read
// per step is B × ctx rows.
struct BatchSetup {
  std::unique_ptr<kv::KvCache> cache;
  std::vector<kv::PageTable> tables;
};

BatchSetup& batch_setup(QType type, int batch, int64_t ctx) {
  static std::map<std::tuple<QType, int, int64_t>, BatchSetup> cache;
  BatchSetup& s = cache[{type, batch, ctx}];
  if (s.cache) return s;
  kv::KvGeometry g;
  g.n_layer = kLayers;
  g.n_head_kv = kHeadsKv;
  g.head_dim_k = g.head_dim_v = kHeadDim;
  g.k_type = g.v_type = type;
  g.page_tokens = 32;
  auto c = kv::KvCache::create(g, ctx * batch);
  if (!c) std::abort();
  s.cache = std::make_unique<kv::KvCache>(std::move(c.value()));
  s.tables.resize(size_t(batch));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(size_t(kHeadsKv) * kHeadDim), v(k.size());
  // Sequences reserve a page at a time in turn, as decoding streams do, so
  // their pages interleave in the pool.
  for (int64_t pos = 0; pos < ctx; ++pos) {
    for (kv::PageTable& t : s.tables) {
      if (!s.cache->reserve(t, 1)) std::abort();
      for (int layer = 0; layer < kLayers; ++layer) {
        for (float& x : k) x = nd(rng);
        for (float& x : v) x = nd(rng);
        s.cache->store(t, layer, pos, k.data(), v.data());
      }
    }
  }
  return s;
}

// One decode step of B sequences over all kLayers layers.
// args: sequences (B), context of each, format (index in kTypes)
void BM_BatchDecodeAttention(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int64_t ctx = state.range(1);
  const QType type = kTypes[state.range(2)];
  BatchSetup& s = batch_setup(type, batch, ctx);
  const attention::AttnParams p = bench_params(true);
  std::vector<attention::QueryInfo> queries;
  for (const kv::PageTable& t : s.tables) queries.push_back({&t, ctx});
  std::vector<float> q(size_t(batch) * kHeads * kHeadDim), out(q.size());
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  Buffer scratch = aligned_buffer(attention::attention_scratch_bytes(p, batch, kThreads));
  time_layers(state, *s.cache, ctx * batch, kLayers, [&](int layer) {
    attention::attend(*s.cache, layer, p, queries, q.data(), out.data(), pool(), scratch.get());
    benchmark::DoNotOptimize(out.data());
  });
  state.SetLabel(std::string(qtype_name(type)) + " " + std::to_string(batch) + " sequences");
}
BENCHMARK(BM_BatchDecodeAttention)
    ->ArgsProduct({{1, 8, 16}, {256, 1024}, {1, 3}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Times `n` consecutive queries of one sequence at the end of a context of
// `ctx` tokens (causal) over `layers` layers (a prefill chunk, a verify
// block).
void time_query_block(benchmark::State& state, QType type, int64_t ctx, int n, int layers,
                      uint32_t seed, Shape sh = kSmol) {
  Setup& s = setup(type, 32, ctx, true, sh);
  const attention::AttnParams p = bench_params(true, sh);
  std::vector<attention::QueryInfo> queries;
  for (int i = 0; i < n; ++i) queries.push_back({&s.table, ctx - n + i + 1});
  std::vector<float> q(size_t(n) * sh.heads * sh.dim), out(q.size());
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  Buffer scratch = aligned_buffer(attention::attention_scratch_bytes(p, n, kThreads));
  time_layers(state, *s.cache, ctx, layers, [&](int layer) {
    attention::attend(*s.cache, layer, p, queries, q.data(), out.data(), pool(), scratch.get());
    benchmark::DoNotOptimize(out.data());
  });
}

// A prefill chunk at depth: kPrefill consecutive query tokens at the end of
// a context of `ctx` tokens (causal), over kPrefillLayers layers.
// args: context, format (index in kTypes)
constexpr int kPrefill = 512, kPrefillLayers = 2;
void BM_PrefillAttention(benchmark::State& state) {
  const QType type = kTypes[state.range(1)];
  time_query_block(state, type, state.range(0), kPrefill, kPrefillLayers, 3);
  state.SetLabel(std::string(qtype_name(type)) + " prefill " + std::to_string(kPrefill));
}
BENCHMARK(BM_PrefillAttention)
    ->ArgsProduct({{16384}, {0, 1, 2, 3, 4, 5, 6, 7, 8}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// A verify step at depth: the k + 1 queries of one sequence (the last
// drafted token and k drafts) at the end of a context of `ctx` tokens, over
// all kLayers layers: what item 4 of the speculation issue prices (a k = 4
// step against k = 0 is the attention part of the verify-cost curve).
// args: context, format (index in kTypes), queries (k + 1)
void BM_VerifyAttention(benchmark::State& state) {
  const QType type = kTypes[state.range(1)];
  const int n = static_cast<int>(state.range(2));
  time_query_block(state, type, state.range(0), n, kLayers, 4);
  state.SetLabel(std::string(qtype_name(type)) + " verify " + std::to_string(n) + " queries");
}
BENCHMARK(BM_VerifyAttention)
    ->ArgsProduct({{32768}, {1, 3}, {1, 2, 3, 5, 9, 17}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The same over the wider shapes (kWide: qwen3.5-4b's full-attention
// blocks, qwen3-4b's heads), all their layers.
// args: shape (index in kWide), format (index in kTypes), queries (k + 1)
void BM_VerifyAttentionWide(benchmark::State& state) {
  const Shape sh = kWide[state.range(0)];
  const QType type = kTypes[state.range(1)];
  const int n = static_cast<int>(state.range(2));
  time_query_block(state, type, 32768, n, sh.layers, 4, sh);
  state.SetLabel(std::string(qtype_name(type)) + " verify " + std::to_string(n) + " queries, " +
                 std::to_string(sh.heads) + "/" + std::to_string(sh.heads_kv) + " heads of " +
                 std::to_string(sh.dim));
}
BENCHMARK(BM_VerifyAttentionWide)
    ->ArgsProduct({{0, 1}, {1, 3}, {1, 2, 3, 5}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// The same block of queries over K/V that stays in the caches: one layer of
// smollm2's heads at 4096 keys (q8_0: 1.7 MB, half of it a thread: within a
// 1-2 MB L2), called 8 times an iteration, so that an iteration attends
// as many keys as one layer at 32K. What is left is the kernel's own cost,
// arithmetic and overheads, without DRAM's: against BM_VerifyAttention at
// 32K it says how much of a block's time is waiting for K/V (the ratio of
// their ms_per_layer and this one's time). Also per (query row, key) pair and core
// (`ns_per_pair_core`: CPU time of both threads over query rows × keys; ×
// the clock in GHz gives cycles, to hold against the instructions a pair
// needs). At fewer keys a call's fixed cost (the pool's wake-up, the
// queries' conversion, merging the split states) shows in the figure.
// args: context, format (index in kTypes), queries (k + 1)
void BM_VerifyAttentionResident(benchmark::State& state) {
  constexpr Shape kOneLayer{1, kHeads, kHeadsKv, kHeadDim};
  const int64_t kCtx = state.range(0);
  const int kCalls = static_cast<int>(std::max<int64_t>(1, 32768 / kCtx));
  const QType type = kTypes[state.range(1)];
  const int n = static_cast<int>(state.range(2));
  Setup& s = setup(type, 32, kCtx, true, kOneLayer);
  const attention::AttnParams p = bench_params(true, kOneLayer);
  std::vector<attention::QueryInfo> queries;
  for (int i = 0; i < n; ++i) queries.push_back({&s.table, kCtx - n + i + 1});
  std::vector<float> q(size_t(n) * kHeads * kHeadDim), out(q.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  Buffer scratch = aligned_buffer(attention::attention_scratch_bytes(p, n, kThreads));
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    for (int i = 0; i < kCalls; ++i) {
      attention::attend(*s.cache, 0, p, queries, q.data(), out.data(), pool(), scratch.get());
      benchmark::DoNotOptimize(out.data());
    }
  }
  const double cpu = process_cpu_seconds() - cpu0;
  double pairs = 0;  // query rows × the keys each sees
  for (const auto& qi : queries) pairs += double(kHeads) * double(qi.n_visible);
  pairs *= double(kCalls) * double(state.iterations());
  state.counters["ns_per_pair_core"] = 1e9 * cpu / pairs;
  state.SetLabel(std::string(qtype_name(type)) + " verify " + std::to_string(n) +
                 " queries, cache-resident");
}
BENCHMARK(BM_VerifyAttentionResident)
    ->ArgsProduct({{4096}, {1, 3, 4, 8}, {1, 5}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

// Read bandwidth of kThreads threads streaming a 1 GiB buffer: the bound.
void BM_ReadBandwidth(benchmark::State& state) {
  constexpr size_t kBytes = size_t(1) << 30;
  static Buffer buf = [] {
    Buffer b = aligned_buffer(kBytes);
    std::fill(b.get(), b.get() + kBytes, uint8_t(1));
    return b;
  }();
  const auto* words = reinterpret_cast<const uint64_t*>(buf.get());
  const size_t n = kBytes / sizeof(uint64_t);
  std::vector<uint64_t> sums(kThreads);
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    pool().parallel_for(n, [&](size_t b, size_t e, int t) {
      uint64_t s = 0;
      for (size_t i = b; i < e; ++i) s += words[i];
      sums[t] = s;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  const double cpu = process_cpu_seconds() - cpu0;
  state.counters["GBps"] =
      benchmark::Counter(double(kBytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GBps_cpu"] = double(kBytes) * state.iterations() / (cpu / kThreads) / 1e9;
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace
}  // namespace sustain

BENCHMARK_MAIN();

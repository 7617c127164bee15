// Matmul speed: decode (1 token) in GB/s of weight bytes streamed, prefill
// (512 tokens) in GFLOP/s, on the shapes of Llama-3.2-1B's FFN (W[2048, 8192]
// and W[8192, 2048]), beside a read-bandwidth probe taken in the same run
// (PERF.md: only ratios within one run count on these machines).
//
//   bench_matmul --benchmark_filter=Decode   # or Prefill, Batch, ReadBandwidth
//   env SUSTAIN_BENCH_THREADS=2 (default: 2)
//   env SUSTAIN_BENCH_HOT=1: weights from cache (the kernels' arithmetic alone)
//
// Decode cycles through enough copies of the matrix to exceed the L3 cache,
// so weights come from DRAM as they do in a real decode step. So does Batch:
// 1..16 tokens (batched decode of that many sequences, or speculative
// verification of that many drafted tokens), reported in GFLOP/s and in
// microseconds per call, to compare with the 1-token time.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ops.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"
#include "tensor/quant.h"
#include "tensor/row_tiles.h"

namespace sustain::kernels {
namespace {

int bench_threads() {
  const char* env = std::getenv("SUSTAIN_BENCH_THREADS");
  return env ? std::max(1, std::atoi(env)) : 2;
}

ThreadPool& pool() {
  static ThreadPool p(bench_threads());
  return p;
}

// Deterministic pseudo-random floats (speed does not depend on the values).
std::vector<float> noise(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  return v;
}

// n_copies of a W[n_out, n_in] matrix of format t. A few distinct rows are
// quantized with the reference quantizer and tiled over the whole buffer.
struct Weights {
  std::vector<uint8_t> bytes;
  size_t matrix_bytes = 0;
  WeightView view(int copy) const { return views[copy]; }
  std::vector<WeightView> views;
};

Weights make_weights(QType t, int64_t n_out, int64_t n_in, int n_copies) {
  Weights w;
  const size_t row_bytes = qtype_row_bytes(t, static_cast<uint64_t>(n_in));
  w.matrix_bytes = row_bytes * static_cast<size_t>(n_out);
  w.bytes.resize(w.matrix_bytes * static_cast<size_t>(n_copies));
  constexpr int kDistinct = 16;
  std::vector<uint8_t> rows(row_bytes * kDistinct);
  for (int r = 0; r < kDistinct; ++r) {
    const auto f = noise(static_cast<size_t>(n_in), static_cast<uint32_t>(r));
    qtype_traits(t).quantize(f.data(), rows.data() + r * row_bytes, n_in);
  }
  const size_t total_rows = w.bytes.size() / row_bytes;
  for (size_t r = 0; r < total_rows; ++r)
    std::memcpy(w.bytes.data() + r * row_bytes, rows.data() + (r % kDistinct) * row_bytes,
                row_bytes);
  for (int c = 0; c < n_copies; ++c) {
    WeightView v;
    v.type = t;
    v.n_out = n_out;
    v.n_in = n_in;
    v.data = w.bytes.data() + static_cast<size_t>(c) * w.matrix_bytes;
    v.row_bytes = row_bytes;
    w.views.push_back(v);
  }
  return w;
}

// repacked: the weights in row tiles (tensor/row_tiles.h), as `--repack` loads them.
void run(benchmark::State& state, QType t, int64_t n_out, int64_t n_in, int64_t n_tok,
         bool repacked = false) {
  if (repacked && !row_tiles_available(t)) {
    state.SkipWithError("no repacked-weight kernel for this format on this CPU");
    return;
  }
  // Decode: > 128 MiB of weights in rotation, far beyond L3.
  const size_t one = qtype_row_bytes(t, static_cast<uint64_t>(n_in)) * static_cast<size_t>(n_out);
  // SUSTAIN_BENCH_HOT=1: one copy, so the weights stay in cache and the
  // figures are the kernel's arithmetic alone (against which the DRAM
  // figures show how much of a call is waiting for memory).
  const bool hot = std::getenv("SUSTAIN_BENCH_HOT") != nullptr;
  const int copies =
      n_tok <= 16 && !hot ? static_cast<int>(std::max<size_t>(1, (128u << 20) / one + 1)) : 1;
  Weights w = make_weights(t, n_out, n_in, copies);
  std::vector<uint8_t> tiles;
  if (repacked) {
    const size_t tb = row_tiles_bytes(t, n_out, n_in);
    tiles.resize(tb * static_cast<size_t>(copies));
    for (int c = 0; c < copies; ++c)
      w.views[static_cast<size_t>(c)] =
          repack_rows(w.views[static_cast<size_t>(c)], tiles.data() + tb * static_cast<size_t>(c));
    std::vector<uint8_t>().swap(w.bytes);  // only the tiles stay resident
  }
  const auto x = noise(static_cast<size_t>(n_in * n_tok), 99);
  std::vector<float> y(static_cast<size_t>(n_out * n_tok));
  std::vector<uint8_t> scratch(matmul_scratch_bytes(t, n_in, n_tok) + 1);
  int c = 0;
  for (auto _ : state) {
    matmul(w.view(c), x.data(), n_in, n_tok, y.data(), n_out, pool(), scratch.data());
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(one) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(n_out * n_in * n_tok) * iters / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(qtype_name(t)) + (repacked ? " repacked " : " ") +
                 std::to_string(n_out) + "x" + std::to_string(n_in) + " tokens " +
                 std::to_string(n_tok) + " threads " + std::to_string(pool().size()));
}

// Sum of a 256 MiB buffer split over the pool: the DRAM read bandwidth the
// decode figures compare against.
void BM_ReadBandwidth(benchmark::State& state) {
  const size_t n = (256u << 20) / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  for (size_t i = 0; i < n; ++i) buf[i] = i;
  std::atomic<uint64_t> sink{0};
  for (auto _ : state) {
    pool().parallel_for(n, [&](size_t b, size_t e, int) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      sink += s0 + s1 + s2 + s3;
    });
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(n * sizeof(uint64_t)) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);

#define SUSTAIN_MATMUL_BENCH(NAME, T, OUT, IN, TOK) \
  void NAME(benchmark::State& s) {                  \
    run(s, QType::T, OUT, IN, TOK);                 \
  }                                                 \
  BENCHMARK(NAME)->UseRealTime()->Unit(benchmark::kMicrosecond)

SUSTAIN_MATMUL_BENCH(BM_Decode_Q4_K_2048x8192, Q4_K, 2048, 8192, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_Q8_0_2048x8192, Q8_0, 2048, 8192, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_Q6_K_2048x8192, Q6_K, 2048, 8192, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_Q5_0_2048x8192, Q5_0, 2048, 8192, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_Q4_0_2048x8192, Q4_0, 2048, 8192, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_F16_2048x8192, F16, 2048, 8192, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_Q4_K_8192x2048, Q4_K, 8192, 2048, 1);
// SmolLM2-135M shapes: small matrices, where per-call costs show.
SUSTAIN_MATMUL_BENCH(BM_Decode_Q5_0_1536x576, Q5_0, 1536, 576, 1);
SUSTAIN_MATMUL_BENCH(BM_Decode_Q8_0_576x576, Q8_0, 576, 576, 1);
SUSTAIN_MATMUL_BENCH(BM_Prefill_Q5_0_1536x576, Q5_0, 1536, 576, 512);
SUSTAIN_MATMUL_BENCH(BM_Prefill_Q4_K_2048x8192, Q4_K, 2048, 8192, 512);
SUSTAIN_MATMUL_BENCH(BM_Prefill_Q8_0_2048x8192, Q8_0, 2048, 8192, 512);
SUSTAIN_MATMUL_BENCH(BM_Prefill_Q6_K_2048x8192, Q6_K, 2048, 8192, 512);
SUSTAIN_MATMUL_BENCH(BM_Prefill_Q4_K_8192x2048, Q4_K, 8192, 2048, 512);
SUSTAIN_MATMUL_BENCH(BM_Prefill_Q5_0_2048x8192, Q5_0, 2048, 8192, 512);
SUSTAIN_MATMUL_BENCH(BM_Prefill_F16_2048x8192, F16, 2048, 8192, 512);

// Small batches: the argument is the number of tokens.
void batch_args(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
  for (int n : {1, 2, 4, 8, 9, 12, 16}) b->Arg(n);
}
#define SUSTAIN_BATCH_BENCH(NAME, T, OUT, IN) \
  void NAME(benchmark::State& s) {            \
    run(s, QType::T, OUT, IN, s.range(0));    \
  }                                           \
  BENCHMARK(NAME)->Apply(batch_args)

SUSTAIN_BATCH_BENCH(BM_Batch_Q4_K_1536x576, Q4_K, 1536, 576);
SUSTAIN_BATCH_BENCH(BM_Batch_Q4_K_576x1536, Q4_K, 576, 1536);
SUSTAIN_BATCH_BENCH(BM_Batch_Q4_K_2048x8192, Q4_K, 2048, 8192);
SUSTAIN_BATCH_BENCH(BM_Batch_Q4_K_8192x2048, Q4_K, 8192, 2048);
SUSTAIN_BATCH_BENCH(BM_Batch_Q6_K_1536x576, Q6_K, 1536, 576);
SUSTAIN_BATCH_BENCH(BM_Batch_Q6_K_576x1536, Q6_K, 576, 1536);
SUSTAIN_BATCH_BENCH(BM_Batch_Q6_K_2048x8192, Q6_K, 2048, 8192);
SUSTAIN_BATCH_BENCH(BM_Batch_Q6_K_8192x2048, Q6_K, 8192, 2048);
SUSTAIN_BATCH_BENCH(BM_Batch_Q8_0_1536x576, Q8_0, 1536, 576);
SUSTAIN_BATCH_BENCH(BM_Batch_Q5_0_1536x576, Q5_0, 1536, 576);
SUSTAIN_BATCH_BENCH(BM_Batch_Q8_0_2048x8192, Q8_0, 2048, 8192);
SUSTAIN_BATCH_BENCH(BM_Batch_Q4_0_2048x8192, Q4_0, 2048, 8192);

// The same with the weights repacked at load (`--repack`, AVX-512 VNNI):
// run beside the rows' figures above, in one process.
#define SUSTAIN_REPACKED_BENCH(NAME, T, OUT, IN) \
  void NAME(benchmark::State& s) {               \
    run(s, QType::T, OUT, IN, s.range(0), true); \
  }                                              \
  BENCHMARK(NAME)->Apply(batch_args)->Arg(24)->Arg(32)->Arg(64)->Arg(512)

SUSTAIN_REPACKED_BENCH(BM_Repacked_Q8_0_1536x576, Q8_0, 1536, 576);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q5_0_1536x576, Q5_0, 1536, 576);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q8_0_2048x8192, Q8_0, 2048, 8192);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q4_0_2048x8192, Q4_0, 2048, 8192);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q4_K_576x1536, Q4_K, 576, 1536);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q4_K_2048x8192, Q4_K, 2048, 8192);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q6_K_576x1536, Q6_K, 576, 1536);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q6_K_2048x8192, Q6_K, 2048, 8192);
SUSTAIN_REPACKED_BENCH(BM_Repacked_Q4_K_8192x2048, Q4_K, 8192, 2048);

// One Q8_0 activation row (the partner of Q8_0 / Q4_0 / Q5_0 weights), as
// every matmul writes per token: the vectorised kernel against the scalar
// code it replaced (tensor/'s quantize_q8_0, then the sums and scales the
// kernels read), one thread, the argument is n_in.
void BM_QuantizeQ8_0Act_Simd(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = noise(static_cast<size_t>(n), 7);
  std::vector<uint8_t> out(cpu::q8_0_row_bytes(n));
  for (auto _ : state) {
    cpu::quantize_q8_0_activation(x.data(), out.data(), n, 16);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_QuantizeQ8_0Act_Simd)->Arg(576)->Arg(2048)->Arg(8192);

void BM_QuantizeQ8_0Act_Scalar(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = noise(static_cast<size_t>(n), 7);
  std::vector<uint8_t> out(cpu::q8_0_row_bytes(n));
  for (auto _ : state) {
    quantize_q8_0(x.data(), out.data(), n);
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(out.data());
    auto* sums = reinterpret_cast<int32_t*>(out.data() + cpu::q8_0_sums_offset(n));
    auto* scales = reinterpret_cast<float*>(out.data() + cpu::q8_0_scales_offset(n));
    auto* lanes = reinterpret_cast<int32_t*>(out.data() + cpu::q8_0_lanesums_offset(n));
    for (int64_t b = 0; b < n / 32; ++b) {
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += blk[b].qs[j];
      sums[b] = sum;
      scales[b] = f16_to_f32(blk[b].d);
    }
    for (int64_t g = 0; g < n / 4; ++g) {
      const int8_t* q = blk[g / 8].qs + 4 * (g % 8);
      lanes[g] = -16 * (q[0] + q[1] + q[2] + q[3]);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_QuantizeQ8_0Act_Scalar)->Arg(576)->Arg(2048)->Arg(8192);

// One Q8_K activation row (the partner of the K-quants): the vectorised
// kernel against tensor/'s scalar quantize_q8_k, one thread, n_in.
void BM_QuantizeQ8_KAct_Simd(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = noise(static_cast<size_t>(n), 7);
  std::vector<uint8_t> out(static_cast<size_t>(n / 256) * sizeof(BlockQ8_K));
  for (auto _ : state) {
    cpu::quantize_q8_k_activation(x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_QuantizeQ8_KAct_Simd)->Arg(1536)->Arg(2560)->Arg(9728);

void BM_QuantizeQ8_KAct_Scalar(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = noise(static_cast<size_t>(n), 7);
  std::vector<uint8_t> out(static_cast<size_t>(n / 256) * sizeof(BlockQ8_K));
  for (auto _ : state) {
    quantize_q8_k(x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_QuantizeQ8_KAct_Scalar)->Arg(1536)->Arg(2560)->Arg(9728);

}  // namespace
}  // namespace sustain::kernels

BENCHMARK_MAIN();

// Sustained read bandwidth and peak f32 FMA throughput (Highway, dynamic
// dispatch, so the loads and FMAs are the widest this CPU has — what the
// kernels use too).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/bandwidth.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// XORs every 64-bit word of [p, p + n_words) into 8 independent vector
// accumulators (integer ops: no FP latency chain limits the load rate).
uint64_t ReadSweep(const uint64_t* HWY_RESTRICT p, size_t n_words) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
  size_t i = 0;
  for (; i + 8 * N <= n_words; i += 8 * N) {
    a0 = hn::Xor(a0, hn::Load(d, p + i));
    a1 = hn::Xor(a1, hn::Load(d, p + i + N));
    a2 = hn::Xor(a2, hn::Load(d, p + i + 2 * N));
    a3 = hn::Xor(a3, hn::Load(d, p + i + 3 * N));
    a4 = hn::Xor(a4, hn::Load(d, p + i + 4 * N));
    a5 = hn::Xor(a5, hn::Load(d, p + i + 5 * N));
    a6 = hn::Xor(a6, hn::Load(d, p + i + 6 * N));
    a7 = hn::Xor(a7, hn::Load(d, p + i + 7 * N));
  }
  a0 =
      hn::Xor(hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3)), hn::Xor(hn::Xor(a4, a5), hn::Xor(a6, a7)));
  uint64_t r = 0;
  for (size_t k = 0; k < N; ++k) r ^= hn::ExtractLane(a0, k);
  for (; i < n_words; ++i) r ^= p[i];
  return r;
}

// `iters` rounds of 12 independent FMA chains; returns the f32 FMAs done
// (lanes × chains × iters) and writes a value that depends on all of them.
uint64_t FmaBurst(uint64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999999f), a = hn::Set(d, 1e-7f);
  auto c0 = hn::Set(d, 1.0f), c1 = hn::Set(d, 1.1f), c2 = hn::Set(d, 1.2f), c3 = hn::Set(d, 1.3f),
       c4 = hn::Set(d, 1.4f), c5 = hn::Set(d, 1.5f), c6 = hn::Set(d, 1.6f), c7 = hn::Set(d, 1.7f),
       c8 = hn::Set(d, 1.8f), c9 = hn::Set(d, 1.9f), c10 = hn::Set(d, 2.0f), c11 = hn::Set(d, 2.1f);
  for (uint64_t i = 0; i < iters; ++i) {
    c0 = hn::MulAdd(c0, m, a);
    c1 = hn::MulAdd(c1, m, a);
    c2 = hn::MulAdd(c2, m, a);
    c3 = hn::MulAdd(c3, m, a);
    c4 = hn::MulAdd(c4, m, a);
    c5 = hn::MulAdd(c5, m, a);
    c6 = hn::MulAdd(c6, m, a);
    c7 = hn::MulAdd(c7, m, a);
    c8 = hn::MulAdd(c8, m, a);
    c9 = hn::MulAdd(c9, m, a);
    c10 = hn::MulAdd(c10, m, a);
    c11 = hn::MulAdd(c11, m, a);
  }
  auto s =
      hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7)));
  s = hn::Add(s, hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return static_cast<uint64_t>(hn::Lanes(d)) * 12 * iters;
}

}  // namespace sustain::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <sys/mman.h>

#include "base/thread_pool.h"
#include "bench/bandwidth.h"
#include "bench/stats.h"

namespace sustain::bench {
HWY_EXPORT(ReadSweep);
HWY_EXPORT(FmaBurst);

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Expected<BandwidthResult> measure_bandwidth(int threads, size_t buffer_bytes, int reps) {
  constexpr size_t kMinBytes = size_t(64) << 20;
  if (threads < 1)
    return error(Code::kInvalidArgument, "bandwidth: threads={} (need >= 1)", threads);
  if (buffer_bytes < kMinBytes)
    return error(Code::kInvalidArgument,
                 "bandwidth: buffer of {} bytes is under 64 MiB ({} bytes): it would fit in "
                 "cache and measure the cache, not memory",
                 buffer_bytes, kMinBytes);
  if (reps < 1) return error(Code::kInvalidArgument, "bandwidth: reps={} (need >= 1)", reps);
  // Each thread sweeps its own slice, a whole number of 4 KiB pages.
  const size_t slice = (buffer_bytes / threads) & ~size_t(4095);
  const size_t total = slice * threads;
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    return error(Code::kOutOfMemory, "bandwidth: cannot allocate a {} byte buffer", total);
  auto* base = static_cast<uint8_t*>(mem);
  ThreadPool pool(threads);
  // First touch by the thread that reads the slice (its NUMA node), with
  // non-zero data so no zero-page trick can short-circuit the reads.
  pool.run_on_all([&](int t) {
    auto* p = reinterpret_cast<uint64_t*>(base + slice * t);
    for (size_t i = 0; i < slice / 8; ++i) p[i] = 0x9E3779B97F4A7C15ull * (i + 1 + t);
  });
  BandwidthResult r;
  r.threads = threads;
  r.buffer_bytes = total;
  std::vector<uint64_t> sink(threads);
  // One untimed sweep brings the TLB and the pages' mappings into steady state.
  for (int rep = -1; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run_on_all([&](int t) {
      sink[t] ^= HWY_DYNAMIC_DISPATCH(ReadSweep)(
          reinterpret_cast<const uint64_t*>(base + slice * t), slice / 8);
    });
    const double s = seconds_since(t0);
    if (rep >= 0 && s > 0) r.read_gbps.push_back(static_cast<double>(total) / s / 1e9);
  }
  munmap(mem, total);
  // Sized to run ~50 ms per rep on a current core; the figure is a rate, so the
  // exact duration does not matter.
  constexpr uint64_t kIters = uint64_t(1) << 23;
  std::vector<float> fsink(threads);
  std::vector<uint64_t> fmas(threads);
  for (int rep = -1; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run_on_all([&](int t) { fmas[t] = HWY_DYNAMIC_DISPATCH(FmaBurst)(kIters, &fsink[t]); });
    const double s = seconds_since(t0);
    uint64_t n = 0;
    for (uint64_t f : fmas) n += f;
    if (rep >= 0 && s > 0) r.fma_gflops.push_back(2.0 * static_cast<double>(n) / s / 1e9);
  }
  // The sinks feed a value nobody reads but the compiler cannot prove that.
  uint64_t keep = 0;
  for (uint64_t v : sink) keep ^= v;
  for (float f : fsink) keep ^= static_cast<uint64_t>(f);
  asm volatile("" : : "r"(keep));
  const Summary bw = summarize(r.read_gbps), fl = summarize(r.fma_gflops);
  r.read_gbps_best = bw.max;
  r.read_gbps_median = bw.p50;
  r.fma_gflops_best = fl.max;
  r.fma_gflops_median = fl.p50;
  return r;
}

}  // namespace sustain::bench
#endif  // HWY_ONCE

// Helpers shared by the quantization tests: deterministic test vectors,
// error measures, and quantize/dequantize through the format table.
//
// The generator is our own (splitmix64 + Box-Muller) rather than
// std::normal_distribution, whose output differs between standard libraries;
// a failing case must reproduce on every platform from its seed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "tensor/qtype.h"

namespace sustain::test {

// splitmix64: tiny, well-mixed, and identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t next_u32() { return static_cast<uint32_t>(next_u64() >> 32); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal (Box-Muller; one value per call keeps the sequence simple).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// n values ~ N(0, scale^2).
inline std::vector<float> random_normal(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

// n values ~ U[lo, hi).
inline std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

// Like random_normal, but a fraction `outlier_frac` of the values (at random
// positions, random sign) are multiplied by `outlier_gain` — the shape of real
// weight rows, where a few channels dwarf the rest and set the block scale.
inline std::vector<float> random_with_outliers(size_t n, uint64_t seed, float scale = 1.0f,
                                               double outlier_frac = 0.01,
                                               float outlier_gain = 20.0f) {
  std::vector<float> v = random_normal(n, seed, scale);
  Rng rng(seed ^ 0x5eed0011ull);
  for (auto& x : v)
    if (rng.uniform() < outlier_frac) x *= outlier_gain;
  return v;
}

// Root mean square of a, and of a - b; accumulated in double.
inline double rms(const float* a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * a[i];
  return n ? std::sqrt(s / static_cast<double>(n)) : 0.0;
}
inline double rmse(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return n ? std::sqrt(s / static_cast<double>(n)) : 0.0;
}
inline double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return rmse(a.data(), b.data(), std::min(a.size(), b.size()));
}
// rmse(approx, ref) / rms(ref): scale-free, so one bound per format serves any tensor.
inline double relative_rmse(const float* approx, const float* ref, size_t n) {
  const double r = rms(ref, n);
  return r > 0 ? rmse(approx, ref, n) / r : rmse(approx, ref, n);
}
inline double relative_rmse(const std::vector<float>& approx, const std::vector<float>& ref) {
  EXPECT_EQ(approx.size(), ref.size());
  return relative_rmse(approx.data(), ref.data(), std::min(approx.size(), ref.size()));
}

inline float max_abs(const float* a, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
  return m;
}

// Quantize / dequantize through the table, so a test exercises the same
// entry points the engine uses. x.size() must be a multiple of the block size.
inline std::vector<uint8_t> quantize(QType t, const std::vector<float>& x) {
  const auto& tr = qtype_traits(t);
  EXPECT_NE(tr.quantize, nullptr) << tr.name;
  EXPECT_EQ(x.size() % tr.block_elems, 0u) << tr.name;
  std::vector<uint8_t> q(qtype_row_bytes(t, x.size()));
  if (tr.quantize != nullptr) tr.quantize(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}
inline std::vector<float> dequantize(QType t, const std::vector<uint8_t>& q, size_t n) {
  const auto& tr = qtype_traits(t);
  EXPECT_NE(tr.dequantize, nullptr) << tr.name;
  EXPECT_EQ(q.size(), qtype_row_bytes(t, n)) << tr.name;
  std::vector<float> y(n);
  if (tr.dequantize != nullptr) tr.dequantize(q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}
inline std::vector<float> round_trip(QType t, const std::vector<float>& x) {
  return dequantize(t, quantize(t, x), x.size());
}

}  // namespace sustain::test

// The encoder's own operations against plain double-precision loops.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "base/splitmix.h"
#include "tensor/fp16.h"
#include "vision/vit_ops.h"

namespace sustain::vision {
namespace {

std::vector<float> random(size_t n, uint64_t seed) {
  SplitMix64 r{seed};
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.uniform() * 2.0 - 1.0);
  return v;
}

TEST(VisionOps, LayerNormByHand) {
  const float x[4] = {1, 2, 3, 6};  // mean 3, variance (4+1+0+9)/4 = 3.5
  const float w[4] = {1, 2, 1, 1}, b[4] = {0, 0, 1, -1};
  float y[4];
  layer_norm(x, w, b, y, 1, 4, 0.0f);
  const float inv = 1.0f / std::sqrt(3.5f);
  EXPECT_FLOAT_EQ(y[0], -2 * inv);
  EXPECT_FLOAT_EQ(y[1], -2 * inv);
  EXPECT_FLOAT_EQ(y[2], 1.0f);
  EXPECT_FLOAT_EQ(y[3], 3 * inv - 1);
}

TEST(VisionOps, GeluRoundsThroughF16) {
  std::vector<float> x = {-12.0f, -10.0f, -1.0f, 0.0f, 0.3333333f, 1.0f, 2.5f, 9.99f, 10.0f, 50.0f};
  const std::vector<float> in = x;
  gelu_f16_table(x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = in[i];
    const double g = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(x[i], g, 2e-3 * std::max(1.0, std::fabs(g))) << in[i];
    // Inside (-10, 10) every result is an f16 value.
    if (in[i] > -10 && in[i] < 10) {
      EXPECT_EQ(f16_to_f32(f32_to_f16(x[i])), x[i]) << in[i];
    }
  }
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_EQ(x[8], 10.0f);
  EXPECT_EQ(x[9], 50.0f);
}

TEST(VisionOps, FullAttentionMatchesDoubleLoops) {
  ThreadPool pool(2);
  for (int n : {1, 7, 37}) {
    const int heads = 3, hd = 5, width = heads * hd;
    const auto q = random(static_cast<size_t>(n) * width, 1 + n);
    const auto k = random(static_cast<size_t>(n) * width, 2 + n);
    const auto v = random(static_cast<size_t>(n) * width, 3 + n);
    std::vector<float> out(q.size());
    const float scale = 0.7f;
    attention_full(q.data(), k.data(), v.data(), out.data(), n, heads, hd, scale, pool);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < n; ++i) {
        std::vector<double> s(n);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c)
            d += double{q[i * width + h * hd + c]} * k[j * width + h * hd + c];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int c = 0; c < hd; ++c) {
          double o = 0;
          for (int j = 0; j < n; ++j) o += s[j] / sum * v[j * width + h * hd + c];
          // Later rows see earlier and later ones alike: no causal mask.
          EXPECT_NEAR(out[i * width + h * hd + c], o, 1e-5)
              << "n " << n << " h " << h << " i " << i;
        }
      }
  }
}

TEST(VisionOps, AveragePoolByHand) {
  // 4x4 grid, 2 channels: channel 0 = cell index, channel 1 = 1.
  std::vector<float> x(16 * 2);
  for (int i = 0; i < 16; ++i) x[i * 2] = static_cast<float>(i), x[i * 2 + 1] = 1.0f;
  std::vector<float> out(4 * 2);
  avg_pool_grid(x.data(), out.data(), 4, 2, 2);
  // Block (0,0) holds cells 0, 1, 4, 5; (1,0): 2, 3, 6, 7; ...
  EXPECT_FLOAT_EQ(out[0], 2.5f);
  EXPECT_FLOAT_EQ(out[2], 4.5f);
  EXPECT_FLOAT_EQ(out[4], 10.5f);
  EXPECT_FLOAT_EQ(out[6], 12.5f);
  for (int t = 0; t < 4; ++t) EXPECT_FLOAT_EQ(out[t * 2 + 1], 1.0f);
  std::vector<float> same(x.size());
  avg_pool_grid(x.data(), same.data(), 4, 1, 2);
  EXPECT_EQ(same, x);
}

}  // namespace
}  // namespace sustain::vision

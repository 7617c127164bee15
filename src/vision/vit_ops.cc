#include "vision/vit_ops.h"

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "tensor/fp16.h"

namespace sustain::vision {

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n,
                float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float d = xr[i] - mean;
      sq += static_cast<double>(d) * d;
    }
    const float inv = 1.0f / std::sqrt(static_cast<float>(sq / static_cast<double>(n)) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

namespace {

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

// f16 bits → f16 bits of GELU; built once, read-only afterwards.
const std::vector<uint16_t>& gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65536);
    for (uint32_t i = 0; i < 65536; ++i)
      t[i] = f32_to_f16(gelu_tanh(f16_to_f32(static_cast<uint16_t>(i))));
    return t;
  }();
  return table;
}

}  // namespace

void gelu_f16_table(float* x, int64_t n) {
  const auto& t = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] <= -10.0f) {
      x[i] = 0.0f;
    } else if (x[i] < 10.0f) {
      x[i] = f16_to_f32(t[f32_to_f16(x[i])]);
    }
  }
}

void attention_full(const float* q, const float* k, const float* v, float* out, int64_t n,
                    int n_head, int head_dim, float scale, ThreadPool& pool) {
  const int64_t width = static_cast<int64_t>(n_head) * head_dim;
  // Per head: K_h [n][head_dim] and V_hᵀ [head_dim][n], contiguous, so that
  // both products are plain f32 matmuls (scores = Q_h·K_hᵀ, out = P·V_h).
  std::vector<float> kh(static_cast<size_t>(n) * head_dim), vt(static_cast<size_t>(n) * head_dim);
  std::vector<float> scores(static_cast<size_t>(n) * n);
  std::vector<float> oh(static_cast<size_t>(n) * head_dim);
  kernels::WeightView kw{QType::F32, n, head_dim, kh.data(), sizeof(float) * head_dim};
  kernels::WeightView vw{QType::F32, head_dim, n, vt.data(), sizeof(float) * n};
  std::vector<uint8_t> scratch(std::max(kernels::matmul_scratch_bytes(QType::F32, head_dim, n),
                                        kernels::matmul_scratch_bytes(QType::F32, n, n)));
  for (int h = 0; h < n_head; ++h) {
    const int64_t c0 = static_cast<int64_t>(h) * head_dim;
    for (int64_t j = 0; j < n; ++j)
      for (int d = 0; d < head_dim; ++d) {
        kh[j * head_dim + d] = k[j * width + c0 + d];
        vt[d * n + j] = v[j * width + c0 + d];
      }
    kernels::matmul(kw, q + c0, width, n, scores.data(), n, pool, scratch.data());
    pool.parallel_for(static_cast<size_t>(n), [&](size_t r0, size_t r1, int) {
      for (size_t r = r0; r < r1; ++r) {
        float* s = scores.data() + r * n;
        for (int64_t j = 0; j < n; ++j) s[j] *= scale;
        kernels::softmax(s, n);
      }
    });
    kernels::matmul(vw, scores.data(), n, n, oh.data(), head_dim, pool, scratch.data());
    for (int64_t i = 0; i < n; ++i)
      for (int d = 0; d < head_dim; ++d) out[i * width + c0 + d] = oh[i * head_dim + d];
  }
}

void avg_pool_grid(const float* x, float* out, int side, int k, int64_t c) {
  const int out_side = side / k;
  const float area = static_cast<float>(k * k);
  for (int oy = 0; oy < out_side; ++oy)
    for (int ox = 0; ox < out_side; ++ox) {
      float* o = out + (static_cast<int64_t>(oy) * out_side + ox) * c;
      for (int64_t ch = 0; ch < c; ++ch) o[ch] = 0.0f;
      for (int ky = 0; ky < k; ++ky)
        for (int kx = 0; kx < k; ++kx) {
          const float* xr = x + (static_cast<int64_t>(oy * k + ky) * side + ox * k + kx) * c;
          for (int64_t ch = 0; ch < c; ++ch) o[ch] += xr[ch];
        }
      for (int64_t ch = 0; ch < c; ++ch) o[ch] /= area;
    }
}

}  // namespace sustain::vision

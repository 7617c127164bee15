// Reference elementwise ops (see ref.h). Sums that llama.cpp keeps in double
// (rms_norm's sum of squares, softmax's sum of exponentials) are double here.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"
#include "kernels/ref.h"
#include "tensor/row_tiles.h"

namespace sustain::kernels::ref {

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

namespace {

// YaRN's correction range: the dimension at which a wavelength spans
// n_rot full turns over the original context (llama.cpp's corr_dim).
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2 * static_cast<float>(M_PI))) /
         (2 * std::log(base));
}

}  // namespace

void rope_cache(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out) {
  const int n_dims = p.rope_dim;
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n_dims));
  float corr0 = 0, corr1 = 0;
  if (p.ext_factor != 0.0f) {
    const float start = std::floor(yarn_corr_dim(n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
    const float end = std::ceil(yarn_corr_dim(n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
    corr0 = std::max(0.0f, start);
    corr1 = std::min(static_cast<float>(n_dims - 1), end);
  }
  // theta is advanced by repeated multiplication, as llama.cpp does, so the
  // angles agree with it to the last bit.
  float theta = static_cast<float>(pos);
  for (int i = 0; i < n_dims / 2; ++i) {
    const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
    const float theta_extrap = theta / ff;
    const float theta_interp = p.freq_scale * theta_extrap;
    float t = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - corr0) / std::max(0.001f, corr1 - corr0);
      const float ramp = (1 - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      t = theta_interp * (1 - ramp) + theta_extrap * ramp;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    cos_out[i] = std::cos(t) * mscale;
    sin_out[i] = std::sin(t) * mscale;
    theta *= theta_scale;
  }
}

void rope(float* x, int n_heads, int64_t pos, const RopeParams& p) {
  SUSTAIN_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim);
  const int half = p.rope_dim / 2;
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  rope_cache(pos, p, c.data(), s.data());
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * p.head_dim;
    for (int i = 0; i < half; ++i) {
      // Normal RoPE rotates adjacent pairs; NeoX pairs element i with i + rope_dim/2.
      const int i0 = p.neox ? i : 2 * i;
      const int i1 = p.neox ? i + half : 2 * i + 1;
      const float x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * c[i] - x1 * s[i];
      v[i1] = x0 * s[i] + x1 * c[i];
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double x = gate[i];
    out[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))) * up[i]);
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* y, const float* b, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) add(y + r * n, b, n);
}

void softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void exp_weights(const float* x, float t, float m, float* w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float q = x[i] / t;
    const float v = q - m;  // rounded as the fast kernel rounds it; exp in double
    w[i] = q == m        ? 1.0f
           : v >= -87.0f ? static_cast<float>(std::exp(static_cast<double>(v)))
                         : 0.0f;
  }
}

void get_row(const WeightView& w, int64_t row, float* out) {
  const auto& tr = qtype_traits(w.type);
  SUSTAIN_CHECK(tr.dequantize != nullptr && row >= 0 && row < w.n_out);
  if (w.tiled) {
    std::vector<uint8_t> r(w.row_bytes);
    from_row_tiles(w.type, w.data, w.n_in, row, r.data());
    tr.dequantize(r.data(), out, w.n_in);
    return;
  }
  tr.dequantize(static_cast<const uint8_t*>(w.data) + row * w.row_bytes, out, w.n_in);
}

}  // namespace sustain::kernels::ref

// ops.h entry points other than matmul (matmul.cc): thin wrappers over the
// dispatched kernels in cpu/.
#include <cstring>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ops.h"
#include "kernels/ref.h"
#include "tensor/row_tiles.h"

namespace sustain::kernels {

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  cpu::rms_norm(x, weight, y, n, eps);
}

void rope(float* x, int n_heads, int64_t pos, const RopeParams& p) {
  SUSTAIN_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim);
  // The angles are computed once per call and shared by all heads; the
  // reference's function computes them so both paths rotate identically.
  constexpr int kMaxPairs = 512;
  const int half = p.rope_dim / 2;
  float cs_buf[kMaxPairs], sn_buf[kMaxPairs];
  std::vector<float> heap;
  float* cs = cs_buf;
  float* sn = sn_buf;
  if (half > kMaxPairs) {
    heap.resize(2 * static_cast<size_t>(half));
    cs = heap.data();
    sn = heap.data() + half;
  }
  ref::rope_cache(pos, p, cs, sn);
  cpu::rope_apply(x, n_heads, p.head_dim, p.rope_dim, p.neox, cs, sn);
}

void rope_angles(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out) {
  ref::rope_cache(pos, p, cos_out, sin_out);
}

void rope_rotate(float* x, int n_heads, const RopeParams& p, const float* cos, const float* sin) {
  SUSTAIN_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim);
  cpu::rope_apply(x, n_heads, p.head_dim, p.rope_dim, p.neox, cos, sin);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::swiglu(gate, up, out, n);
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::geglu(gate, up, out, n);
}

void add(float* y, const float* x, int64_t n) {
  cpu::add(y, x, n);
}

void add_bias(float* y, const float* b, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) cpu::add(y + r * n, b, n);
}

void to_f16(const float* x, void* y, int64_t n) {
  cpu::to_f16(x, static_cast<uint16_t*>(y), n);
}

void softmax(float* x, int64_t n) {
  cpu::softmax(x, n);
}

void exp_weights(const float* x, float t, float m, float* w, int64_t n) {
  cpu::exp_weights(x, t, m, w, n);
}

void get_row(const WeightView& w, int64_t row, float* out) {
  if (w.tiled) {
    // A repacked embedding (a tied output matrix): the row back in row layout
    // (row_bytes is at most a few KiB), then as below.
    SUSTAIN_CHECK(row >= 0 && row < w.n_out);
    thread_local std::vector<uint8_t> buf;
    buf.resize(w.row_bytes);
    from_row_tiles(w.type, w.data, w.n_in, row, buf.data());
    qtype_traits(w.type).dequantize(buf.data(), out, w.n_in);
    return;
  }
  const auto* src = static_cast<const uint8_t*>(w.data) + row * w.row_bytes;
  if (w.type == QType::F32) {
    std::memcpy(out, src, static_cast<size_t>(w.n_in) * sizeof(float));
    return;
  }
  const auto& tr = qtype_traits(w.type);
  SUSTAIN_CHECK(tr.dequantize != nullptr && row >= 0 && row < w.n_out);
  tr.dequantize(src, out, w.n_in);
}

}  // namespace sustain::kernels

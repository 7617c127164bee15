// Matmul kernels for float weights (F32, F16, BF16) and for the formats
// llama.cpp has no integer dot for (Q8_1, Q8_K, FP8 as weights), which are
// dequantized a chunk at a time and dotted in f32.
//
// Activations are f32: x itself for F32 and the dequantized formats; for
// F16 / BF16, x rounded through the weight's format by the driver (products
// of two f16 or bf16 values are exact in f32, as in llama.cpp's f16 dot).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/cpu/kernels.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kMaxTokensF = 4;

template <class T, class D>
HWY_INLINE hn::Vec<D> load_as_f32(D df, const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else {
    return hn::PromoteTo(df, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

inline float scalar_f32(float v) {
  return v;
}
inline float scalar_f32(hwy::float16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, 2);
  return f16_to_f32(bits);
}
inline float scalar_f32(hwy::bfloat16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, 2);
  return bf16_to_f32(bits);
}

// out[t] (+)= w[0..n) . act[t][0..n), two accumulators per token to hide FMA latency.
template <int NT, class T>
HWY_INLINE void dot_rows(const T* HWY_RESTRICT w, const float* const* act, int64_t n, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<decltype(df)> acc0[NT], acc1[NT];
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto w0 = load_as_f32(df, w + i);
    const auto w1 = load_as_f32(df, w + i + N);
    for (int t = 0; t < NT; ++t) {
      acc0[t] = hn::MulAdd(w0, hn::LoadU(df, act[t] + i), acc0[t]);
      acc1[t] = hn::MulAdd(w1, hn::LoadU(df, act[t] + i + N), acc1[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[t], acc1[t])));
    for (int64_t j = i; j < n; ++j) s += scalar_f32(w[j]) * act[t][j];
    out[t] += s;
  }
}

// out[t] += dot over elements [k0, k0 + len) of row w.
template <int NT>
void dot_row(const MatmulArgs& a, const uint8_t* w, const float* const* act, int64_t k0,
             int64_t len, float* out) {
  const float* sub[NT];
  for (int t = 0; t < NT; ++t) sub[t] = act[t] + k0;
  switch (a.type) {
    case QType::F32:
      dot_rows<NT>(reinterpret_cast<const float*>(w) + k0, sub, len, out);
      return;
    case QType::F16:
      dot_rows<NT>(reinterpret_cast<const hwy::float16_t*>(w) + k0, sub, len, out);
      return;
    case QType::BF16:
      dot_rows<NT>(reinterpret_cast<const hwy::bfloat16_t*>(w) + k0, sub, len, out);
      return;
    default:
      break;
  }
  // Dequantize a piece (a multiple of every block size) at a time.
  constexpr int64_t kPiece = 256;
  const auto& tr = qtype_traits(a.type);
  HWY_ALIGN float buf[kPiece];
  const int64_t block_bytes = tr.block_bytes, block_elems = tr.block_elems;
  for (int64_t i = 0; i < len; i += kPiece) {
    const int64_t n = std::min(kPiece, len - i);
    tr.dequantize(w + (k0 + i) / block_elems * block_bytes, buf, n);
    const float* piece[NT];
    for (int t = 0; t < NT; ++t) piece[t] = sub[t] + i;
    dot_rows<NT>(buf, piece, n, out);
  }
}

// The rows x tokens tile is walked in slices of kSlice elements, so the f32
// activations of a token group (4 x 4 KiB) stay in L1 while the tile's rows
// stream past; partial sums accumulate in y.
constexpr int64_t kSlice = 1024;

void TileFloat(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t k0 = 0; k0 < a.n_in; k0 += kSlice) {
    const int64_t len = std::min(kSlice, a.n_in - k0);
    for (int64_t t = t0; t < t1; t += kMaxTokensF) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTokensF, t1 - t));
      const float* act[kMaxTokensF];
      for (int i = 0; i < kMaxTokensF; ++i)
        act[i] = reinterpret_cast<const float*>(
            a.act + static_cast<size_t>(t + std::min(i, nt - 1)) * a.act_stride);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* w = a.w + static_cast<size_t>(r) * a.w_stride;
        float out[kMaxTokensF] = {};
        switch (nt) {
          case 4:
            dot_row<4>(a, w, act, k0, len, out);
            break;
          case 3:
            dot_row<3>(a, w, act, k0, len, out);
            break;
          case 2:
            dot_row<2>(a, w, act, k0, len, out);
            break;
          default:
            dot_row<1>(a, w, act, k0, len, out);
            break;
        }
        for (int i = 0; i < nt; ++i) {
          float& y = a.y[(t + i) * a.ldy + r];
          y = k0 == 0 ? out[i] : y + out[i];
        }
      }
    }
  }
}

}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sustain::kernels::cpu {

HWY_EXPORT(TileFloat);

TileFn float_tile(QType t) {
  const QTypeTraits* tr = find_qtype(static_cast<uint32_t>(t));
  if (tr == nullptr || tr->dequantize == nullptr) return nullptr;
  return &HWY_DYNAMIC_DISPATCH(TileFloat);
}

}  // namespace sustain::kernels::cpu
#endif  // HWY_ONCE

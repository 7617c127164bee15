// Elementwise ops (Highway, dynamic dispatch). None of these is a bottleneck;
// they are vectorised because it costs a few lines, and the sums that
// llama.cpp keeps in double are kept in f32 vector lanes here (tests bound the
// difference).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <cstring>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/cpu/kernels.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    acc = hn::MulAdd(v, v, acc);
  }
  double sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
  const auto vs = hn::Set(d, scale);
  for (i = 0; i + N <= n; i += N) {
    auto v = hn::Mul(hn::LoadU(d, x + i), vs);
    if (weight) v = hn::Mul(v, hn::LoadU(d, weight + i));
    hn::StoreU(v, d, y + i);
  }
  for (; i < n; ++i) y[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

// Runs block(src..., dst) over whole vectors of [0, n), and over the tail
// on a zero-padded copy: the tail gets the same vector code, so an
// element's value depends on nothing but its inputs, wherever it sits. The
// gated units run over every row of a step at once (T x n_ff elements);
// with a scalar tail, the last elements of the last rows (n_ff not a
// multiple of the vector) were rounded by std::exp instead, and a token's
// result depended on what else was in its step (batch invariance,
// base/batch_invariant.h).
template <class D, class Block>
HWY_INLINE void each_vector_padded(D d, const float* a, const float* b, float* out, int64_t n,
                                   Block block) {
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) block(a + i, b + i, out + i);
  if (i < n) {
    HWY_ALIGN float pa[hn::MaxLanes(d)] = {}, pb[hn::MaxLanes(d)] = {}, po[hn::MaxLanes(d)];
    const auto bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(pa, a + i, bytes);
    std::memcpy(pb, b + i, bytes);
    block(pa, pb, po);
    std::memcpy(out + i, po, bytes);
  }
}

void Swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto one = hn::Set(d, 1.0f);
  // exp(-g) overflows (and leaves Exp's valid range) below g = -88; silu is 0 there anyway.
  const auto lim = hn::Set(d, 88.0f);
  each_vector_padded(d, gate, up, out, n, [&](const float* g_p, const float* u_p, float* o_p) {
    const auto g = hn::LoadU(d, g_p);
    const auto e = hn::Exp(d, hn::Min(hn::Neg(g), lim));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, u_p)), d, o_p);
  });
}

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3):
// one Exp and a division, like Swiglu.
void Geglu(const float* gate, const float* up, float* out, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto one = hn::Set(d, 1.0f);
  const auto c1 = hn::Set(d, -2.0f * 0.7978845608028654f);
  const auto c3 = hn::Set(d, -2.0f * 0.7978845608028654f * 0.044715f);
  const auto lim = hn::Set(d, 88.0f);  // Exp's range; the product is 0 there anyway
  each_vector_padded(d, gate, up, out, n, [&](const float* g_p, const float* u_p, float* o_p) {
    const auto x = hn::LoadU(d, g_p);
    const auto x2 = hn::Mul(x, x);
    const auto t = hn::Mul(x, hn::MulAdd(c3, x2, c1));  // -2u
    const auto e = hn::Exp(d, hn::Min(t, lim));
    hn::StoreU(hn::Mul(hn::Div(x, hn::Add(one, e)), hn::LoadU(d, u_p)), d, o_p);
  });
}

void Add(float* y, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] += x[i];
}

void Softmax(float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  const auto vmax = hn::Set(d, max);
  // Below -87.3 exp underflows to (sub)normal dust; -inf (masked) must give 0.
  const auto low = hn::Set(d, -87.0f);
  auto acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::Sub(hn::LoadU(d, x + i), vmax);
    const auto e = hn::IfThenZeroElse(hn::Lt(v, low), hn::Exp(d, hn::Max(v, low)));
    hn::StoreU(e, d, x + i);
    acc = hn::Add(acc, e);
  }
  double sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const auto inv = hn::Set(d, static_cast<float>(1.0 / sum));
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), inv), d, x + i);
  for (; i < n; ++i) x[i] *= static_cast<float>(1.0 / sum);
}

// w[i] = 1 where x[i] / t == m, else exp(x[i] / t - m), and 0 below -87
// (where exp leaves float's normal range) or where that is undefined (NaN).
// Each element's value depends on nothing but x[i], t and m: the tail runs
// the same vector code on a padded copy, so a caller may split an array into
// pieces at any points and get the same bits.
void ExpWeights(const float* x, float t, float m, float* w, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  const auto vt = hn::Set(d, t), vm = hn::Set(d, m);
  const auto low = hn::Set(d, -87.0f), one = hn::Set(d, 1.0f);
  auto block = [&](const float* src, float* dst) {
    const auto q = hn::Div(hn::LoadU(d, src), vt);
    const auto v = hn::Sub(q, vm);
    // Ge is false for NaN; Max keeps Exp's argument in its valid range.
    const auto e = hn::IfThenElseZero(hn::Ge(v, low), hn::Exp(d, hn::Max(v, low)));
    hn::StoreU(hn::IfThenElse(hn::Eq(q, vm), one, e), d, dst);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) block(x + i, w + i);
  if (i < n) {
    HWY_ALIGN float in[hn::MaxLanes(d)] = {}, out[hn::MaxLanes(d)];
    std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(float));
    block(in, out);
    std::memcpy(w + i, out, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// Rotates each head by the precomputed (cos, sin) of its rope_dim/2 pairs.
void RopeApply(float* x, int n_heads, int head_dim, int rope_dim, bool neox, const float* cs,
               const float* sn) {
  const int half = rope_dim / 2;
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    int i = 0;
    if (neox) {
      // Pairs (i, i + half): both halves are contiguous, so this vectorises directly.
      for (; i + N <= half; i += N) {
        const auto x0 = hn::LoadU(d, v + i), x1 = hn::LoadU(d, v + i + half);
        const auto c = hn::LoadU(d, cs + i), s = hn::LoadU(d, sn + i);
        hn::StoreU(hn::NegMulAdd(x1, s, hn::Mul(x0, c)), d, v + i);
        hn::StoreU(hn::MulAdd(x0, s, hn::Mul(x1, c)), d, v + i + half);
      }
    }
    for (; i < half; ++i) {
      const int i0 = neox ? i : 2 * i;
      const int i1 = neox ? i + half : 2 * i + 1;
      const float x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * cs[i] - x1 * sn[i];
      v[i1] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

// One activation row in the Q8_0 layout of kernels.h, bit for bit what
// tensor/'s quantize_q8_0 and the driver's sums give: d = amax / 127 per
// block of 32, codes round(x / d) with C roundf's halves away from zero,
// clamped to ±127, 0 where x / d is not a finite value below 2^31. A block
// holding a NaN goes to the scalar code, whose amax depends on where the NaN
// sits.
void QuantizeQ8_0Act(const float* x, uint8_t* out, int64_t n_in, int code_offset) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  auto* blocks = reinterpret_cast<BlockQ8_0*>(out);
  auto* sums = reinterpret_cast<int32_t*>(out + q8_0_sums_offset(n_in));
  auto* scales = reinterpret_cast<float*>(out + q8_0_scales_offset(n_in));
  const auto half = hn::Set(d, 0.5f);
  const auto one = hn::Set(d, 1.0f);
  const auto lim = hn::Set(d, 127.0f);
  const auto big = hn::Set(d, 0x1p31f);
  auto* lanes = reinterpret_cast<int32_t*>(out + q8_0_lanesums_offset(n_in));
  for (int64_t b = 0; b < n_in / kQK; ++b) {
    const float* xb = x + b * kQK;
    BlockQ8_0& blk = blocks[b];
    bool scalar = N > kQK || kQK % N != 0;
    auto codes_sum = hn::Zero(d);  // the block's codes as floats: an exact integer sum
    auto amax = hn::Zero(d);
    for (int64_t j = 0; !scalar && j < kQK; j += N) {
      const auto v = hn::LoadU(d, xb + j);
      if (!hn::AllFalse(d, hn::IsNaN(v))) scalar = true;
      amax = hn::Max(amax, hn::Abs(v));
    }
    if (scalar) {
      quantize_q8_0(xb, &blk, kQK);
    } else {
      const float dq = hn::GetLane(hn::MaxOfLanes(d, amax)) / 127.0f;
      const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
      blk.d = f32_to_f16(dq);
      const auto vid = hn::Set(d, id);
      for (int64_t j = 0; j < kQK; j += N) {
        const auto v = hn::Mul(hn::LoadU(d, xb + j), vid);
        const auto t = hn::Trunc(v);
        auto r = hn::IfThenElse(hn::Ge(hn::Abs(hn::Sub(v, t)), half),
                                hn::Add(t, hn::CopySign(one, v)), t);
        r = hn::Min(hn::Max(r, hn::Neg(lim)), lim);
        r = hn::IfThenElseZero(hn::Lt(hn::Abs(v), big), r);
        codes_sum = hn::Add(codes_sum, r);
        hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, blk.qs + j);
      }
    }
    if (scalar) {
      int32_t s = 0;
      for (int j = 0; j < kQK; ++j) s += blk.qs[j];
      sums[b] = s;
    } else {
      sums[b] = static_cast<int32_t>(hn::GetLane(hn::SumOfLanes(d, codes_sum)));
    }
    scales[b] = f16_to_f32(blk.d);
    if (code_offset == 0) continue;
    int32_t* lane = lanes + b * (kQK / 4);
#if HWY_TARGET == HWY_SCALAR
    const bool scalar_lanes = true;
#else
    const bool scalar_lanes = scalar || N % 4 != 0;
#endif
    if (scalar_lanes) {
      for (int g = 0; g < kQK / 4; ++g) {
        const int8_t* q = blk.qs + 4 * g;
        lane[g] = -code_offset * (q[0] + q[1] + q[2] + q[3]);
      }
    }
#if HWY_TARGET != HWY_SCALAR
    else {
      // Sums of each 4 codes: the two 32-bit shuffles inside 128-bit blocks
      // leave a group's sum in all four of its lanes (exact: integers).
      const auto off = hn::Set(d, static_cast<float>(-code_offset));
      HWY_ALIGN int32_t quad[hn::MaxLanes(di)];
      for (int64_t j = 0; j < kQK; j += N) {
        const auto c = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, blk.qs + j)));
        const auto pairs = hn::Add(c, hn::Shuffle2301(c));
        hn::StoreU(hn::ConvertTo(di, hn::Mul(off, hn::Add(pairs, hn::Shuffle1032(pairs)))), di,
                   quad);
        for (int64_t k = 0; k < N / 4; ++k) lane[j / 4 + k] = quad[4 * k];
      }
    }
#endif
  }
}

// float -> f16, bit for bit tensor/fp16.h's f32_to_f16 (round to nearest
// even; overflow to infinity). Where the target has F16C the conversion is
// the hardware's, whose rounding is the same; a vector holding a NaN goes to
// the scalar code, which keeps no NaN payload. Elsewhere (Highway's emulated
// DemoteTo truncates) the whole row is scalar.
void ToF16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET < HWY_SSE4 && !defined(HWY_DISABLE_F16C)
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    if (!hn::AllFalse(d, hn::IsNaN(v))) {
      for (int64_t j = 0; j < N; ++j) y[i + j] = f32_to_f16(x[i + j]);
      continue;
    }
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(y + i));
  }
#endif
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

// One activation row of Q8_K blocks (the partner of the K-quants), bit for
// bit what tensor/'s quantize_q8_k writes: per block of 256 the first
// element of largest magnitude, max, sets iscale = -127 / max; codes are
// clamp(iscale · x, -128, 127) rounded half to even (the scalar code's
// magic-number add, done here the same way), bsums the sums of 16 codes,
// d = 1 / iscale. A block holding a NaN or an infinity goes to the scalar
// code (whose comparisons skip NaNs and whose iscale of -0 makes NaN codes).
void QuantizeQ8_KAct(const float* x, uint8_t* out, int64_t n_in) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  auto* blocks = reinterpret_cast<BlockQ8_K*>(out);
  const auto lo = hn::Set(d, -128.0f), hi = hn::Set(d, 127.0f);
  const auto magic = hn::Set(d, 12582912.0f);
  const auto inf = hn::Set(d, INFINITY);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& blk = blocks[b];
    bool scalar = N > 16 || kQK_K % N != 0;  // bsums need whole vectors of 16 at most
    auto amax = hn::Zero(d);
    for (int64_t j = 0; !scalar && j < kQK_K; j += N) {
      const auto a = hn::Abs(hn::LoadU(d, xb + j));
      if (!hn::AllTrue(d, hn::Lt(a, inf))) scalar = true;  // NaN or infinity
      amax = hn::Max(amax, a);
    }
    if (scalar) {
      quantize_q8_k(xb, &blk, kQK_K);
      continue;
    }
    const float m = hn::GetLane(hn::MaxOfLanes(d, amax));
    if (m == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    // The first element whose magnitude is the block's largest, with its sign.
    float max = 0.0f;
    const auto vm = hn::Set(d, m);
    for (int64_t j = 0; j < kQK_K; j += N) {
      const intptr_t k = hn::FindFirstTrue(d, hn::Eq(hn::Abs(hn::LoadU(d, xb + j)), vm));
      if (k >= 0) {
        max = xb[j + k];
        break;
      }
    }
    const float iscale = -127.f / max;
    const auto vis = hn::Set(d, iscale);
    for (int64_t j = 0; j < kQK_K; j += N) {
      auto v = hn::Mul(vis, hn::LoadU(d, xb + j));
      v = hn::Min(hi, hn::Max(lo, v));
      v = hn::Sub(hn::Add(v, magic), magic);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, v)), d8, blk.qs + j);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blk.qs[16 * j + l];
      blk.bsums[j] = static_cast<int16_t>(sum);
    }
    blk.d = 1 / iscale;
  }
}

}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sustain::kernels::cpu {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(Swiglu);
HWY_EXPORT(Geglu);
HWY_EXPORT(Add);
HWY_EXPORT(Softmax);
HWY_EXPORT(ExpWeights);
HWY_EXPORT(RopeApply);
HWY_EXPORT(QuantizeQ8_0Act);

void quantize_q8_0_activation(const float* x, uint8_t* out, int64_t n_in, int code_offset) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8_0Act)(x, out, n_in, code_offset);
}

HWY_EXPORT(QuantizeQ8_KAct);
HWY_EXPORT(ToF16);

void to_f16(const float* x, uint16_t* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ToF16)(x, y, n);
}

void quantize_q8_k_activation(const float* x, uint8_t* out, int64_t n_in) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8_KAct)(x, out, n_in);
}

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, weight, y, n, eps);
}
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Swiglu)(gate, up, out, n);
}
void geglu(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Geglu)(gate, up, out, n);
}
void add(float* y, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Add)(y, x, n);
}
void softmax(float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Softmax)(x, n);
}
void exp_weights(const float* x, float t, float m, float* w, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpWeights)(x, t, m, w, n);
}
void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, bool neox, const float* cos,
                const float* sin) {
  HWY_DYNAMIC_DISPATCH(RopeApply)(x, n_heads, head_dim, rope_dim, neox, cos, sin);
}

}  // namespace sustain::kernels::cpu
#endif  // HWY_ONCE

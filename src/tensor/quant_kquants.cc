// K-quants (Q2_K … Q6_K) and their activation partner Q8_K: scalar reference
// quantize and dequantize.
//
// Layouts are GGUF's (see blocks.h), and each dequantizer performs the same
// float operations in the same order as ggml's, so decoding is bit-exact.
// Quantizers follow the algorithms of llama.cpp's reference quantizers (the
// path llama-quantize takes without an importance matrix): a weighted search
// for each sub-block's scale (and min), then the scales themselves quantized
// to 4, 6 or 8 bits against a super-block scale, then every element rounded
// against its final, decoded scale. One step goes beyond llama.cpp: before
// that final rounding, each sub-block's quantized scale (and min) code moves
// by ±1 where this lowers the sub-block's weighted error (refine_codes_*). On
// llama.cpp's reference models that cuts RMSE by 0.2% (Q6_K) to 3% (Q5_K)
// against llama.cpp's own output. The searches live in quant_kquants_search.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/quant.h"
#include "tensor/quant_kquants_search.h"

namespace sustain {
namespace {

using kquant::round_clamped;

// Q4_K / Q5_K: sub-block j's 6-bit scale and min. Bytes 0-3 hold scales 0-3
// (low 6 bits) and bytes 4-7 mins 0-3; sub-blocks 4-7 keep their low nibbles in
// bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-7.
inline void unpack_scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

inline void pack_scales_mins_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Q3_K: sub-block j's scale code in [0, 63] (the signed scale is code - 32).
// Low nibbles: bytes 0-7 (sub-blocks 0-7 low half, 8-15 high half); top 2 bits:
// byte 8 + j % 4, bit pair j / 4.
inline int unpack_scale_q3(int j, const uint8_t* s) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

inline void pack_scales_q3(const uint8_t* codes, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int l = codes[j];
    if (j < 8) {
      s[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      s[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    }
    s[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
  }
}

// 2-bit fields of Q2_K / Q3_K: element 128h + 32j + r sits in qs[32h + r], bits 2j..2j+1.
inline void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < kQK_K; h += 128) {
    for (int r = 0; r < 32; ++r) {
      qs[h / 4 + r] = static_cast<uint8_t>(L[h + r] | (L[h + r + 32] << 2) | (L[h + r + 64] << 4) |
                                           (L[h + r + 96] << 6));
    }
  }
}

// Rounds x[i] / d for one sub-block into [lo, hi] and stores code (l - lo).
// Dividing (rather than multiplying by 1/d) matches llama.cpp's rounding ties.
inline void requantize_symmetric(const float* x, int n, float d, int lo, int hi, uint8_t* L) {
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(round_clamped(x[i] / d, lo, hi) - lo);
  }
}

inline void requantize_affine(const float* x, int n, float d, float dm, int nmax, uint8_t* L) {
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(round_clamped((x[i] + dm) / d, 0, nmax));
}

// ---------------------------------------------------------------------------------------------
// Q4_K and Q5_K share everything but the element width.

template <int kBits>
void quantize_q45_k_block(const float* x, uint16_t& d_out, uint16_t& dmin_out, uint8_t* scale_bytes,
                          uint8_t* L) {
  constexpr int kNmax = (1 << kBits) - 1;
  // llama.cpp's search ranges: a wider, finer scan for 4 bits, where rounding matters more.
  constexpr float kRmin = kBits == 4 ? -1.0f : -0.5f;
  constexpr int kSteps = kBits == 4 ? 20 : 15;
  constexpr float kDelta = 0.1f;

  // Weight large magnitudes more, but never let small ones drop to zero weight.
  alignas(16) float w[kQK_K];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[32 * j + l] = av_x + std::fabs(xs[l]);
  }
  kquant::AffineResult res[8];
  kquant::search_affine_k4(x, w, kNmax, kRmin, kDelta, kSteps, res);
  float scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    scales[j] = res[j].scale;
    mins[j] = res[j].neg_min;
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }

  uint8_t ls[8], lm[8];
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(round_clamped(inv_scale * scales[j], 0, 63));
    lm[j] = static_cast<uint8_t>(round_clamped(inv_min * mins[j], 0, 63));
  }
  d_out = f32_to_f16(max_scale / 63.f);
  dmin_out = f32_to_f16(max_min / 63.f);
  const float d = f16_to_f32(d_out), dmin = f16_to_f32(dmin_out);
  kquant::refine_codes_k4(x, w, d, dmin, kNmax, ls, lm);
  pack_scales_mins_k4(ls, lm, scale_bytes);

  for (int j = 0; j < 8; ++j) {
    const float ds = d * ls[j];
    if (ds == 0.0f) {
      // Every element decodes to -dmin * m whatever its code; keep the search's codes.
      kquant::affine_codes(x + 32 * j, 32, res[j], kNmax, L + 32 * j);
      continue;
    }
    requantize_affine(x + 32 * j, 32, ds, dmin * lm[j], kNmax, L + 32 * j);
  }
}

// ---------------------------------------------------------------------------------------------
// Q6_K

void quantize_q6_k_block(const float* x, BlockQ6_K& y) {
  kquant::SymmetricResult res[16];
  kquant::search_symmetric_q6(x, res);
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = res[ib].scale;
    if (std::fabs(scales[ib]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < kquant::kGroupMaxEps) {
    std::memset(&y, 0, sizeof(y));
    return;
  }
  // The largest scale maps to -128 (int8's extra negative level), as in llama.cpp.
  const float iscale = -128.f / max_scale;
  y.d = f32_to_f16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    y.scales[ib] = static_cast<int8_t>(round_clamped(iscale * scales[ib], -128, 127));
  }
  const float d = f16_to_f32(y.d);
  kquant::refine_codes_q6(x, d, y.scales);

  uint8_t L[kQK_K];
  for (int j = 0; j < 16; ++j) {
    const float ds = d * y.scales[j];
    if (ds == 0.0f) {
      kquant::symmetric_codes_q6(x + 16 * j, res[j], L + 16 * j);
      continue;
    }
    requantize_symmetric(x + 16 * j, 16, ds, -32, 31, L + 16 * j);
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* Lh = L + 128 * h;
    uint8_t* ql = y.ql + 64 * h;
    uint8_t* qh = y.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                   ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q3_K

void quantize_q3_k_block(const float* x, BlockQ3_K& y) {
  uint8_t L[kQK_K];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = kquant::search_symmetric_q3(x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  uint8_t codes[16] = {};
  if (max_scale != 0.0f) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      codes[j] = static_cast<uint8_t>(round_clamped(iscale * scales[j], -32, 31) + 32);
    }
    y.d = f32_to_f16(1 / iscale);
  } else {
    y.d = f32_to_f16(0.f);
  }
  const float d = f16_to_f32(y.d);
  if (max_scale != 0.0f) kquant::refine_codes_q3(x, d, codes);
  pack_scales_q3(codes, y.scales);

  for (int j = 0; j < 16; ++j) {
    const float ds = d * (codes[j] - 32);
    if (ds == 0.0f) continue;  // keep the search's codes: they decode to 0 all the same
    requantize_symmetric(x + 16 * j, 16, ds, -4, 3, L + 16 * j);
  }
  // Bit 2 of element e goes to hmask[e % 32], bit e / 32.
  std::memset(y.hmask, 0, sizeof(y.hmask));
  for (int e = 0; e < kQK_K; ++e) {
    if (L[e] > 3) {
      y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      L[e] -= 4;
    }
  }
  pack_2bit(L, y.qs);
}

// ---------------------------------------------------------------------------------------------
// Q2_K

void quantize_q2_k_block(const float* x, BlockQ2_K& y) {
  constexpr float kQ4Scale = 15.f;
  uint8_t L[kQK_K];
  float scales[16], mins[16];
  kquant::AffineResult res[16];
  float max_scale = 0, max_min = 0;
  kquant::search_affine_q2(x, res);
  for (int j = 0; j < 16; ++j) {
    scales[j] = res[j].scale;
    mins[j] = res[j].neg_min;
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t ls[16] = {}, lm[16] = {};
  if (max_scale > 0) {
    const float iscale = kQ4Scale / max_scale;
    for (int j = 0; j < 16; ++j)
      ls[j] = static_cast<uint8_t>(round_clamped(iscale * scales[j], 0, 15));
    y.d = f32_to_f16(max_scale / kQ4Scale);
  } else {
    y.d = f32_to_f16(0.f);
  }
  if (max_min > 0) {
    const float iscale = kQ4Scale / max_min;
    for (int j = 0; j < 16; ++j)
      lm[j] = static_cast<uint8_t>(round_clamped(iscale * mins[j], 0, 15));
    y.dmin = f32_to_f16(max_min / kQ4Scale);
  } else {
    y.dmin = f32_to_f16(0.f);
  }
  const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
  kquant::refine_codes_q2(x, d, dmin, ls, lm);
  for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));

  for (int j = 0; j < 16; ++j) {
    const float ds = d * ls[j];
    if (ds == 0.0f) {
      kquant::affine_codes(x + 16 * j, 16, res[j], 3, L + 16 * j);
      continue;
    }
    requantize_affine(x + 16 * j, 16, ds, dmin * lm[j], 3, L + 16 * j);
  }
  pack_2bit(L, y.qs);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points.

void quantize_q2_k(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ2_K*>(y);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_q2_k_block(x + i * kQK_K, out[i]);
}

void dequantize_q2_k(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const BlockQ2_K*>(x);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ2_K& b = in[i];
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int sc = b.scales[e / 16];
      const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
      const int q = (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
      *y++ = dl * q - ml;
    }
  }
}

void quantize_q3_k(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ3_K*>(y);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_q3_k_block(x + i * kQK_K, out[i]);
}

void dequantize_q3_k(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const BlockQ3_K*>(x);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ3_K& b = in[i];
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * (unpack_scale_q3(j, b.scales) - 32);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * j + l;
        const int lo = (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
        const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;
        *y++ = dl * (lo - (high ? 0 : 4));
      }
    }
  }
}

void quantize_q4_k(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ4_K*>(y);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    BlockQ4_K& b = out[i];
    quantize_q45_k_block<4>(x + i * kQK_K, b.d, b.dmin, b.scales, L);
    // Element 64g + r is the low nibble of qs[32g + r]; element 64g + 32 + r the high one.
    for (int g = 0; g < 4; ++g) {
      for (int r = 0; r < 32; ++r) {
        b.qs[32 * g + r] = static_cast<uint8_t>(L[64 * g + r] | (L[64 * g + 32 + r] << 4));
      }
    }
  }
}

void dequantize_q4_k(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const BlockQ4_K*>(x);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ4_K& b = in[i];
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      unpack_scale_min_k4(j, b.scales, sc, m);
      const float dl = d * sc, ml = dmin * m;
      const uint8_t* q = b.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int r = 0; r < 32; ++r) *y++ = dl * ((q[r] >> shift) & 0xF) - ml;
    }
  }
}

void quantize_q5_k(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ5_K*>(y);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    BlockQ5_K& b = out[i];
    quantize_q45_k_block<5>(x + i * kQK_K, b.d, b.dmin, b.scales, L);
    // Low 4 bits as in Q4_K; bit 4 of element e is qh[e % 32], bit e / 32.
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int e = 0; e < kQK_K; ++e) {
      if (L[e] > 15) b.qh[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    }
    for (int g = 0; g < 4; ++g) {
      for (int r = 0; r < 32; ++r) {
        b.qs[32 * g + r] =
            static_cast<uint8_t>((L[64 * g + r] & 0xF) | ((L[64 * g + 32 + r] & 0xF) << 4));
      }
    }
  }
}

void dequantize_q5_k(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const BlockQ5_K*>(x);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ5_K& b = in[i];
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      unpack_scale_min_k4(j, b.scales, sc, m);
      const float dl = d * sc, ml = dmin * m;
      const uint8_t* q = b.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int r = 0; r < 32; ++r) {
        const int hi = (b.qh[r] >> j) & 1;
        *y++ = dl * (((q[r] >> shift) & 0xF) + (hi ? 16 : 0)) - ml;
      }
    }
  }
}

void quantize_q6_k(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ6_K*>(y);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_q6_k_block(x + i * kQK_K, out[i]);
}

void dequantize_q6_k(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const BlockQ6_K*>(x);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ6_K& b = in[i];
    const float d = f16_to_f32(b.d);
    // Element 128h + 32k + l: low nibble from ql[64h + 32(k % 2) + l] (high nibble when
    // k >= 2), top 2 bits from qh[32h + l] bits 2k..2k+1.
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const int lo = (b.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xF;
      const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
      *y++ = d * b.scales[e / 16] * ((lo | (hi << 4)) - 32);
    }
  }
}

void quantize_q8_k(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(y);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    BlockQ8_K& b = out[i];
    // The largest-magnitude element, with its sign, maps to -127 (ggml's convention).
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&b, 0, sizeof(b));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      b.qs[j] = static_cast<int8_t>(round_clamped(iscale * x[j], -128, 127));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
      b.bsums[j] = static_cast<int16_t>(sum);
    }
    b.d = 1 / iscale;
  }
}

void dequantize_q8_k(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const BlockQ8_K*>(x);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = in[i].d * in[i].qs[j];
  }
}

}  // namespace sustain

// The 32-element "legacy" formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//
// Quantization reproduces llama.cpp's reference quantizer bit for bit, so a
// model we quantize is byte-identical to one llama-quantize writes. That pins
// down details that look arbitrary but change bytes:
//  - the scale is computed and inverted in f32 and only then stored as f16;
//    the codes are derived from the f32 scale, not from the stored one;
//  - Q4_0/Q5_0 take the element of largest magnitude *with its sign* (the
//    first such element on ties) and map it to the most negative code, so the
//    opposite extreme is clamped one step short;
//  - codes are rounded by adding a half and truncating (ties go up), except
//    Q8_0/Q8_1, which round half away from zero;
//  - every product and sum is rounded separately (no fused multiply-add).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

// GCC honours ISO C++ mode (-std=c++20) by not contracting a*b+c into an FMA;
// clang contracts within an expression by default, which would change
// roundings on targets with FMA (ARM64). The reference quantizer does not fuse.
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace sustain {
namespace {

// A code from a float that the reference converts with a C cast. For finite
// in-range values that is truncation toward zero (after the +0.5 bias). The
// cast is undefined for NaN and infinities, which arise only from NaN inputs
// or when a block's scale is so small (< 2^-128) that its inverse overflows;
// x86 builds of the reference then get the "integer indefinite" 0x80000000,
// whose low byte is 0, so we give 0 too rather than invoke undefined behaviour.
// False for NaN as well.
inline bool castable(float v) {
  return std::fabs(v) < 0x1p31f;
}

inline uint8_t trunc_code(float v, int max_code) {
  if (!castable(v)) return 0;
  return static_cast<uint8_t>(std::clamp(static_cast<int>(v), 0, max_code));
}

// Round half away from zero (C roundf), as Q8_0/Q8_1 do. Inline rather
// than a libm call (roundf was a third of `bench --fill random`'s time,
// which writes every prompt row through this): the cast truncates toward
// zero, v - t is exact (|v - t| < 1, and v is integral from 2^23 up), and
// a remainder of at least one half steps away from zero.
inline int8_t round_q8(float v) {
  if (!castable(v)) return 0;
  int t = static_cast<int>(v);
  const float frac = v - static_cast<float>(t);
  t += (frac >= 0.5f) - (frac <= -0.5f);
  return static_cast<int8_t>(std::clamp(t, -127, 127));
}

// The element of largest magnitude, with its sign; the first one wins a tie.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

inline float absmax(const float* x, int n) {
  float amax = 0.0f;
  // Written as the reference's MAX(a, b) so a NaN propagates the same way.
  for (int j = 0; j < n; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  return amax;
}

inline void min_max(const float* x, int n, float* mn, float* mx) {
  float lo = std::numeric_limits<float>::max();
  float hi = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

inline float inverse_or_zero(float d) {
  return d != 0.0f ? 1.0f / d : 0.0f;
}

// Low nibbles hold elements 0..15, high nibbles 16..31; for 5-bit codes bit 4
// of element j goes to bit j of a little-endian u32.
inline void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + kQK / 2] & 0x0f) << 4));
}
inline void pack_high_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int b = 0; b < 4; ++b) qh[b] = static_cast<uint8_t>(bits >> (8 * b));
}
inline void unpack_codes(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
  uint32_t bits = 0;
  if (qh != nullptr)
    for (int b = 0; b < 4; ++b) bits |= static_cast<uint32_t>(qh[b]) << (8 * b);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = static_cast<uint8_t>((qs[j] & 0x0f) | (((bits >> j) & 1) << 4));
    q[j + kQK / 2] = static_cast<uint8_t>((qs[j] >> 4) | (((bits >> (j + kQK / 2)) & 1) << 4));
  }
}

// Q4_0 and Q5_0: x ~= d * (q - half), with d = max / -half so the signed
// extreme lands exactly on code 0.
template <int kBits>
void quantize_symmetric(const float* x, uint16_t* d_out, uint8_t* qs, uint8_t* qh) {
  constexpr int kHalf = 1 << (kBits - 1);
  constexpr int kMaxCode = (1 << kBits) - 1;
  const float max = signed_absmax(x, kQK);
  const float d = max / static_cast<float>(-kHalf);
  const float id = inverse_or_zero(d);
  *d_out = f32_to_f16(d);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) {
    q[j] = trunc_code(x[j] * id + (static_cast<float>(kHalf) + 0.5f), kMaxCode);
  }
  pack_nibbles(q, qs);
  if (qh != nullptr) pack_high_bits(q, qh);
}

// Q4_1 and Q5_1: x ~= d * q + m, with m the block minimum.
template <int kBits>
void quantize_affine(const float* x, uint16_t* d_out, uint16_t* m_out, uint8_t* qs, uint8_t* qh) {
  constexpr int kMaxCode = (1 << kBits) - 1;
  float mn, mx;
  min_max(x, kQK, &mn, &mx);
  const float d = (mx - mn) / static_cast<float>(kMaxCode);
  const float id = inverse_or_zero(d);
  *d_out = f32_to_f16(d);
  *m_out = f32_to_f16(mn);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_code((x[j] - mn) * id + 0.5f, kMaxCode);
  pack_nibbles(q, qs);
  if (qh != nullptr) pack_high_bits(q, qh);
}

// Returns the f32 scale (before f16 rounding): Q8_1's sum term needs it.
float quantize_q8_block(const float* x, uint16_t* d_out, int8_t* qs) {
  const float d = absmax(x, kQK) / 127.0f;
  const float id = inverse_or_zero(d);
  *d_out = f32_to_f16(d);
  for (int j = 0; j < kQK; ++j) qs[j] = round_q8(x[j] * id);
  return d;
}

}  // namespace

void quantize_q4_0(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(y);
  for (int64_t i = 0; i < n / kQK; ++i)
    quantize_symmetric<4>(x + i * kQK, &b[i].d, b[i].qs, nullptr);
}

void dequantize_q4_0(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(x);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(b[i].d);
    unpack_codes(b[i].qs, nullptr, q);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(q[j] - 8) * d;
  }
}

void quantize_q4_1(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ4_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i)
    quantize_affine<4>(x + i * kQK, &b[i].d, &b[i].m, b[i].qs, nullptr);
}

void dequantize_q4_1(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(x);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float m = f16_to_f32(b[i].m);
    unpack_codes(b[i].qs, nullptr, q);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(q[j]) * d + m;
  }
}

void quantize_q5_0(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(y);
  for (int64_t i = 0; i < n / kQK; ++i)
    quantize_symmetric<5>(x + i * kQK, &b[i].d, b[i].qs, b[i].qh);
}

void dequantize_q5_0(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(x);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(b[i].d);
    unpack_codes(b[i].qs, b[i].qh, q);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(q[j] - 16) * d;
  }
}

void quantize_q5_1(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i)
    quantize_affine<5>(x + i * kQK, &b[i].d, &b[i].m, b[i].qs, b[i].qh);
}

void dequantize_q5_1(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(x);
  uint8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float m = f16_to_f32(b[i].m);
    unpack_codes(b[i].qs, b[i].qh, q);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(q[j]) * d + m;
  }
}

void quantize_q8_0(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(y);
  for (int64_t i = 0; i < n / kQK; ++i) quantize_q8_block(x + i * kQK, &b[i].d, b[i].qs);
}

void dequantize_q8_0(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(x);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void quantize_q8_1(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = quantize_q8_block(x + i * kQK, &b[i].d, b[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += b[i].qs[j];
    // s lets a dot product with an affine block (x = d*q + m) add m * sum(x)
    // without summing the codes again. Like llama.cpp, it uses the f32 scale.
    b[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

void dequantize_q8_1(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(x);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

}  // namespace sustain

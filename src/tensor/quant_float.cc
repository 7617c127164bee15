// Plain float formats: F32, F16, BF16 and FP8 E4M3.
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/quant.h"

namespace sustain {

void quantize_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
void dequantize_f32(const void* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }

void quantize_f16(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}
void dequantize_f16(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(in[i]);
}

void quantize_bf16(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}
void dequantize_bf16(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(in[i]);
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  constexpr uint8_t kMaxFinite = 0x7e;  // 1.75 * 2^8 = 448
  if (a >= 448.0f) return sign | kMaxFinite;  // saturate (no infinities in E4M3)
  if (a < 0x1p-6f) {
    // Subnormal range: unit 2^-9. A result of 8 is the smallest normal, 0x08.
    const float q = std::nearbyint(a * 0x1p9f);
    return sign | static_cast<uint8_t>(q);
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;                    // a = (2m) * 2^exp, 2m in [1, 2)
  float mq = std::nearbyint((2.0f * m - 1.0f) * 8.0f);
  if (mq >= 8.0f) {
    mq = 0.0f;
    ++exp;
  }
  const int biased = exp + 7;
  if (biased > 15 || (biased == 15 && mq >= 7.0f)) return sign | kMaxFinite;
  return sign | static_cast<uint8_t>((biased << 3) | static_cast<int>(mq));
}

float fp8_e4m3_to_f32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 0x7;
  if (exp == 15 && mant == 7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
}

void quantize_fp8_e4m3(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint8_t*>(y);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e4m3(x[i]);
}
void dequantize_fp8_e4m3(const void* x, float* y, int64_t n) {
  const auto* in = static_cast<const uint8_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = fp8_e4m3_to_f32(in[i]);
}

}  // namespace sustain

// Scalar conversions between float and the 16- and 8-bit float formats.
// Round-to-nearest-even everywhere, matching IEEE / the F16C instructions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sustain {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 -> float (exact).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // Subnormal: mant * 2^-24.
    float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// float -> IEEE binary16, round to nearest even; overflow gives inf, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
    // Scale so that the subnormal unit 2^-24 becomes 1, then round to nearest even.
    const float v = f32_from_bits(abs) * 0x1p24f;
    const float r = std::nearbyint(v);  // default rounding mode: nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: re-bias exponent, round mantissa from 23 to 10 bits.
  uint32_t m = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  m -= (127 - 15) << 23;
  return static_cast<uint16_t>(sign | (m >> 13));
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace sustain

// Small helpers for reading packed block fields, shared by the reference and
// the SIMD kernels (internal to kernels/).
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/blocks.h"

namespace sustain::kernels {

// Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins packed in 12 bytes.
// Scales/mins 0..3 are the low 6 bits of bytes 0..3 / 4..7; 4..7 take their
// low nibble from bytes 8..11 and their top two bits from the spare bits 6..7
// of bytes 0..3 / 4..7.
inline void unpack_k4_scales(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: 16 six-bit scales packed in 12 bytes, returned with the bias of 32
// removed. Low nibbles: bytes 0..7 (scales 0..7 low, 8..15 high nibble);
// top two bits: bytes 8..11, two bits per scale.
inline void unpack_q3k_scales(const uint8_t* q, int8_t sc[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (q[j] & 0xF) : (q[j - 8] >> 4);
    const int hi = (q[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    sc[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace sustain::kernels

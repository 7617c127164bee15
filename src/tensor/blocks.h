// Block structs, byte-exact with GGUF / ggml. Half-precision fields are raw
// uint16_t bit patterns (see fp16.h). Sizes are pinned by static_assert so a
// layout change cannot go unnoticed.
#pragma once

#include <cstdint>

namespace sustain {

inline constexpr int kQK = 32;    // elements per block of the 32-element formats
inline constexpr int kQK_K = 256; // elements per super-block of the K-quants
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q4_K and Q5_K

// Q4_0: x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble) and j + 16 (high).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
// Q5_0: x = d * (q - 16); bit 4 of element j is bit j of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q5_1: x = d * q + m.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q8_0: x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// Q8_1: like Q8_0 plus s = d * sum(q) (an activation format).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[kQK];
};

// Q2_K: 16 sub-blocks of 16; scales[i] = (min << 4) | scale, 4 bits each;
// x = d * scale * q - dmin * min, q in [0, 3].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
// Q3_K: 16 sub-blocks of 16, 6-bit signed scales packed in 12 bytes; low 2
// bits in qs, high bit in hmask; x = d * (scale - 32) * (q - 4 if high bit clear else q).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes;
// x = d * scale * q - dmin * min, q in [0, 15].
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
// Q5_K: as Q4_K with a fifth bit per element in qh; q in [0, 31].
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scale * (q - 32), q in [0, 63].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// Q8_K: the activation partner of the K-quants; float scale, bsums[i] = sum of qs[16i..16i+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace sustain

// Tests for the 32-element formats (Q4_0 ... Q8_1), the scalar float
// conversions (f16, bf16, fp8 e4m3) and the Q8_K round trip.
//
// The byte-exact comparison with llama.cpp's own files is in
// test_quant_ref.cc; here every expectation is derived independently: block
// bytes are decoded by the test itself from the layout documented in
// blocks.h, golden blocks are worked out by hand, and float conversions are
// checked against slow long-double references.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"
#include "tensor/quant.h"
#include "tensor/quant_test_util.h"

namespace sustain {
namespace {

using test::dequantize;
using test::quantize;
using test::Rng;

// ---------------------------------------------------------------------------
// Independent decoding of the 32-element formats.

struct FormatInfo {
  QType type;
  bool affine;  // x = d*q + m (Q4_1, Q5_1) rather than x = d*(q - offset)
  int bits;     // code width
};

constexpr FormatInfo kLegacy[] = {
    {QType::Q4_0, false, 4}, {QType::Q4_1, true, 4},  {QType::Q5_0, false, 5},
    {QType::Q5_1, true, 5},  {QType::Q8_0, false, 8}, {QType::Q8_1, false, 8},
};

void PrintTo(const FormatInfo& f, std::ostream* os) {
  *os << qtype_name(f.type);
}

std::string param_name(const testing::TestParamInfo<FormatInfo>& info) {
  return std::string(qtype_name(info.param.type));
}

// One block as the test reads it: the stored scale (and min) as floats and
// each element's integer multiplier of d, already offset (so x ~= d*c + m).
struct Decoded {
  float d = 0;
  float m = 0;
  int c[kQK] = {};
  int code[kQK] = {};  // raw stored code (before the offset)
};

uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t load_u32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Decodes block `i` of `bytes` in format `f`, from the byte layout alone:
// [d f16][m f16 if affine][qh u32 if 5-bit][16 bytes of nibbles], or
// [d f16][s f16 for Q8_1][32 int8].
Decoded decode_block(const FormatInfo& f, const std::vector<uint8_t>& bytes, size_t i) {
  const auto& tr = qtype_traits(f.type);
  const uint8_t* p = bytes.data() + i * tr.block_bytes;
  Decoded out;
  out.d = f16_to_f32(load_u16(p));
  p += 2;
  if (f.bits == 8) {
    if (f.type == QType::Q8_1) p += 2;
    for (int j = 0; j < kQK; ++j) out.code[j] = out.c[j] = static_cast<int8_t>(p[j]);
    return out;
  }
  if (f.affine) {
    out.m = f16_to_f32(load_u16(p));
    p += 2;
  }
  uint32_t qh = 0;
  if (f.bits == 5) {
    qh = load_u32(p);
    p += 4;
  }
  for (int j = 0; j < kQK; ++j) {
    const int nib = j < 16 ? (p[j] & 0xf) : (p[j - 16] >> 4);
    out.code[j] = nib | static_cast<int>(((qh >> j) & 1) << 4);
    out.c[j] = f.affine ? out.code[j] : out.code[j] - (1 << (f.bits - 1));
  }
  return out;
}

// Half an f16 ulp of |d| (or of the subnormal spacing): how far the stored
// scale may be from the f32 scale the codes were chosen with.
double f16_rounding_error(double v) {
  return std::max(std::fabs(v) * 0x1p-11, 0x1p-25);
}

// Checks |x - deq| against the worst case of the quantizer: half a step,
// or a whole step for the symmetric formats' top code (the extreme opposite
// the signed maximum is clamped one code short), plus the error of storing d
// and m in f16 times the code's magnitude.
void expect_block_error_bounded(const FormatInfo& f, const float* x, const float* deq,
                                const Decoded& b, size_t block) {
  const int top_code = (1 << f.bits) - 1;
  const double dd = f16_rounding_error(b.d);
  const double step = std::fabs(b.d) + dd;
  for (int j = 0; j < kQK; ++j) {
    const bool clamped = !f.affine && f.bits < 8 && b.code[j] == top_code;
    double bound = (clamped ? 1.0 : 0.5) * step + std::abs(b.c[j]) * dd;
    if (f.affine) bound += f16_rounding_error(b.m);
    bound += 4 * std::numeric_limits<float>::epsilon() * std::fabs(x[j]) + 1e-30;
    ASSERT_LE(std::fabs(static_cast<double>(x[j]) - deq[j]), bound)
        << qtype_name(f.type) << " block " << block << " elem " << j << " x=" << x[j]
        << " deq=" << deq[j] << " d=" << b.d << " m=" << b.m << " code=" << b.code[j];
  }
}

// Round trip of `x` through format f: the table's dequantize equals the
// test's own decode exactly, and every element is within the error bound.
void check_round_trip(const FormatInfo& f, const std::vector<float>& x) {
  const std::vector<uint8_t> q = quantize(f.type, x);
  const std::vector<float> y = dequantize(f.type, q, x.size());
  for (size_t i = 0; i < x.size() / kQK; ++i) {
    const Decoded b = decode_block(f, q, i);
    for (int j = 0; j < kQK; ++j) {
      const float expect =
          f.affine ? static_cast<float>(b.c[j]) * b.d + b.m : static_cast<float>(b.c[j]) * b.d;
      ASSERT_EQ(y[i * kQK + j], expect) << qtype_name(f.type) << " block " << i << " elem " << j;
    }
    expect_block_error_bounded(f, &x[i * kQK], &y[i * kQK], b, i);
    if (f.type == QType::Q8_1) {
      // s = d * sum(q), from the unrounded d: within the f16 rounding of both.
      int sum = 0;
      for (int j = 0; j < kQK; ++j) sum += b.c[j];
      const float s = f16_to_f32(load_u16(q.data() + i * sizeof(BlockQ8_1) + 2));
      EXPECT_NEAR(s, sum * b.d,
                  2 * (std::abs(sum) * f16_rounding_error(b.d) + f16_rounding_error(sum * b.d)))
          << "block " << i;
    }
  }
}

class LegacyFormat : public testing::TestWithParam<FormatInfo> {};

TEST_P(LegacyFormat, TableEntry) {
  const auto& tr = qtype_traits(GetParam().type);
  EXPECT_EQ(tr.block_elems, static_cast<uint32_t>(kQK));
  const uint32_t header = GetParam().affine || GetParam().type == QType::Q8_1 ? 4 : 2;
  const uint32_t qh = GetParam().bits == 5 ? 4 : 0;
  EXPECT_EQ(tr.block_bytes, header + qh + (GetParam().bits == 8 ? kQK : kQK / 2));
}

TEST_P(LegacyFormat, RoundTripAwkwardSizes) {
  for (size_t blocks : {1, 3, 97}) {
    SCOPED_TRACE(blocks);
    check_round_trip(GetParam(), test::random_normal(blocks * kQK, 1000 + blocks));
    check_round_trip(GetParam(), test::random_with_outliers(blocks * kQK, 2000 + blocks));
    check_round_trip(GetParam(), test::random_uniform(blocks * kQK, 3000 + blocks, -3.f, 0.5f));
  }
}

TEST_P(LegacyFormat, WholeRowEqualsBlockByBlock) {
  // Catches a block stride or a state carried from one block to the next.
  const auto x = test::random_with_outliers(97 * kQK, 7);
  const std::vector<uint8_t> whole = quantize(GetParam().type, x);
  const uint32_t bb = qtype_traits(GetParam().type).block_bytes;
  for (size_t i = 0; i < 97; ++i) {
    const std::vector<float> one(x.begin() + i * kQK, x.begin() + (i + 1) * kQK);
    const std::vector<uint8_t> q = quantize(GetParam().type, one);
    ASSERT_EQ(0, std::memcmp(q.data(), whole.data() + i * bb, bb)) << "block " << i;
  }
}

TEST_P(LegacyFormat, ErrorScalesWithBits) {
  // Mean error of N(0,1) data: the step is range / 2^bits, the rounding error
  // of a uniform step is step/sqrt(12), so relative RMSE ~ 2^-bits * c with c
  // ~ 2*2.1/sqrt(12) ~ 1.2 (amax of 32 normals ~ 2.1). Bounds allow 1.5x.
  const auto x = test::random_normal(1024 * kQK, 11);
  const double e = test::relative_rmse(test::round_trip(GetParam().type, x), x);
  const double bound = 1.5 * 1.2 * std::ldexp(1.0, -GetParam().bits);
  EXPECT_LT(e, bound) << qtype_name(GetParam().type);
  EXPECT_GT(e, bound / 10) << "suspiciously exact for " << qtype_name(GetParam().type);
}

TEST_P(LegacyFormat, AllZeros) {
  const std::vector<float> x(3 * kQK, 0.0f);
  const std::vector<uint8_t> q = quantize(GetParam().type, x);
  for (size_t i = 0; i < 3; ++i) {
    const Decoded b = decode_block(GetParam(), q, i);
    // The symmetric formats compute d = max / -half = 0 / -8 = -0.0, and
    // llama.cpp stores that sign: 0x8000.
    const bool symmetric = !GetParam().affine && GetParam().bits < 8;
    EXPECT_EQ(load_u16(q.data() + i * qtype_traits(GetParam().type).block_bytes),
              symmetric ? 0x8000 : 0x0000);
    EXPECT_EQ(b.m, 0.0f);
    // Zero sits exactly on a code: the middle one for the symmetric formats.
    for (int j = 0; j < kQK; ++j) EXPECT_EQ(b.c[j], 0) << j;
  }
  for (float v : dequantize(GetParam().type, q, x.size())) EXPECT_EQ(v, 0.0f);
  // Negative zeros behave the same.
  const std::vector<float> nz(kQK, -0.0f);
  for (float v : test::round_trip(GetParam().type, nz)) EXPECT_EQ(v, 0.0f);
}

TEST_P(LegacyFormat, ConstantBlock) {
  for (float c : {1.0f, -2.5f, 1000.0f, 3e-3f}) {
    const std::vector<float> x(kQK, c);
    const std::vector<float> y = test::round_trip(GetParam().type, x);
    // The extreme element is represented with the f16 scale's precision
    // (the affine formats store it as m directly).
    for (int j = 0; j < kQK; ++j) EXPECT_NEAR(y[j], c, std::fabs(c) * 0x1p-10) << c;
    check_round_trip(GetParam(), x);
  }
}

TEST_P(LegacyFormat, OneHugeOutlier) {
  for (float big : {1e4f, -1e4f}) {
    auto x = test::random_normal(3 * kQK, 5);
    x[kQK + 17] = big;
    check_round_trip(GetParam(), x);
    const std::vector<float> y = test::round_trip(GetParam().type, x);
    EXPECT_NEAR(y[kQK + 17], big, 1e4 * 0x1p-10);
    // The other blocks keep their own scale.
    EXPECT_LT(test::rmse(y.data(), x.data(), kQK), 0.5);
  }
}

TEST_P(LegacyFormat, NegativeMax) {
  // Largest magnitude negative, the rest positive up to the same magnitude:
  // the symmetric formats' clamped side.
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(j) / 31.0f;
  x[5] = -1.0f;
  x[31] = 1.0f;  // ties with x[5] in magnitude: the first (negative) one sets the scale
  check_round_trip(GetParam(), x);
  const std::vector<float> y = test::round_trip(GetParam().type, x);
  EXPECT_NEAR(y[5], -1.0f, 0x1p-10);
}

TEST_P(LegacyFormat, TinyAndSubnormalValues) {
  // Scales fall into f16's subnormal range (or flush to zero), and for the
  // smallest inputs the f32 scale is itself subnormal.
  for (float s : {1e-5f, 1e-7f, 1e-9f, 1e-20f, 1e-38f, 1e-44f}) {
    SCOPED_TRACE(s);
    check_round_trip(GetParam(), test::random_normal(3 * kQK, 17, s));
  }
}

INSTANTIATE_TEST_SUITE_P(Tensor, LegacyFormat, testing::ValuesIn(kLegacy), param_name);

// ---------------------------------------------------------------------------
// Golden blocks worked out by hand: they pin down the rounding rules that a
// round trip cannot see but that make bytes match llama.cpp's.

std::vector<uint8_t> q_block(QType t, const std::vector<float>& x) {
  return quantize(t, x);
}

// The tiled q8_0 V kernel (attention/attend_tiled-inl.h) takes the softmax
// weights times the block scales as vpdpbusd's unsigned factor, so a Q8_0
// block written to the KV cache must never carry a negative scale (-0.0
// included): all-negative, negative-extreme, zero, negative-zero and
// subnormal blocks.
TEST(QuantGolden, Q8_0ScalesAreNeverNegative) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> neg(-3.0f, -0.001f);
  std::vector<float> x;
  for (int j = 0; j < kQK; ++j) x.push_back(neg(rng));                   // all negative
  for (int j = 0; j < kQK; ++j) x.push_back(j == 9 ? -5.0f : 0.1f * j);  // negative extreme
  for (int j = 0; j < kQK; ++j) x.push_back(0.0f);                       // zeros
  for (int j = 0; j < kQK; ++j) x.push_back(-0.0f);                      // negative zeros
  for (int j = 0; j < kQK; ++j) x.push_back(-1e-40f * float(j + 1));     // negative subnormals
  for (int j = 0; j < kQK; ++j) x.push_back(-65000.0f + float(j));       // near f16's top
  const int blocks = static_cast<int>(x.size()) / kQK;
  std::vector<BlockQ8_0> b(blocks);
  quantize_q8_0(x.data(), b.data(), static_cast<int64_t>(x.size()));
  for (int i = 0; i < blocks; ++i)
    EXPECT_EQ(b[i].d & 0x8000u, 0u) << "block " << i << " scale bits 0x" << std::hex << b[i].d;
}

TEST(QuantGolden, Q4_0RoundsHalfUpAndClampsTop) {
  // x[0] = -8 sets d = -8 / -8 = 1, so code = trunc(x + 8.5).
  std::vector<float> x(kQK, 0.0f);
  x[0] = -8.0f;
  x[1] = 0.5f;    // 9.0 -> 9
  x[2] = -0.5f;   // 8.0 -> 8: the tie goes up, not to even and not away from zero
  x[3] = -7.5f;   // 1.0 -> 1
  x[4] = 7.5f;    // 16.0 -> clamped to 15
  x[5] = 8.0f;    // 16.5 -> clamped to 15
  x[6] = 1.49f;   // 9.99 -> 9
  x[16] = 3.0f;   // 11, in the high nibble of byte 0
  x[17] = -3.0f;  // 5
  const auto q = q_block(QType::Q4_0, x);
  ASSERT_EQ(q.size(), sizeof(BlockQ4_0));
  EXPECT_EQ(load_u16(&q[0]), 0x3c00);  // 1.0
  const uint8_t* qs = &q[2];
  EXPECT_EQ(qs[0], 0x0 | (11 << 4));
  EXPECT_EQ(qs[1], 9 | (5 << 4));
  EXPECT_EQ(qs[2], 8 | (8 << 4));
  EXPECT_EQ(qs[3], 1 | (8 << 4));
  EXPECT_EQ(qs[4], 15 | (8 << 4));
  EXPECT_EQ(qs[5], 15 | (8 << 4));
  EXPECT_EQ(qs[6], 9 | (8 << 4));
}

TEST(QuantGolden, Q4_0SignedMaxFirstWins) {
  // |8| appears twice; the first (positive) sets d = 8 / -8 = -1.
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(8 - (j % 16));  // 8, 7, ..., -7
  x[20] = -8.0f;
  const auto q = q_block(QType::Q4_0, x);
  EXPECT_EQ(load_u16(&q[0]), 0xbc00);  // -1.0
  // code = trunc(-x + 8.5): x = 8 - k gives k (k < 16); x = -8 gives 16 -> 15.
  for (int j = 0; j < 16; ++j) {
    const int hi = j + 16 == 20 ? 15 : j;
    EXPECT_EQ(q[2 + j], j | (hi << 4)) << j;
  }
}

TEST(QuantGolden, Q4_1ExactGrid) {
  // min 0, max 15: d = 1, codes = values, m = 0; 0.5 rounds up to 1.
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(j % 16);
  x[16] = 0.5f;
  x[17] = 14.5f;  // 15.0 -> 15
  const auto q = q_block(QType::Q4_1, x);
  EXPECT_EQ(load_u16(&q[0]), 0x3c00);
  EXPECT_EQ(load_u16(&q[2]), 0x0000);
  EXPECT_EQ(q[4], 0 | (1 << 4));
  EXPECT_EQ(q[5], 1 | (15 << 4));
  for (int j = 2; j < 16; ++j) EXPECT_EQ(q[4 + j], j | (j << 4)) << j;
}

TEST(QuantGolden, Q5_0HighBits) {
  // x[0] = -16 sets d = 1; code = x + 16. Elements with code >= 16 set bit j of qh.
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(j - 16);
  x[0] = -16.0f;
  const auto q = q_block(QType::Q5_0, x);
  EXPECT_EQ(load_u16(&q[0]), 0x3c00);
  EXPECT_EQ(load_u32(&q[2]), 0xffff0000u);  // codes j: bit 4 set for j >= 16
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q[6 + j], j | (j << 4)) << j;
  // All zeros: every code is 16, so every high bit is set and every nibble is 0.
  const auto z = q_block(QType::Q5_0, std::vector<float>(kQK, 0.0f));
  EXPECT_EQ(load_u32(&z[2]), 0xffffffffu);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(z[6 + j], 0);
}

TEST(QuantGolden, Q5_1ExactGrid) {
  std::vector<float> x(kQK);
  for (int j = 0; j < kQK; ++j) x[j] = static_cast<float>(j) + 2.0f;  // min 2, max 33: d = 1
  const auto q = q_block(QType::Q5_1, x);
  EXPECT_EQ(load_u16(&q[0]), 0x3c00);
  EXPECT_EQ(load_u16(&q[2]), 0x4000);  // m = 2
  EXPECT_EQ(load_u32(&q[4]), 0xffff0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q[8 + j], j | (j << 4)) << j;
}

TEST(QuantGolden, Q8_0RoundsHalfAwayFromZero) {
  // amax = 127 gives d = 1 and id = 1 exactly.
  std::vector<float> x(kQK, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;   // 3 (nearest-even would give 2)
  x[2] = -2.5f;  // -3
  x[3] = 0.5f;   // 1
  x[4] = -0.5f;  // -1
  x[5] = 1.5f;   // 2
  x[6] = -127.0f;
  x[7] = 0.49f;  // 0
  const auto q = q_block(QType::Q8_0, x);
  EXPECT_EQ(load_u16(&q[0]), 0x3c00);  // d = 127 / 127
  const int8_t expect[8] = {127, 3, -3, 1, -1, 2, -127, 0};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(static_cast<int8_t>(q[2 + j]), expect[j]) << j;
}

// The codes are C roundf of x / d wherever it is taken: every half, the
// floats just either side of it, and random blocks at many scales, against
// std::round computed here.
TEST(QuantGolden, Q8_0CodesAreRoundfEverywhere) {
  std::vector<float> x(kQK, 0.0f);
  std::vector<float> probes;
  for (int h = -253; h <= 253; h += 2) {  // the halves -126.5 .. 126.5
    const float half = 0.5f * static_cast<float>(h);
    probes.push_back(std::nextafter(half, -200.0f));
    probes.push_back(half);
    probes.push_back(std::nextafter(half, 200.0f));
  }
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.49999997f, -0.49999997f}) probes.push_back(v);
  // Blocks of 31 probes beside +127 (so d = 1 and each code is round(x)).
  for (size_t at = 0; at < probes.size(); at += kQK - 1) {
    x[0] = 127.0f;
    for (int j = 1; j < kQK; ++j) {
      const size_t i = at + static_cast<size_t>(j - 1);
      x[static_cast<size_t>(j)] = i < probes.size() ? probes[i] : 0.0f;
    }
    const auto q = q_block(QType::Q8_0, x);
    for (int j = 0; j < kQK; ++j)
      EXPECT_EQ(static_cast<int8_t>(q[2 + j]), static_cast<int8_t>(std::round(x[j])))
          << "x = " << x[j];
  }
  std::mt19937 rng(17);
  for (int b = 0; b < 200; ++b) {
    std::normal_distribution<float> nd(0.0f, std::ldexp(1.0f, b % 40 - 20));
    for (float& v : x) v = nd(rng);
    const auto q = q_block(QType::Q8_0, x);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j)
      ASSERT_EQ(static_cast<int8_t>(q[2 + j]), static_cast<int8_t>(std::round(x[j] * id)))
          << "block " << b << ", x = " << x[j];
  }
}

TEST(QuantGolden, Q8_0CodesUseTheF32Scale) {
  // amax = 1: d = 1/127 in f32, stored as f16 0x2008 (1/127 is not exact in
  // either). Codes come from x * (1/d_f32), so x = amax maps to exactly 127
  // even though 127 * d_f16 != 1.
  std::vector<float> x(kQK, 0.0f);
  x[0] = 1.0f;
  x[1] = -1.0f;
  x[2] = 0.5f;  // 63.5 (up to f32 rounding of the product) -> 64
  const auto q = q_block(QType::Q8_0, x);
  EXPECT_EQ(load_u16(&q[0]), f32_to_f16(1.0f / 127.0f));
  EXPECT_EQ(static_cast<int8_t>(q[2]), 127);
  EXPECT_EQ(static_cast<int8_t>(q[3]), -127);
  EXPECT_EQ(static_cast<int8_t>(q[4]),
            static_cast<int8_t>(std::round(0.5f * (1.0f / (1.0f / 127.0f)))));
}

TEST(QuantGolden, Q8_1SumUsesCodes) {
  std::vector<float> x(kQK, 1.0f);
  x[0] = 127.0f;  // d = 1, codes 127, then 31 ones: sum 158, s = 158
  const auto q = q_block(QType::Q8_1, x);
  EXPECT_EQ(load_u16(&q[0]), 0x3c00);
  EXPECT_EQ(f16_to_f32(load_u16(&q[2])), 158.0f);
}

// Dequantize against hand-made bytes: the layout, not the quantizer.
TEST(QuantGolden, DequantizeHandMadeBlocks) {
  Rng rng(99);
  for (const FormatInfo& f : kLegacy) {
    SCOPED_TRACE(std::string(qtype_name(f.type)));
    const auto& tr = qtype_traits(f.type);
    std::vector<uint8_t> bytes(5 * tr.block_bytes);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng.next_u32());
    for (size_t i = 0; i < 5; ++i) {
      // Finite scales only: clear the top exponent bit of d (and m).
      bytes[i * tr.block_bytes + 1] &= 0xbf;
      if (f.affine) bytes[i * tr.block_bytes + 3] &= 0xbf;
    }
    const std::vector<float> y = dequantize(f.type, bytes, 5 * kQK);
    for (size_t i = 0; i < 5; ++i) {
      const Decoded b = decode_block(f, bytes, i);
      for (int j = 0; j < kQK; ++j) {
        const float expect =
            f.affine ? static_cast<float>(b.c[j]) * b.d + b.m : static_cast<float>(b.c[j]) * b.d;
        ASSERT_EQ(y[i * kQK + j], expect) << "block " << i << " elem " << j;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Q8_K (the K-quants' activation format): round trip only.

TEST(QuantQ8K, RoundTrip) {
  for (size_t blocks : {1, 3}) {
    for (uint64_t seed : {1, 2}) {
      auto x = test::random_with_outliers(blocks * kQK_K, seed);
      if (seed == 2) std::fill(x.begin(), x.begin() + kQK_K, 0.0f);  // an all-zero block
      const auto q = quantize(QType::Q8_K, x);
      const auto y = dequantize(QType::Q8_K, q, x.size());
      for (size_t i = 0; i < blocks; ++i) {
        BlockQ8_K b;
        std::memcpy(&b, q.data() + i * sizeof(BlockQ8_K), sizeof b);
        for (int g = 0; g < kQK_K / 16; ++g) {
          int sum = 0;
          for (int k = 0; k < 16; ++k) sum += b.qs[g * 16 + k];
          EXPECT_EQ(b.bsums[g], sum) << "block " << i << " group " << g;
        }
        for (int j = 0; j < kQK_K; ++j) {
          const size_t k = i * kQK_K + j;
          ASSERT_EQ(y[k], b.d * b.qs[j]);
          ASSERT_LE(std::fabs(x[k] - y[k]), std::fabs(b.d) * 0.5001f + 1e-30f)
              << "block " << i << " elem " << j;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// f16

// Value of a non-negative f16 pattern from its definition; 0x7c00 (inf) is
// taken as 65536, the value it stands for when rounding with an unbounded exponent.
long double f16_value(uint32_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (h == 0x7c00) return 65536.0L;
  if (e == 0) return std::ldexp(static_cast<long double>(m), -24);
  return std::ldexp(1.0L + m / 1024.0L, e - 15);
}

// Slow round-to-nearest-even f32 -> f16, by search over the f16 grid.
uint16_t f16_reference(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00 | sign;
  const long double a = std::fabs(static_cast<long double>(f));
  if (a >= 65536.0L) return sign | 0x7c00;
  // Largest lo with value(lo) <= a.
  uint32_t lo = 0, hi = 0x7c00;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (f16_value(mid) <= a ? lo : hi) = mid;
  }
  if (f16_value(hi) <= a) lo = hi;
  if (lo == 0x7c00) return sign | 0x7c00;
  const long double below = a - f16_value(lo), above = f16_value(lo + 1) - a;
  uint32_t r = lo;
  if (above < below || (above == below && (lo & 1))) r = lo + 1;
  return static_cast<uint16_t>(sign | r);
}

TEST(F16, AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = f32_to_f16(f);
      ASSERT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
      continue;
    }
    const long double v = (h & 0x8000 ? -1 : 1) * f16_value(h & 0x7fff);
    if ((h & 0x7fff) == 0x7c00)
      ASSERT_TRUE(std::isinf(f) && std::signbit(f) == !!(h & 0x8000));
    else
      ASSERT_EQ(static_cast<long double>(f), v) << std::hex << h;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(F16, TiesToEvenAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    // The midpoint has 12 significant bits, so it is exact in f32.
    const long double mid = (f16_value(h) + f16_value(h + 1)) / 2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<long double>(m), mid);
    const uint16_t even = static_cast<uint16_t>(h & 1 ? h + 1 : h);
    for (float s : {1.0f, -1.0f}) {
      const uint16_t sb = s < 0 ? 0x8000 : 0;
      ASSERT_EQ(f32_to_f16(s * m), even | sb) << std::hex << h;
      ASSERT_EQ(f32_to_f16(s * std::nextafter(m, 0.0f)), h | sb) << std::hex << h;
      ASSERT_EQ(f32_to_f16(s * std::nextafter(m, 1e30f)), (h + 1) | sb) << std::hex << h;
    }
  }
}

TEST(F16, RandomFloatsMatchReference) {
  Rng rng(2024);
  for (int i = 0; i < 300000; ++i) {
    // Half over all bit patterns, half with exponents near f16's range.
    uint32_t u = rng.next_u32();
    if (i & 1) u = (u & 0x807fffffu) | ((100 + rng.next_u32() % 48) << 23);
    const float f = f32_from_bits(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), f16_reference(f)) << std::hex << u;
  }
}

TEST(F16, SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t qnan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE((qnan & 0x7c00) == 0x7c00 && (qnan & 0x3ff) != 0);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);  // just under the overflow midpoint
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);    // the midpoint: ties to even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);         // half of it: tie to even (0)
  EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);  // just above the tie
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);       // 1.5 units: tie to even (2)
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);         // smallest normal
  EXPECT_EQ(f32_to_f16(0x1.ff8p-15f), 0x03ff);     // largest subnormal
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);     // tie above it rounds up into the normals
  EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_f16(f32_from_bits(1)), 0x0000);  // f32 subnormal
  EXPECT_EQ(f32_to_f16(-f32_from_bits(1)), 0x8000);
}

// ---------------------------------------------------------------------------
// bf16

TEST(BF16, AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_bits(f), h << 16);
    if (std::isnan(f)) {
      const uint16_t back = f32_to_bf16(f);
      ASSERT_TRUE((back & 0x7f80) == 0x7f80 && (back & 0x7f) != 0) << std::hex << h;
      ASSERT_EQ(back & 0x40, 0x40) << "NaN must come back quiet: " << std::hex << h;
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
}

// Slow round-to-nearest-even f32 -> bf16 from the two bf16 neighbours.
uint16_t bf16_reference(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t lo = (u & 0x7fffffffu) >> 16;
  auto value = [](uint32_t b) {
    return b == 0x7f80 ? std::ldexp(1.0L, 128) : static_cast<long double>(bf16_to_f32(b));
  };
  const long double a = std::fabs(static_cast<long double>(f));
  const long double below = a - value(lo), above = value(lo + 1) - a;
  uint32_t r = lo;
  if (above < below || (above == below && (lo & 1))) r = lo + 1;
  return static_cast<uint16_t>((sign >> 16) | r);
}

TEST(BF16, RandomFloatsMatchReference) {
  Rng rng(77);
  for (int i = 0; i < 300000; ++i) {
    uint32_t u = rng.next_u32();
    if (i % 3 == 1) u = (u & 0xffff0000u) | 0x8000;              // exact ties
    if (i % 3 == 2) u = (u & 0xffff0000u) | (0x7fff + (i & 2));  // one off a tie
    const float f = f32_from_bits(u);
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), bf16_reference(f)) << std::hex << u;
  }
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x00018000u)), 0x0002);         // subnormal tie: even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x00008000u)), 0x0000);
}

// ---------------------------------------------------------------------------
// fp8 e4m3 (OCP "fn": bias 7, no infinities, S.1111.111 is NaN, max 448)

long double e4m3_value(uint32_t c) {  // non-negative codes 0..0x7e
  const int e = (c >> 3) & 0xf;
  const int m = c & 7;
  if (e == 0) return std::ldexp(static_cast<long double>(m), -9);
  return std::ldexp(1.0L + m / 8.0L, e - 7);
}

uint8_t e4m3_reference(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const long double a = std::fabs(static_cast<long double>(f));
  uint32_t best = 0;
  for (uint32_t c = 1; c <= 0x7e; ++c) {
    const long double dc = std::fabs(e4m3_value(c) - a), db = std::fabs(e4m3_value(best) - a);
    if (dc < db || (dc == db && !(c & 1))) best = c;
  }
  return static_cast<uint8_t>(sign | best);  // above 448 the nearest code is 448: saturation
}

TEST(FP8E4M3, AllCodesRoundTrip) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      ASSERT_TRUE(std::isnan(f)) << c;
      continue;
    }
    ASSERT_EQ(static_cast<long double>(std::fabs(f)), e4m3_value(c & 0x7f)) << c;
    ASSERT_EQ(std::signbit(f), (c & 0x80) != 0) << c;
    ASSERT_EQ(f32_to_fp8_e4m3(f), c) << c;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);
}

TEST(FP8E4M3, SaturatesAndNaN) {
  for (float v : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 1e38f,
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f32_to_fp8_e4m3(v), 0x7e) << v;
    EXPECT_EQ(f32_to_fp8_e4m3(-v), 0xfe) << v;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(1e-30f), 0x00);
}

TEST(FP8E4M3, TiesToEven) {
  for (uint32_t c = 0; c < 0x7e; ++c) {
    const float mid = static_cast<float>((e4m3_value(c) + e4m3_value(c + 1)) / 2);
    const uint8_t even = static_cast<uint8_t>(c & 1 ? c + 1 : c);
    EXPECT_EQ(f32_to_fp8_e4m3(mid), even) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-mid), even | 0x80) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e30f)), c + 1) << c;
  }
}

TEST(FP8E4M3, RandomFloatsMatchReference) {
  Rng rng(8);
  for (int i = 0; i < 20000; ++i) {
    const float f = static_cast<float>(
        std::ldexp(rng.uniform(-2, 2), static_cast<int>(rng.next_u32() % 24) - 12));
    ASSERT_EQ(f32_to_fp8_e4m3(f), e4m3_reference(f)) << f;
  }
}

}  // namespace
}  // namespace sustain

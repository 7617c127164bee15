// K-quants (Q2_K … Q6_K, Q8_K): block layouts pinned by hand-decoded blocks,
// round-trip error bounds, awkward inputs, and quantization error against
// llama.cpp's own quantizer on the reference models.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"
#include "tensor/quant.h"
#include "tensor/quant_test_util.h"
#include "test_util.h"

namespace sustain {
namespace {

using test::dequantize;
using test::quantize;
using test::random_normal;
using test::relative_rmse;
using test::round_trip;

constexpr QType kKQuants[] = {QType::Q2_K, QType::Q3_K, QType::Q4_K,
                              QType::Q5_K, QType::Q6_K, QType::Q8_K};

std::string type_name(const testing::TestParamInfo<QType>& info) {
  return std::string(qtype_name(info.param));
}

// Relative RMSE bounds on unit-normal data, about 15% above what the quantizers
// reach on 1M elements (Q2_K .284, Q3_K .150, Q4_K .0705, Q5_K .0350, Q6_K .0177,
// Q8_K .0070), so a regression in the search shows while small inputs still pass.
double error_bound(QType t) {
  switch (t) {
    case QType::Q2_K:
      return 0.33;
    case QType::Q3_K:
      return 0.175;
    case QType::Q4_K:
      return 0.082;
    case QType::Q5_K:
      return 0.041;
    case QType::Q6_K:
      return 0.0205;
    case QType::Q8_K:
      return 0.0081;
    default:
      return 0;
  }
}

// The same for rows with 1% of values 20x larger (random_with_outliers), measured
// at Q2_K .244, Q3_K .154, Q4_K .0966, Q5_K .0480, Q6_K .0325, Q8_K .0267. Q6_K and
// Q8_K lose most: one outlier coarsens the whole 256-element block's steps.
double outlier_error_bound(QType t) {
  switch (t) {
    case QType::Q2_K:
      return 0.28;
    case QType::Q3_K:
      return 0.178;
    case QType::Q4_K:
      return 0.111;
    case QType::Q5_K:
      return 0.0552;
    case QType::Q6_K:
      return 0.0374;
    case QType::Q8_K:
      return 0.0307;
    default:
      return 0;
  }
}

template <typename Block>
std::vector<float> decode(QType t, const Block& b) {
  std::vector<uint8_t> bytes(sizeof(Block));
  std::memcpy(bytes.data(), &b, sizeof(Block));
  return dequantize(t, bytes, kQK_K);
}

// ---------------------------------------------------------------------------------------------
// Hand-built blocks: fields set by hand, expected values worked out by hand from
// ggml's formulas, so the bit layout cannot drift unnoticed.

TEST(KQuantLayout, Q2K) {
  BlockQ2_K b{};
  b.d = f32_to_f16(0.5f);
  b.dmin = f32_to_f16(0.25f);
  b.scales[0] = 0x21;  // scale 1, min 2
  b.scales[2] = 0x13;  // scale 3, min 1
  b.scales[9] = 0xF5;  // scale 5, min 15
  b.qs[0] = 0xE4;      // codes 0, 1, 2, 3 for elements 0, 32, 64, 96
  b.qs[48] = 0x02;     // element 128 + 16 = 144: code 2
  std::vector<float> want(kQK_K, 0.0f);
  for (int i = 0; i < 16; ++i) want[i] = -0.5f;      // 0.5*1*0 - 0.25*2
  for (int i = 32; i < 48; ++i) want[i] = -0.25f;    // 0.5*3*0 - 0.25*1
  for (int i = 144; i < 160; ++i) want[i] = -3.75f;  // 0.5*5*0 - 0.25*15
  want[32] = 1.25f;                                  // 0.5*3*1 - 0.25
  want[144] = 1.25f;                                 // 0.5*5*2 - 3.75
  EXPECT_EQ(decode(QType::Q2_K, b), want);
}

TEST(KQuantLayout, Q3K) {
  BlockQ3_K b{};
  b.d = f32_to_f16(0.5f);
  // 6-bit codes (scale = code - 32): sub-block 0 -> 33, 5 -> 30, 12 -> 63, the rest 32.
  // Low nibbles in bytes 0-7 (sub-blocks 8-15 in the high halves); the top two
  // bits of sub-block j in byte 8 + j % 4 at bit 2 * (j / 4).
  const uint8_t scales[12] = {0x01, 0, 0, 0, 0xF0, 0x0E, 0, 0, 0xEA, 0xA6, 0xAA, 0xAA};
  std::memcpy(b.scales, scales, 12);
  b.qs[0] = 0x03;      // element 0: low bits 3
  b.hmask[0] = 0x01;   // ... and high bit set: q = 3
  b.qs[16] = 0x10;     // element 80 (shift 4): low bits 1
  b.hmask[16] = 0x04;  // ... high bit (bit 80 / 32 = 2) set: q = 1
  b.hmask[17] = 0x04;  // element 81: q = 0
  b.qs[40] = 0x20;     // element 200 (qs[32 + 8], shift 4): low bits 2, high bit clear: q = -2
  std::vector<float> want(kQK_K, 0.0f);
  // With no bits set q = -4.
  for (int i = 0; i < 16; ++i) want[i] = -2.0f;      // 0.5 * 1 * -4
  for (int i = 80; i < 96; ++i) want[i] = 4.0f;      // 0.5 * -2 * -4
  for (int i = 192; i < 208; ++i) want[i] = -62.0f;  // 0.5 * 31 * -4
  want[0] = 1.5f;
  want[80] = -1.0f;
  want[81] = 0.0f;
  want[200] = -31.0f;
  EXPECT_EQ(decode(QType::Q3_K, b), want);
}

BlockQ4_K q4k_test_block() {
  BlockQ4_K b{};
  b.d = f32_to_f16(0.5f);
  b.dmin = f32_to_f16(2.0f);
  // Sub-block 0: scale 10, min 3. Sub-block 5: scale 33, min 40 (low nibbles in
  // byte 9, top bits in bits 6-7 of bytes 1 and 5).
  const uint8_t scales[12] = {10, 0x80, 0, 0, 3, 0x80, 0, 0, 0, 0x81, 0, 0};
  std::memcpy(b.scales, scales, 12);
  b.qs[0] = 0x0F;   // element 0: q = 15
  b.qs[74] = 0x70;  // element 160 + 10 (sub-block 5 = high nibbles of qs[64..95]): q = 7
  return b;
}

TEST(KQuantLayout, Q4K) {
  const BlockQ4_K b = q4k_test_block();
  std::vector<float> want(kQK_K, 0.0f);
  for (int i = 0; i < 32; ++i) want[i] = -6.0f;      // 0.5*10*0 - 2*3
  for (int i = 160; i < 192; ++i) want[i] = -80.0f;  // 0.5*33*0 - 2*40
  want[0] = 69.0f;                                   // 5 * 15 - 6
  want[170] = 35.5f;                                 // 16.5 * 7 - 80
  EXPECT_EQ(decode(QType::Q4_K, b), want);
}

TEST(KQuantLayout, Q5K) {
  const BlockQ4_K b4 = q4k_test_block();
  BlockQ5_K b{};
  b.d = b4.d;
  b.dmin = b4.dmin;
  std::memcpy(b.scales, b4.scales, 12);
  std::memcpy(b.qs, b4.qs, sizeof(b.qs));
  b.qh[0] = 0x01;   // element 0 (bit 0 / 32 = 0): q = 15 + 16
  b.qh[10] = 0x20;  // element 170 (bit 170 / 32 = 5): q = 7 + 16
  b.qh[1] = 0x02;   // element 33: sub-block 1 has scale 0, stays 0
  std::vector<float> want(kQK_K, 0.0f);
  for (int i = 0; i < 32; ++i) want[i] = -6.0f;
  for (int i = 160; i < 192; ++i) want[i] = -80.0f;
  want[0] = 149.0f;    // 5 * 31 - 6
  want[170] = 299.5f;  // 16.5 * 23 - 80
  EXPECT_EQ(decode(QType::Q5_K, b), want);
}

TEST(KQuantLayout, Q6K) {
  BlockQ6_K b{};
  b.d = f32_to_f16(0.25f);
  b.scales[0] = 2;
  b.scales[7] = -3;
  b.scales[15] = 127;
  // Element 128h + 32k + l: low nibble of ql[64h + 32(k % 2) + l] (high nibble for k >= 2),
  // top two bits at qh[32h + l] >> 2k.
  b.ql[5] = 0x0F;
  b.qh[5] = 0x03;  // element 5: q = 63
  b.ql[51] = 0xA0;
  b.qh[19] = 0x80;  // element 115 (h 0, k 3, l 19): q = 10 | 2 << 4 = 42
  b.ql[122] = 0x10;
  b.qh[58] = 0x40;  // element 250 (h 1, k 3, l 26): q = 1 | 1 << 4 = 17
  std::vector<float> want(kQK_K, 0.0f);
  for (int i = 0; i < 16; ++i) want[i] = -16.0f;       // 0.25 * 2 * (0 - 32)
  for (int i = 112; i < 128; ++i) want[i] = 24.0f;     // 0.25 * -3 * -32
  for (int i = 240; i < 256; ++i) want[i] = -1016.0f;  // 0.25 * 127 * -32
  want[5] = 15.5f;                                     // 0.25 * 2 * 31
  want[115] = -7.5f;                                   // 0.25 * -3 * 10
  want[250] = -476.25f;                                // 0.25 * 127 * -15
  EXPECT_EQ(decode(QType::Q6_K, b), want);
}

TEST(KQuantLayout, Q8K) {
  BlockQ8_K b{};
  b.d = 0.5f;
  b.qs[0] = -127;
  b.qs[255] = 3;
  std::vector<float> want(kQK_K, 0.0f);
  want[0] = -63.5f;
  want[255] = 1.5f;
  EXPECT_EQ(decode(QType::Q8_K, b), want);
}

// ggml's convention: the largest-magnitude element maps to -127, so d carries the
// opposite sign; bsums hold the sums of each 16 codes.
TEST(KQuantLayout, Q8KQuantizeConvention) {
  std::vector<float> x = random_normal(kQK_K, 7);
  x[37] = 4.0f;  // the largest magnitude, positive
  BlockQ8_K b;
  quantize_q8_k(x.data(), &b, kQK_K);
  EXPECT_FLOAT_EQ(b.d, -4.0f / 127);
  EXPECT_EQ(b.qs[37], -127);
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
    EXPECT_EQ(b.bsums[j], sum) << "bsums[" << j << "]";
  }
  for (int i = 0; i < kQK_K; ++i) {
    EXPECT_EQ(b.qs[i], static_cast<int>(std::nearbyint(x[i] * (-127.0f / 4.0f)))) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips.

class KQuant : public testing::TestWithParam<QType> {};

TEST_P(KQuant, RoundTripAwkwardSizes) {
  const QType t = GetParam();
  for (int blocks : {1, 3, 17}) {
    const size_t n = static_cast<size_t>(blocks) * kQK_K;
    const std::vector<float> x = random_normal(n, 1000 + blocks, 0.05f);
    const std::vector<uint8_t> q = quantize(t, x);
    EXPECT_EQ(q, quantize(t, x)) << "not deterministic";
    const std::vector<float> y = dequantize(t, q, n);
    EXPECT_LE(relative_rmse(y, x), error_bound(t)) << blocks << " blocks";
    // Blocks are independent: quantizing one block at a time gives the same bytes.
    const size_t bb = qtype_traits(t).block_bytes;
    for (int i = 0; i < blocks; ++i) {
      const std::vector<float> xi(x.begin() + i * kQK_K, x.begin() + (i + 1) * kQK_K);
      const std::vector<uint8_t> qi = quantize(t, xi);
      EXPECT_EQ(0, std::memcmp(qi.data(), q.data() + i * bb, bb)) << "block " << i;
    }
  }
}

TEST_P(KQuant, ErrorBoundLarge) {
  const QType t = GetParam();
  const std::vector<float> x = random_normal(64 * kQK_K, 42);
  EXPECT_LE(relative_rmse(round_trip(t, x), x), error_bound(t));
  // Heavy-tailed rows, like real weights: a few channels set the scales.
  const std::vector<float> xo = test::random_with_outliers(64 * kQK_K, 43);
  EXPECT_LE(relative_rmse(round_trip(t, xo), xo), outlier_error_bound(t));
}

TEST_P(KQuant, AllZeros) {
  const QType t = GetParam();
  const std::vector<float> x(2 * kQK_K, 0.0f);
  for (float v : round_trip(t, x)) ASSERT_EQ(v, 0.0f);
}

TEST_P(KQuant, Constant) {
  const QType t = GetParam();
  for (float c : {0.7f, -0.7f, 3e4f}) {
    const std::vector<float> x(kQK_K, c);
    const std::vector<float> y = round_trip(t, x);
    // A constant block is one scale (or min) times one code: only the scale's
    // own rounding (fp16 and the 4- to 8-bit sub-scale) is left.
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], c, 0.04 * std::fabs(c)) << "c=" << c << " i=" << i;
    }
  }
}

TEST_P(KQuant, SingleOutlier) {
  const QType t = GetParam();
  std::vector<float> x(kQK_K, 0.0f);
  x[77] = 100.0f;
  const std::vector<float> y = round_trip(t, x);
  EXPECT_NEAR(y[77], 100.0f, 1.0f);
  for (size_t i = 0; i < y.size(); ++i) {
    if (i != 77) {
      ASSERT_EQ(y[i], 0.0f) << i;  // zeros sit exactly on every grid
    }
  }
  // A 20-sigma outlier among normal values keeps its size, and where the format
  // has sub-block scales (all but Q8_K) the other sub-blocks keep their precision.
  std::vector<float> xn = random_normal(kQK_K, 5, 0.02f);
  xn[200] = -0.4f;
  const std::vector<float> yn = round_trip(t, xn);
  EXPECT_NEAR(yn[200], -0.4f, 0.01f);
  if (t != QType::Q8_K) {
    const std::vector<float> head(xn.begin(), xn.begin() + 128);
    const std::vector<float> yhead(yn.begin(), yn.begin() + 128);
    EXPECT_LE(relative_rmse(yhead, head), 1.5 * error_bound(t));
  }
}

TEST_P(KQuant, AllNegative) {
  const QType t = GetParam();
  std::vector<float> x = random_normal(4 * kQK_K, 9);
  for (float& v : x) v = -std::fabs(v) - 0.5f;
  const std::vector<float> y = round_trip(t, x);
  EXPECT_LE(relative_rmse(y, x), error_bound(t));
  for (float v : y) ASSERT_LE(v, 0.0f);
}

TEST_P(KQuant, TinyValues) {
  const QType t = GetParam();
  // 1e-3 keeps the fp16 super-block scales normal: the usual bound holds.
  const std::vector<float> x = random_normal(4 * kQK_K, 11, 1e-3f);
  EXPECT_LE(relative_rmse(round_trip(t, x), x), error_bound(t));
  // Far below fp16's range the scales flush to zero: the output must still be
  // finite and no further from x than zero is.
  const std::vector<float> xt = random_normal(4 * kQK_K, 12, 1e-9f);
  const std::vector<float> yt = round_trip(t, xt);
  for (float v : yt) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LE(relative_rmse(yt, xt), 1.0 + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Tensor, KQuant, testing::ValuesIn(kKQuants), type_name);

// ---------------------------------------------------------------------------------------------
// Against llama.cpp: every K-quant tensor of its quantized reference models,
// re-quantized by us from the same f32 tensor, must be no more than 5% further
// from the f32 original (RMSE) than llama.cpp's own tensor.

TEST(KQuantVsLlamaCpp, RmseOnReferenceModels) {
  SUSTAIN_REQUIRE_REF();
  auto f32 = gguf::File::open(test::ref_path("models/tiny-llama-f32.gguf"));
  ASSERT_TRUE(f32.has_value()) << f32.status().message();
  int compared = 0;
  std::printf("%-26s %-24s %-5s %12s %12s %7s\n", "file", "tensor", "type", "rmse ours",
              "rmse llama", "ratio");
  for (const char* model : {"tiny-llama-Q4_K_M", "tiny-llama-Q5_K_M", "tiny-llama-Q6_K"}) {
    auto qf = gguf::File::open(test::ref_path(std::string("models/") + model + ".gguf"));
    ASSERT_TRUE(qf.has_value()) << qf.status().message();
    for (const gguf::TensorInfo& qt : qf->tensors()) {
      if (qt.type != QType::Q2_K && qt.type != QType::Q3_K && qt.type != QType::Q4_K &&
          qt.type != QType::Q5_K && qt.type != QType::Q6_K) {
        continue;
      }
      const gguf::TensorInfo* ft = f32->find_tensor(qt.name);
      ASSERT_NE(ft, nullptr) << qt.name;
      ASSERT_EQ(ft->type, QType::F32) << qt.name;
      ASSERT_EQ(ft->n_elements, qt.n_elements) << qt.name;
      const size_t n = ft->n_elements;
      std::vector<float> x(n);
      std::memcpy(x.data(), ft->data, n * sizeof(float));

      const std::vector<uint8_t> theirs(qt.data, qt.data + qt.n_bytes);
      const double rmse_theirs = test::rmse(dequantize(qt.type, theirs, n), x);
      const double rmse_ours = test::rmse(round_trip(qt.type, x), x);
      std::printf("%-26s %-24s %-5s %12.6e %12.6e %7.4f\n", model, qt.name.c_str(),
                  std::string(qtype_name(qt.type)).c_str(), rmse_ours, rmse_theirs,
                  rmse_ours / rmse_theirs);
      EXPECT_LE(rmse_ours, 1.05 * rmse_theirs) << model << " " << qt.name;
      // llama.cpp's tensor must decode to something near f32 too, else the
      // comparison (and our reading of its layout) means nothing.
      EXPECT_LE(rmse_theirs, 2 * error_bound(qt.type) * test::rms(x.data(), n)) << qt.name;
      ++compared;
    }
  }
  // All 23 weight matrices of each file are K-quants.
  EXPECT_GE(compared, 60);
}

}  // namespace
}  // namespace sustain

// The row-tile layout (tensor/row_tiles.h): every row of every shape comes
// back byte for byte, the rows past n_out are zero, the size is whole
// groups of the row layout's bytes, and the bytes land where the header says
// (checked on one hand-made Q5_0 group).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"
#include "tensor/row_tiles.h"

namespace sustain {
namespace {

std::vector<uint8_t> random_rows(QType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  const size_t rb = qtype_row_bytes(t, static_cast<uint64_t>(n_in));
  std::vector<uint8_t> w(rb * static_cast<size_t>(n_out));
  std::mt19937 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  return w;
}

TEST(RowTiles, EveryRowComesBackByteForByte) {
  for (QType t : {QType::Q4_0, QType::Q5_0, QType::Q8_0, QType::Q4_K, QType::Q6_K}) {
    for (int64_t n_out : {1, 15, 16, 17, 40})
      for (int64_t n_in : {32, 96, 256, 576, 768}) {
        if (n_in % (t == QType::Q4_K || t == QType::Q6_K ? 256 : 32) != 0) continue;
        SCOPED_TRACE(std::string(qtype_name(t)) + " " + std::to_string(n_out) + "x" +
                     std::to_string(n_in));
        const size_t rb = qtype_row_bytes(t, static_cast<uint64_t>(n_in));
        const auto rows = random_rows(t, n_out, n_in, static_cast<uint32_t>(n_out * 7 + n_in));
        const size_t bytes = row_tiles_bytes(t, n_out, n_in);
        EXPECT_EQ(bytes, static_cast<size_t>((n_out + 15) / 16) * 16 * rb);
        std::vector<uint8_t> tiles(bytes, 0xAB);
        to_row_tiles(t, rows.data(), rb, n_out, n_in, tiles.data());
        std::vector<uint8_t> back(rb);
        for (int64_t r = 0; r < n_out; ++r) {
          from_row_tiles(t, tiles.data(), n_in, r, back.data());
          ASSERT_EQ(std::memcmp(back.data(), rows.data() + r * rb, rb), 0) << "row " << r;
        }
        const std::vector<uint8_t> zero(rb, 0);
        for (int64_t r = n_out; r < (n_out + 15) / 16 * 16; ++r) {
          from_row_tiles(t, tiles.data(), n_in, r, back.data());
          ASSERT_EQ(std::memcmp(back.data(), zero.data(), rb), 0) << "padding row " << r;
        }
      }
  }
  EXPECT_TRUE(row_tiles_format(QType::Q4_K));
  EXPECT_TRUE(row_tiles_format(QType::Q6_K));
  EXPECT_FALSE(row_tiles_format(QType::Q5_K));
  EXPECT_FALSE(row_tiles_format(QType::Q4_1));
  EXPECT_TRUE(row_tiles_format(QType::Q5_0));
}

// One Q5_0 group block by hand: row r's dword j of qs at nib[j][r], its qh
// bits 4k..4k+3 at bits 4r..4r+3 of hi[k], its d at d[r].
TEST(RowTiles, Q5_0GroupBlockIsWhereTheHeaderSaysIt) {
  std::vector<BlockQ5_0> rows(16);
  for (int r = 0; r < 16; ++r) {
    rows[r].d = static_cast<uint16_t>(0x3C00 + r);
    const uint32_t qh = 0x01234567u * static_cast<uint32_t>(r + 1);
    std::memcpy(rows[r].qh, &qh, 4);
    for (int i = 0; i < 16; ++i) rows[r].qs[i] = static_cast<uint8_t>(16 * r + i);
  }
  std::vector<uint8_t> g(row_tiles_bytes(QType::Q5_0, 16, 32));
  ASSERT_EQ(g.size(), 352u);
  to_row_tiles(QType::Q5_0, rows.data(), sizeof(BlockQ5_0), 16, 32, g.data());
  for (int r = 0; r < 16; ++r) {
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(std::memcmp(g.data() + (j * 16 + r) * 4, rows[r].qs + 4 * j, 4), 0);
    uint32_t qh = 0;
    std::memcpy(&qh, rows[r].qh, 4);
    for (int k = 0; k < 8; ++k) {
      uint64_t hi = 0;
      std::memcpy(&hi, g.data() + 256 + 8 * k, 8);
      EXPECT_EQ((hi >> (4 * r)) & 0xF, (qh >> (4 * k)) & 0xF) << "row " << r << " k " << k;
    }
    uint16_t d = 0;
    std::memcpy(&d, g.data() + 320 + 2 * r, 2);
    EXPECT_EQ(d, rows[r].d);
  }
}

// One Q6_K group block by hand: row r's ql dword k at w[k][r], qh dword k at
// w[32 + k][r], scale dword k at w[48 + k][r], its d at byte 3328 + 2r.
TEST(RowTiles, Q6_KGroupBlockIsWhereTheHeaderSaysIt) {
  std::vector<BlockQ6_K> rows(16);
  for (int r = 0; r < 16; ++r) {
    rows[r].d = static_cast<uint16_t>(0x3C00 + r);
    for (int i = 0; i < 128; ++i) rows[r].ql[i] = static_cast<uint8_t>(7 * r + i);
    for (int i = 0; i < 64; ++i) rows[r].qh[i] = static_cast<uint8_t>(11 * r + 3 * i);
    for (int i = 0; i < 16; ++i) rows[r].scales[i] = static_cast<int8_t>(r - 8 * i);
  }
  std::vector<uint8_t> g(row_tiles_bytes(QType::Q6_K, 16, 256));
  ASSERT_EQ(g.size(), 3360u);
  to_row_tiles(QType::Q6_K, rows.data(), sizeof(BlockQ6_K), 16, 256, g.data());
  for (int r = 0; r < 16; ++r) {
    for (int k = 0; k < 32; ++k)
      EXPECT_EQ(std::memcmp(g.data() + (k * 16 + r) * 4, rows[r].ql + 4 * k, 4), 0);
    for (int k = 0; k < 16; ++k)
      EXPECT_EQ(std::memcmp(g.data() + ((32 + k) * 16 + r) * 4, rows[r].qh + 4 * k, 4), 0);
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(std::memcmp(g.data() + ((48 + k) * 16 + r) * 4, rows[r].scales + 4 * k, 4), 0);
    uint16_t d = 0;
    std::memcpy(&d, g.data() + 3328 + 2 * r, 2);
    EXPECT_EQ(d, rows[r].d);
  }
}

}  // namespace
}  // namespace sustain

// The tiled page layout (kv/tiled.h): every row comes back byte for byte in
// any write order, every byte of a full group is defined by its rows, and
// the arrangement is the documented one (the kernels depend on it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/tiled.h"
#include "tensor/blocks.h"

namespace sustain::kv {
namespace {

constexpr QType kTypes[] = {QType::Q8_0, QType::Q4_0, QType::Q4_1,
                            QType::Q5_0, QType::Q5_1, QType::FP8_E4M3};

std::vector<uint8_t> random_row(QType t, int dim, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(dim);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> row(qtype_row_bytes(t, dim));
  qtype_traits(t).quantize(x.data(), row.data(), dim);
  return row;
}

TEST(KvTiled, RowsRoundTripInAnyOrder) {
  std::mt19937 rng(7);
  for (QType t : kTypes) {
    for (TileRole role : {TileRole::kKey, TileRole::kValue}) {
      for (int dim : {32, 64, 96}) {
        constexpr int kSlots = 48;  // three groups
        const size_t rb = qtype_row_bytes(t, dim);
        std::vector<std::vector<uint8_t>> rows;
        for (int s = 0; s < kSlots; ++s) rows.push_back(random_row(t, dim, rng));
        std::vector<int> order(kSlots);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        // Two pools, one pre-filled with 0x00 and one with 0xff: once every
        // key of a group is written, no byte may depend on what was there.
        std::vector<uint8_t> a(rb * kSlots, 0x00), b(rb * kSlots, 0xff);
        for (int s : order) {
          // A stale row first, then the real one: overwriting must not leave bits.
          tile_row(t, role, dim, random_row(t, dim, rng).data(), s, a.data());
          tile_row(t, role, dim, rows[s].data(), s, a.data());
          tile_row(t, role, dim, rows[s].data(), s, b.data());
        }
        EXPECT_EQ(a, b) << qtype_name(t) << " dim " << dim;
        std::vector<uint8_t> back(rb);
        for (int s = 0; s < kSlots; ++s) {
          untile_row(t, role, dim, a.data(), s, back.data());
          ASSERT_EQ(back, rows[s]) << qtype_name(t) << " dim " << dim << " slot " << s;
        }
        // Tiled means rearranged: the pool is not the rows back to back.
        std::vector<uint8_t> flat;
        for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
        EXPECT_NE(a, flat);
      }
    }
  }
}

TEST(KvTiled, FormatSizesMatchSixteenBlocks) {
  EXPECT_EQ(tile_format(QType::Q8_0).bytes, 16 * sizeof(BlockQ8_0));
  EXPECT_EQ(tile_format(QType::Q4_0).bytes, 16 * sizeof(BlockQ4_0));
  EXPECT_EQ(tile_format(QType::Q4_1).bytes, 16 * sizeof(BlockQ4_1));
  EXPECT_EQ(tile_format(QType::Q5_0).bytes, 16 * sizeof(BlockQ5_0));
  EXPECT_EQ(tile_format(QType::Q5_1).bytes, 16 * sizeof(BlockQ5_1));
  EXPECT_FALSE(tileable(QType::F16));
  EXPECT_FALSE(tileable(QType::Q4_K));
  EXPECT_EQ(tile_format(QType::FP8_E4M3).bytes, 16u * 32u);
  EXPECT_EQ(tile_format(QType::FP8_E4M3).codes_off, 0u);
}

// A head dim that is not a whole number of 32-element group-blocks keeps
// FP8 row by row (its rows have no blocks of their own).
TEST(KvTiled, Fp8NeedsWholeGroupBlocks) {
  KvGeometry g;
  g.n_layer = 1;
  g.n_head_kv = 1;
  g.head_dim_k = 48;
  g.head_dim_v = 64;
  g.k_type = g.v_type = QType::FP8_E4M3;
  EXPECT_FALSE(g.k_tiled());
  EXPECT_TRUE(g.v_tiled());
  g.page_tokens = 24;
  EXPECT_FALSE(g.v_tiled());
}

// Spot checks of the documented arrangement, on hand-made blocks.
TEST(KvTiled, ArrangementIsTheDocumentedOne) {
  // Q8_0, key role: byte c·64 + 4t + k = element 4c + k of key t, + 128.
  {
    std::vector<uint8_t> pool(16 * sizeof(BlockQ8_0) * 2, 0);
    BlockQ8_0 blk{};
    for (int e = 0; e < 32; ++e) blk.qs[e] = static_cast<int8_t>(e - 16);
    blk.d = 0x3c00;
    tile_row(QType::Q8_0, TileRole::kKey, 32, reinterpret_cast<uint8_t*>(&blk), 21, pool.data());
    const uint8_t* gb = pool.data() + 16 * sizeof(BlockQ8_0);  // group 1
    const TileFormat f = tile_format(QType::Q8_0);
    const int t = 5;
    uint16_t d;
    std::memcpy(&d, gb + 2 * t, 2);
    EXPECT_EQ(d, 0x3c00);
    for (int e = 0; e < 32; ++e)
      EXPECT_EQ(gb[f.codes_off + (e / 4) * 64 + 4 * t + e % 4], uint8_t(e - 16) ^ 0x80);
  }
  // FP8, both roles: item k of lane l = 4L + u at byte 16L + 2u + k (k < 2)
  // or 16L + 8 + 2u + k - 2 (k >= 2) of its line.
  {
    const auto byte_of = [](int l, int k) {
      return 16 * (l / 4) + (k < 2 ? 2 * (l % 4) + k : 8 + 2 * (l % 4) + k - 2);
    };
    std::vector<uint8_t> pool(16 * 64 * 2, 0);  // one group, dim 64: two group-blocks
    uint8_t row[64];
    for (int e = 0; e < 64; ++e) row[e] = uint8_t(e * 3 + 1);
    const int t = 6;
    tile_row(QType::FP8_E4M3, TileRole::kKey, 64, row, t, pool.data());
    for (int e = 0; e < 64; ++e)  // block e / 32, line (e % 32) / 4, item e % 4
      EXPECT_EQ(pool[(e / 32) * 512 + ((e % 32) / 4) * 64 + byte_of(t, e % 4)], row[e]) << e;
    std::fill(pool.begin(), pool.end(), 0);
    const int key = 13, s = key / 4, k = key % 4;
    tile_row(QType::FP8_E4M3, TileRole::kValue, 64, row, key, pool.data());
    for (int e = 0; e < 64; ++e) {  // line 2s + h, lane e % 16, item k
      const int b = e / 32, h = (e % 32) / 16;
      EXPECT_EQ(pool[b * 512 + (2 * s + h) * 64 + byte_of(e % 16, k)], row[e]) << e;
    }
  }
  // Q5_1, value role: byte s·64 + 4e + k, low nibble element e, high
  // nibble element 16 + e of key 4s + k; masks 2s / 2s + 1, bit 4e + k.
  {
    std::vector<uint8_t> pool(16 * sizeof(BlockQ5_1), 0);
    BlockQ5_1 blk{};
    blk.d = 0x3c00;
    blk.m = 0xbc00;
    uint32_t qh = 0;
    int code[32];
    for (int e = 0; e < 32; ++e) {
      code[e] = (e * 7 + 3) % 32;
      qh |= uint32_t(code[e] >> 4) << e;
    }
    for (int e = 0; e < 16; ++e) blk.qs[e] = uint8_t((code[e] & 15) | (code[e + 16] & 15) << 4);
    std::memcpy(blk.qh, &qh, 4);
    const int key = 9, s = key / 4, k = key % 4;
    tile_row(QType::Q5_1, TileRole::kValue, 32, reinterpret_cast<uint8_t*>(&blk), key, pool.data());
    const TileFormat f = tile_format(QType::Q5_1);
    uint16_t m;
    std::memcpy(&m, pool.data() + f.m_off + 2 * key, 2);
    EXPECT_EQ(m, 0xbc00);
    for (int e = 0; e < 16; ++e) {
      const uint8_t byte = pool[f.codes_off + s * 64 + 4 * e + k];
      EXPECT_EQ(byte & 15, code[e] & 15);
      EXPECT_EQ(byte >> 4, code[e + 16] & 15);
      uint64_t lo, hi;
      std::memcpy(&lo, pool.data() + f.high_off + 8 * (2 * s), 8);
      std::memcpy(&hi, pool.data() + f.high_off + 8 * (2 * s + 1), 8);
      EXPECT_EQ(int(lo >> (4 * e + k) & 1), code[e] >> 4);
      EXPECT_EQ(int(hi >> (4 * e + k) & 1), code[e + 16] >> 4);
    }
  }
}

}  // namespace
}  // namespace sustain::kv

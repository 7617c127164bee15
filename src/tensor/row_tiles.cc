#include "tensor/row_tiles.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "tensor/blocks.h"

namespace sustain {
namespace {

// Byte offsets inside one group block (16 rows x one block of the format).
struct GroupLayout {
  size_t codes = 0;  // u32 code dwords, [n_dwords][16]
  int n_dwords = 0;  // dwords per row: 4 (nibbles), 8 (bytes), 36 (Q4_K's block), 52 (Q6_K's)
  bool has_d = true;  // d[16] f16 at `d` (Q4_K: inside the dwords)
  size_t hi = 0;     // Q5_0: u64[8] fifth bits; else unused
  size_t d = 0;      // f16[16]
  size_t bytes = 0;
};

GroupLayout layout(QType t) {
  GroupLayout g;
  switch (t) {
    case QType::Q4_0:
      g.n_dwords = 4;
      g.d = 256;
      g.bytes = 288;
      break;
    case QType::Q5_0:
      g.n_dwords = 4;
      g.hi = 256;
      g.d = 320;
      g.bytes = 352;
      break;
    case QType::Q8_0:
      g.n_dwords = 8;
      g.d = 512;
      g.bytes = 544;
      break;
    case QType::Q4_K:  // the whole block as dwords (d and dmin in dword 0)
      g.n_dwords = sizeof(BlockQ4_K) / 4;
      g.has_d = false;
      g.bytes = kTileRows * sizeof(BlockQ4_K);
      break;
    case QType::Q6_K:  // ql, qh and scales as dwords, then d
      g.n_dwords = offsetof(BlockQ6_K, d) / 4;
      g.d = static_cast<size_t>(g.n_dwords) * kTileRows * 4;
      g.bytes = kTileRows * sizeof(BlockQ6_K);
      break;
    default:
      SUSTAIN_CHECK(false);
  }
  return g;
}

// The format's block: where its qs, qh and d are.
struct BlockFields {
  size_t d = 0, qh = 0, qs = 0, bytes = 0;
};

BlockFields fields(QType t) {
  switch (t) {
    case QType::Q4_0:
      return {offsetof(BlockQ4_0, d), 0, offsetof(BlockQ4_0, qs), sizeof(BlockQ4_0)};
    case QType::Q5_0:
      return {offsetof(BlockQ5_0, d), offsetof(BlockQ5_0, qh), offsetof(BlockQ5_0, qs),
              sizeof(BlockQ5_0)};
    case QType::Q8_0:
      return {offsetof(BlockQ8_0, d), 0, offsetof(BlockQ8_0, qs), sizeof(BlockQ8_0)};
    case QType::Q4_K:  // no separate d: its dwords carry it
      return {0, 0, 0, sizeof(BlockQ4_K)};
    case QType::Q6_K:  // ql, qh and scales one run of dwords from byte 0
      return {offsetof(BlockQ6_K, d), 0, 0, sizeof(BlockQ6_K)};
    default:
      SUSTAIN_CHECK(false);
      return {};
  }
}

}  // namespace

bool row_tiles_format(QType t) {
  return t == QType::Q4_0 || t == QType::Q5_0 || t == QType::Q8_0 || t == QType::Q4_K ||
         t == QType::Q6_K;
}

// Elements per block of a row_tiles_format.
static int64_t block_elems(QType t) {
  return t == QType::Q4_K || t == QType::Q6_K ? kQK_K : kQK;
}

size_t row_tiles_bytes(QType t, int64_t n_out, int64_t n_in) {
  const int64_t groups = (n_out + kTileRows - 1) / kTileRows;
  return static_cast<size_t>(groups) * kTileRows * qtype_row_bytes(t, static_cast<uint64_t>(n_in));
}

void to_row_tiles(QType t, const void* rows, size_t row_bytes, int64_t n_out, int64_t n_in,
                  void* tiles) {
  SUSTAIN_CHECK(row_tiles_format(t) && n_in % block_elems(t) == 0);
  const GroupLayout g = layout(t);
  const BlockFields f = fields(t);
  SUSTAIN_CHECK(g.bytes == kTileRows * f.bytes);
  const int64_t nb = n_in / block_elems(t);
  const int64_t groups = (n_out + kTileRows - 1) / kTileRows;
  auto* out = static_cast<uint8_t*>(tiles);
  // Group block by group block, each written once and whole (rows past
  // n_out as zeros): a load-time pass over every weight byte.
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int nr = static_cast<int>(std::min<int64_t>(kTileRows, n_out - gi * kTileRows));
    const uint8_t* row0 =
        static_cast<const uint8_t*>(rows) + static_cast<size_t>(gi * kTileRows) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* gb = out + static_cast<size_t>(gi * nb + b) * g.bytes;
      if (nr < kTileRows) std::memset(gb, 0, g.bytes);
      uint64_t hi[8] = {};
      for (int r = 0; r < nr; ++r) {
        const uint8_t* blk =
            row0 + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * f.bytes;
        for (int k = 0; k < g.n_dwords; ++k)
          std::memcpy(gb + g.codes + (static_cast<size_t>(k) * kTileRows + r) * 4,
                      blk + f.qs + 4 * k, 4);
        if (g.has_d) std::memcpy(gb + g.d + 2 * static_cast<size_t>(r), blk + f.d, 2);
        if (t == QType::Q5_0) {
          uint32_t qh = 0;
          std::memcpy(&qh, blk + f.qh, 4);
          for (int k = 0; k < 8; ++k)
            hi[k] |= static_cast<uint64_t>((qh >> (4 * k)) & 0xFu) << (4 * r);
        }
      }
      if (t == QType::Q5_0) std::memcpy(gb + g.hi, hi, sizeof(hi));
    }
  }
}

void from_row_tiles(QType t, const void* tiles, int64_t n_in, int64_t r, void* row) {
  SUSTAIN_CHECK(row_tiles_format(t) && n_in % block_elems(t) == 0);
  const GroupLayout g = layout(t);
  const BlockFields f = fields(t);
  const int64_t nb = n_in / block_elems(t);
  const int64_t gi = r / kTileRows;
  const int lane = static_cast<int>(r % kTileRows);
  auto* out = static_cast<uint8_t*>(row);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb =
        static_cast<const uint8_t*>(tiles) + static_cast<size_t>(gi * nb + b) * g.bytes;
    uint8_t* blk = out + static_cast<size_t>(b) * f.bytes;
    for (int k = 0; k < g.n_dwords; ++k)
      std::memcpy(blk + f.qs + 4 * k,
                  gb + g.codes + (static_cast<size_t>(k) * kTileRows + lane) * 4, 4);
    if (g.has_d) std::memcpy(blk + f.d, gb + g.d + 2 * static_cast<size_t>(lane), 2);
    if (t == QType::Q5_0) {
      uint32_t qh = 0;
      for (int k = 0; k < 8; ++k) {
        uint64_t h = 0;
        std::memcpy(&h, gb + g.hi + 8 * static_cast<size_t>(k), 8);
        qh |= static_cast<uint32_t>((h >> (4 * lane)) & 0xFu) << (4 * k);
      }
      std::memcpy(blk + f.qh, &qh, 4);
    }
  }
}

}  // namespace sustain

#include "kv/tiled.h"

#include <cstring>

#include "base/status.h"
#include "tensor/blocks.h"

namespace sustain::kv {
namespace {

// One GGUF block taken apart: scale, minimum, and the 32 codes (Q8_0's
// biased to unsigned, 4/5-bit ones with bit 4 included).
struct Parts {
  uint16_t d = 0, m = 0;
  uint8_t code[kQK] = {};
};

size_t block_bytes(QType t) {
  switch (t) {
    case QType::Q8_0: return sizeof(BlockQ8_0);
    case QType::Q4_0: return sizeof(BlockQ4_0);
    case QType::Q4_1: return sizeof(BlockQ4_1);
    case QType::Q5_0: return sizeof(BlockQ5_0);
    case QType::Q5_1: return sizeof(BlockQ5_1);
    case QType::FP8_E4M3: return kQK;  // 32 one-byte elements, no scale
    default: return 0;
  }
}

template <class Blk>
void nibbles_in(const Blk& b, uint32_t qh, Parts& p) {
  for (int e = 0; e < kQK / 2; ++e) {
    p.code[e] = uint8_t((b.qs[e] & 15) | ((qh >> e) & 1) << 4);
    p.code[e + 16] = uint8_t((b.qs[e] >> 4) | ((qh >> (e + 16)) & 1) << 4);
  }
}
template <class Blk>
uint32_t nibbles_out(const Parts& p, Blk& b) {
  uint32_t qh = 0;
  for (int e = 0; e < kQK / 2; ++e) {
    b.qs[e] = uint8_t((p.code[e] & 15) | (p.code[e + 16] & 15) << 4);
    qh |= uint32_t(p.code[e] >> 4 & 1) << e | uint32_t(p.code[e + 16] >> 4 & 1) << (e + 16);
  }
  return qh;
}

Parts parts_of(QType t, const uint8_t* src) {
  Parts p;
  switch (t) {
    case QType::Q8_0: {
      const auto& b = *reinterpret_cast<const BlockQ8_0*>(src);
      p.d = b.d;
      for (int e = 0; e < kQK; ++e) p.code[e] = uint8_t(b.qs[e]) ^ 0x80;
      break;
    }
    case QType::Q4_0: {
      const auto& b = *reinterpret_cast<const BlockQ4_0*>(src);
      p.d = b.d;
      nibbles_in(b, 0, p);
      break;
    }
    case QType::Q4_1: {
      const auto& b = *reinterpret_cast<const BlockQ4_1*>(src);
      p.d = b.d;
      p.m = b.m;
      nibbles_in(b, 0, p);
      break;
    }
    case QType::Q5_0: {
      const auto& b = *reinterpret_cast<const BlockQ5_0*>(src);
      uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      p.d = b.d;
      nibbles_in(b, qh, p);
      break;
    }
    case QType::Q5_1: {
      const auto& b = *reinterpret_cast<const BlockQ5_1*>(src);
      uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      p.d = b.d;
      p.m = b.m;
      nibbles_in(b, qh, p);
      break;
    }
    case QType::FP8_E4M3: std::memcpy(p.code, src, kQK); break;
    default: SUSTAIN_CHECK(false);
  }
  return p;
}

void block_of(QType t, const Parts& p, uint8_t* dst) {
  switch (t) {
    case QType::Q8_0: {
      auto& b = *reinterpret_cast<BlockQ8_0*>(dst);
      b.d = p.d;
      for (int e = 0; e < kQK; ++e) b.qs[e] = static_cast<int8_t>(p.code[e] ^ 0x80);
      break;
    }
    case QType::Q4_0: {
      auto& b = *reinterpret_cast<BlockQ4_0*>(dst);
      b.d = p.d;
      nibbles_out(p, b);
      break;
    }
    case QType::Q4_1: {
      auto& b = *reinterpret_cast<BlockQ4_1*>(dst);
      b.d = p.d;
      b.m = p.m;
      nibbles_out(p, b);
      break;
    }
    case QType::Q5_0: {
      auto& b = *reinterpret_cast<BlockQ5_0*>(dst);
      b.d = p.d;
      const uint32_t qh = nibbles_out(p, b);
      std::memcpy(b.qh, &qh, 4);
      break;
    }
    case QType::Q5_1: {
      auto& b = *reinterpret_cast<BlockQ5_1*>(dst);
      b.d = p.d;
      b.m = p.m;
      const uint32_t qh = nibbles_out(p, b);
      std::memcpy(b.qh, &qh, 4);
      break;
    }
    case QType::FP8_E4M3: std::memcpy(dst, p.code, kQK); break;
    default: SUSTAIN_CHECK(false);
  }
}

// Where key t's code of element e lives in a group-block's codes (byte, and
// whether it is the high nibble), and which mask bit holds its bit 4.
struct CodePos {
  size_t byte;
  bool high_nibble;
  int mask;  // index of the 64-bit mask
  int bit;
};
// FP8: byte 16L + (k < 2 ? 2u + k : 8 + 2u + k - 2) of a line is item k
// (< 4) of lane 4L + u (kv/tiled.h).
size_t fp8_byte(int lane, int k) {
  return size_t(16 * (lane / 4) + (k < 2 ? 0 : 8) + 2 * (lane % 4) + k % 2);
}
CodePos code_pos(const TileFormat& f, TileRole role, int t, int e) {
  const int half = e / 16, r = e % 16;  // 4-bit: the nibble; Q8_0 V: h
  if (f.fp8_pairs) {
    if (role == TileRole::kKey) return {size_t(e / 4) * 64 + fp8_byte(t, e % 4), false, 0, 0};
    return {size_t(2 * (t / 4) + half) * 64 + fp8_byte(r, t % 4), false, 0, 0};
  }
  if (role == TileRole::kKey) {
    if (f.bytes_codes) return {size_t(e / 4) * 64 + 4 * t + e % 4, false, 0, 0};
    const int i = r / 4, k = r % 4;
    return {size_t(i) * 64 + 4 * t + k, half == 1, 2 * i + half, 4 * t + k};
  }
  const int s = t / 4, k = t % 4;
  if (f.bytes_codes) return {size_t(s) * 128 + half * 64 + 4 * r + k, false, 0, 0};
  return {size_t(s) * 64 + 4 * r + k, half == 1, 2 * s + half, 4 * r + k};
}

}  // namespace

bool tileable(QType t) {
  return block_bytes(t) != 0;
}

TileFormat tile_format(QType t) {
  SUSTAIN_CHECK(tileable(t));
  TileFormat f;
  f.bytes = block_bytes(t) * kTileKeys;
  f.has_min = t == QType::Q4_1 || t == QType::Q5_1;
  f.has_high = t == QType::Q5_0 || t == QType::Q5_1;
  f.has_scale = t != QType::FP8_E4M3;
  f.fp8_pairs = t == QType::FP8_E4M3;
  f.bytes_codes = t == QType::Q8_0 || f.fp8_pairs;
  f.offset = t == QType::Q8_0 ? 128 : t == QType::Q4_0 ? 8 : t == QType::Q5_0 ? 16 : 0;
  f.m_off = 2 * kTileKeys;
  f.codes_off = (f.has_scale ? 2 : 0) * kTileKeys + (f.has_min ? 2 : 0) * kTileKeys;
  f.high_off = f.codes_off + (f.bytes_codes ? kQK : kQK / 2) * kTileKeys;
  SUSTAIN_CHECK(f.high_off + (f.has_high ? 64 : 0) == f.bytes);
  return f;
}

void tile_row(QType t, TileRole role, int dim, const uint8_t* row, int slot, uint8_t* block) {
  const TileFormat f = tile_format(t);
  const int nb = dim / kQK, key = slot % kTileKeys;
  for (int b = 0; b < nb; ++b) {
    const Parts p = parts_of(t, row + size_t(b) * block_bytes(t));
    uint8_t* gb = block + (size_t(slot / kTileKeys) * nb + b) * f.bytes;
    if (f.has_scale) std::memcpy(gb + 2 * key, &p.d, 2);
    if (f.has_min) std::memcpy(gb + f.m_off + 2 * key, &p.m, 2);
    for (int e = 0; e < kQK; ++e) {
      const CodePos c = code_pos(f, role, key, e);
      uint8_t& byte = gb[f.codes_off + c.byte];
      if (f.bytes_codes)
        byte = p.code[e];
      else if (c.high_nibble)
        byte = uint8_t((byte & 0x0f) | (p.code[e] & 15) << 4);
      else
        byte = uint8_t((byte & 0xf0) | (p.code[e] & 15));
      if (f.has_high) {
        uint64_t mask;
        std::memcpy(&mask, gb + f.high_off + 8 * c.mask, 8);
        mask = (mask & ~(uint64_t(1) << c.bit)) | uint64_t(p.code[e] >> 4 & 1) << c.bit;
        std::memcpy(gb + f.high_off + 8 * c.mask, &mask, 8);
      }
    }
  }
}

void untile_row(QType t, TileRole role, int dim, const uint8_t* block, int slot, uint8_t* row) {
  const TileFormat f = tile_format(t);
  const int nb = dim / kQK, key = slot % kTileKeys;
  for (int b = 0; b < nb; ++b) {
    const uint8_t* gb = block + (size_t(slot / kTileKeys) * nb + b) * f.bytes;
    Parts p;
    if (f.has_scale) std::memcpy(&p.d, gb + 2 * key, 2);
    if (f.has_min) std::memcpy(&p.m, gb + f.m_off + 2 * key, 2);
    for (int e = 0; e < kQK; ++e) {
      const CodePos c = code_pos(f, role, key, e);
      const uint8_t byte = gb[f.codes_off + c.byte];
      p.code[e] = f.bytes_codes ? byte : c.high_nibble ? byte >> 4 : byte & 15;
      if (f.has_high) {
        uint64_t mask;
        std::memcpy(&mask, gb + f.high_off + 8 * c.mask, 8);
        p.code[e] = uint8_t(p.code[e] | (mask >> c.bit & 1) << 4);
      }
    }
    block_of(t, p, row + size_t(b) * block_bytes(t));
  }
}

}  // namespace sustain::kv

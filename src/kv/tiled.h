// The tiled page layout of the 32-element block formats (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1) and of FP8 E4M3 (taken 32 elements at a time, a "block" with
// no scale). A (page, layer, head) K or V block holds the same bytes as
// page_tokens GGUF rows, rearranged so that attention reads 16 keys per
// vector instead of one key per vector and a horizontal sum:
//
//   group g (keys 16g .. 16g + 15) of the page, block b of the row (elements
//   32b .. 32b + 31) is one "group-block" at (g * blocks_per_row + b) * bytes:
//     d      16 × f16, key t's block scale at t
//     m      16 × f16, key t's block minimum (Q4_1, Q5_1)
//     codes  the 16 keys' codes, arranged by role (below)
//     high   Q5_0 / Q5_1: bit 4 of the codes, as eight 64-bit masks that
//            match the code vectors byte for byte
//
// Codes are unsigned: 4/5-bit codes as stored, Q8_0's int8 codes + 128 (XOR
// 0x80), so both are the u8 operand of an 8-bit dot product (vpdpbusd).
//
//   key role (K: scores are dots over elements, one key per 32-bit lane):
//     Q8_0   byte c·64 + 4t + k = code of element 4c + k of key t (c < 8)
//     4-bit  byte i·64 + 4t + k: low nibble element 4i + k, high nibble
//            element 16 + 4i + k of key t (i < 4)
//     high   mask 2i bit 4t + k = bit 4 of element 4i + k of key t;
//            mask 2i + 1 the same for element 16 + 4i + k
//   value role (V: outputs are sums over keys, one element per 32-bit lane,
//   four keys per lane):
//     Q8_0   byte s·128 + h·64 + 4e + k = code of element 16h + e of key
//            4s + k (s < 4, h < 2, e < 16)
//     4-bit  byte s·64 + 4e + k: low nibble element e, high nibble element
//            16 + e of key 4s + k
//     high   mask 2s bit 4e + k = bit 4 of element e of key 4s + k; mask
//            2s + 1 the same for element 16 + e
//
// FP8 E4M3 (no d, m or high; codes at 0) is laid out for a bf16 dot product
// (vdpbf16ps: two bf16 products per 32-bit lane). A 64-byte line holds four
// items of each of 16 lanes: item k (< 4) of lane l = 4L + u at byte
//     16L + 2u + k          (k < 2)
//     16L + 8 + 2u + k - 2  (k >= 2),
// so that once every byte is widened to bf16 (a table lookup), unpacking
// the low (high) 8 bytes of each 16-byte lane gives items 0, 1 (2, 3) of
// every lane as a bf16 pair.
//   key role: line c (< 8), lane t = key t, item k = element 4c + k
//   value role: line 2s + h (s < 4, h < 2), lane e = element 16h + e,
//     item k = key 4s + k
//
// A row is written by tile_row (the high masks are shared between keys,
// so rows of one group must not be written concurrently; kv_cache writes
// one token at a time) and read back byte for byte by untile_row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/qtype.h"

namespace sustain::kv {

inline constexpr int kTileKeys = 16;
inline constexpr int kTileElems = 32;  // elements of a row in one group-block

enum class TileRole { kKey, kValue };

// Where the parts of one group-block are, for a tileable type.
struct TileFormat {
  size_t bytes = 0;      // 16 × the GGUF block size
  size_t m_off = 0;      // minimums (has_min)
  size_t codes_off = 0;  // codes: 512 bytes (Q8_0) or 256 (4/5-bit)
  size_t high_off = 0;   // 64 bytes of masks (has_high)
  bool has_min = false, has_high = false;
  bool has_scale = true;     // d: every format but FP8
  bool bytes_codes = false;  // one byte per code: Q8_0, FP8
  bool fp8_pairs = false;    // FP8's bf16-pair arrangement
  int offset = 0;            // value = d · (code - offset) (+ m): 128, 8, 16 or 0
};

// Whether `t` has a tiled layout (the formats above; rows must be a whole
// number of 32-element blocks, which FP8's need not be: KvGeometry checks).
bool tileable(QType t);
TileFormat tile_format(QType t);

// Key `slot` (of a page) of the tiled (page, layer, head) block at `block`,
// written from / read back to one GGUF row of `dim` elements.
void tile_row(QType t, TileRole role, int dim, const uint8_t* row, int slot, uint8_t* block);
void untile_row(QType t, TileRole role, int dim, const uint8_t* block, int slot, uint8_t* row);

}  // namespace sustain::kv

// The row-tile layout of Q4_0, Q5_0, Q8_0, Q4_K and Q6_K: a matrix's rows repacked
// once, at load, so that the kernels read 16 rows' codes in one vector
// without unpacking them on every call (`--repack`, docs/kernels.md
// "Repacked weights").
//
// Rows go in groups of kTileRows; a group's blocks follow one another, each
// block of the group holding the same 32 (K-quants: 256) elements of its 16 rows:
//   Q4_0 (288 bytes): nib[4][16] u32  dword j of row r's qs (low nibbles:
//                                     elements 4j..4j+3; high: 16+4j..)
//                     d[16] f16
//   Q5_0 (352 bytes): nib[4][16] u32  as Q4_0
//                     hi[8] u64       bit 4r+i of hi[k]: bit 4 of row r's
//                                     element 4k+i (its qh bit 4k+i)
//                     d[16] f16
//   Q8_0 (544 bytes): qs[8][16] u32   dword k of row r's qs (elements 4k..4k+3)
//                     d[16] f16
//   Q4_K (2304 bytes): w[36][16] u32  dword k of row r's 144-byte block: k = 0
//                                     d | dmin << 16, k = 1..3 the 12 scale
//                                     bytes, k = 4..35 qs (dword 8j + i of qs:
//                                     low nibbles elements 64j+4i..+3, high
//                                     nibbles 64j+32+4i..+3)
//   Q6_K (3360 bytes): w[52][16] u32  dword k of row r's 210-byte block: k =
//                                     0..31 ql, 32..47 qh, 48..51 the 16
//                                     int8 scales
//                     d[16] f16
// A group block is exactly 16 row blocks' bytes, so a matrix takes what its
// rows take, rounded up to whole groups (the rows past n_out are zero), and
// group g starts at byte g * 16 * row_bytes. Nothing is dropped: every row
// comes back byte for byte (from_row_tiles).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/qtype.h"

namespace sustain {

inline constexpr int kTileRows = 16;

// Whether `t` has a row-tile layout (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K).
bool row_tiles_format(QType t);

// Bytes of the row-tile copy of an [n_out, n_in] matrix: whole groups of 16 rows.
size_t row_tiles_bytes(QType t, int64_t n_out, int64_t n_in);

// Repacks `rows` (n_out rows of n_in elements, contiguous, `row_bytes` apart)
// into `tiles` (row_tiles_bytes). `t` must be a row_tiles_format.
void to_row_tiles(QType t, const void* rows, size_t row_bytes, int64_t n_out, int64_t n_in,
                  void* tiles);

// Row `r` of a row-tile matrix back in the format's own row layout.
void from_row_tiles(QType t, const void* tiles, int64_t n_in, int64_t r, void* row);

}  // namespace sustain

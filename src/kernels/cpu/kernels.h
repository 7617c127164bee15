// Internal interface between the matmul driver (kernels/matmul.cc) and the
// per-format SIMD kernels in kernels/cpu/. Each getter returns the kernel
// Highway's dynamic dispatch picks for this CPU (or for the target a test
// forced with hwy::SetSupportedTargetsForTest), nullptr for formats the file
// does not handle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/qtype.h"

namespace sustain::kernels::cpu {

// One matmul call, as the driver prepared it.
struct MatmulArgs {
  QType type = QType::F32;
  const uint8_t* w = nullptr;  // weight rows
  size_t w_stride = 0;         // bytes between weight rows
  int64_t n_in = 0;
  const uint8_t* act = nullptr;  // activation rows, laid out as ref::quantize_activation writes
  size_t act_stride = 0;         // bytes between activation rows
  float* y = nullptr;
  int64_t ldy = 0;
};

// Activation rows for Q8_0 (the partner of Q8_0 / Q4_0 / Q5_0) carry, after
// the blocks, int32 sum(qs) per block (for kernels that keep the weights'
// offset in unsigned codes, packed-inl.h) and then each block's d as f32 (so
// the kernels convert it once per row, not once per weight row).
inline size_t q8_0_sums_offset(int64_t n_in) {
  return (static_cast<size_t>(n_in / 32) * 34 + 63) / 64 * 64;
}
inline size_t q8_0_scales_offset(int64_t n_in) {
  return q8_0_sums_offset(n_in) + static_cast<size_t>(n_in / 32) * 4;
}
// ... and then, 64-byte aligned, int32 -offset * (a[4i] + .. + a[4i + 3]) for
// each group of 4 (offset = the weight format's code offset): the starting
// value of each int32 lane of a u8 x s8 dot with offset codes.
inline size_t q8_0_lanesums_offset(int64_t n_in) {
  return (q8_0_scales_offset(n_in) + static_cast<size_t>(n_in / 32) * 4 + 63) / 64 * 64;
}
inline size_t q8_0_row_bytes(int64_t n_in) {
  return q8_0_lanesums_offset(n_in) + static_cast<size_t>(n_in);
}
// The offset of the codes the row-by-row kernels use for a weight format with
// Q8_0 activations; 0 where they do not use the lane sums (Q8_0: sign trick).
inline int q8_0_code_offset(QType w) {
  return w == QType::Q5_0 ? 16 : w == QType::Q4_0 ? 8 : 0;
}

// Computes Y[t, o] for o in [row0, row1), t in [tok0, tok1). Walks the tokens
// in groups inside, so each weight row is unpacked once per group of tokens.
using TileFn = void (*)(const MatmulArgs& a, int64_t row0, int64_t row1, int64_t tok0,
                        int64_t tok1);

TileFn legacy_tile(QType t);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
TileFn kquant_tile(QType t);  // Q2_K .. Q6_K
TileFn float_tile(QType t);
// The prefill kernel for many tokens where the chosen target has one
// (AVX-512 VNNI), else nullptr. Tiles of 16 rows; worth it from ~16 tokens.
TileFn legacy_packed_tile(QType t);  // Q8_0, Q4_0, Q5_0
// Repacked weights (tensor/row_tiles.h, matmul_tiles.cc) where the chosen
// target reads them (AVX-512 VNNI), else nullptr. MatmulArgs::w is the
// groups of 16 rows, w_stride the format's row bytes; row0 a multiple of 16.
TileFn row_tiles_tile(QType t);      // Q4_0, Q5_0, Q8_0, Q4_K, Q6_K
// Many tokens from repacked weights: the packed kernel's walk (packed-inl.h)
// fed from the groups, bit for bit the rows' kquant_packed_tile. nullptr
// where the tile kernel stays best at every token count (Q4_0, Q5_0, Q8_0).
TileFn row_tiles_packed_tile(QType t);  // Q4_K, Q6_K
TileFn kquant_packed_tile(QType t);  // Q3_K .. Q6_K (not Q2_K: its mins per 16)   // F32, F16, BF16
                                     // and formats dotted after dequantizing

// One activation row of n_in (a multiple of 32) in the Q8_0 layout above:
// the blocks, their sums and f32 scales, and, when code_offset is not 0,
// the offset lane sums. Bit-exact with ref::quantize_activation (tensor/'s
// quantize_q8_0) plus those sums; vectorised, as batched decode quantizes a
// row per token for every matmul.
void quantize_q8_0_activation(const float* x, uint8_t* out, int64_t n_in, int code_offset);
// One activation row of Q8_K blocks, byte for byte tensor/'s quantize_q8_k.
void quantize_q8_k_activation(const float* x, uint8_t* out, int64_t n_in);
// float -> f16, bit for bit tensor/'s quantize_f16 (the F16C instruction
// where the target has it).
void to_f16(const float* x, uint16_t* y, int64_t n);

// Elementwise ops (dispatched).
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
void add(float* y, const float* x, int64_t n);
void softmax(float* x, int64_t n);
void exp_weights(const float* x, float t, float m, float* w, int64_t n);
void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, bool neox, const float* cos,
                const float* sin);

// The Highway targets compiled into the kernels that this CPU supports, best
// first (tests run every kernel on each).
std::vector<int64_t> compiled_targets();

}  // namespace sustain::kernels::cpu

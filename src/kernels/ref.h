// Scalar reference versions of every op in ops.h: the oracles the SIMD
// kernels are tested against. Written for clarity, not speed.
//
// matmul reproduces llama.cpp's CPU arithmetic: each activation row is
// quantized to activation_type(w) with the scalar quantizers of tensor/quant.h,
// then each (weight row, activation row) pair is dotted block by block the way
// ggml's vec_dot_* functions do it — exact integer sums per block (or
// super-block), times the float scales, accumulated in float. Float formats
// round the activations to the weight's format (f16 / bf16) and accumulate the
// exact products in double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace sustain::kernels::ref {

// Bytes of one activation row of n elements, as quantize_activation writes it:
// blocks of activation_type(w) for the integer formats, and f32 values
// (already rounded through f16 / bf16 where the weight is F16 / BF16) for the
// float formats and the formats dotted in f32.
size_t activation_row_bytes(QType w, int64_t n);

// Converts one activation row x[n] to the representation dotted with weight
// format w (see activation_row_bytes).
void quantize_activation(QType w, const float* x, void* out, int64_t n);

// Dot product of one weight row w_row (format w, n elements) with one
// activation row produced by quantize_activation(w, ...).
float vec_dot(QType w, const void* w_row, const void* act_row, int64_t n);

// Y[t, o] = vec_dot(W[o], quantize_activation(X[t])), serially.
void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
            int64_t ldy);

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);
void rope(float* x, int n_heads, int64_t pos, const RopeParams& p);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
void add(float* y, const float* x, int64_t n);
void add_bias(float* y, const float* b, int64_t n_rows, int64_t n);
void softmax(float* x, int64_t n);
void exp_weights(const float* x, float t, float m, float* w, int64_t n);
void get_row(const WeightView& w, int64_t row, float* out);

// The (cos, sin) pairs RoPE rotates by at position pos, for pair i = 0 ..
// rope_dim/2 - 1 (llama.cpp's rope cache: theta_i = pos * base^(-2i/rope_dim)
// / freq_factors[i], then linear scaling and YaRN mixing, times its mscale).
// Shared by ref::rope and the fast rope so both rotate by identical values.
void rope_cache(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out);

}  // namespace sustain::kernels::ref

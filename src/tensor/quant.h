// Scalar reference quantize / dequantize for every format sustain writes or
// reads. These are the oracles: SIMD kernels are tested against them. Each
// function converts n elements, n a multiple of the format's block size.
// Quantizers follow the algorithms llama.cpp uses (so Q8_0 / Q4_0 output is
// byte-identical and K-quant error is on par); the code is our own.
#pragma once

#include <cstdint>

#include "tensor/blocks.h"

namespace sustain {

void quantize_f32(const float* x, void* y, int64_t n);
void dequantize_f32(const void* x, float* y, int64_t n);
void quantize_f16(const float* x, void* y, int64_t n);
void dequantize_f16(const void* x, float* y, int64_t n);
void quantize_bf16(const float* x, void* y, int64_t n);
void dequantize_bf16(const void* x, float* y, int64_t n);

void quantize_q4_0(const float* x, void* y, int64_t n);
void dequantize_q4_0(const void* x, float* y, int64_t n);
void quantize_q4_1(const float* x, void* y, int64_t n);
void dequantize_q4_1(const void* x, float* y, int64_t n);
void quantize_q5_0(const float* x, void* y, int64_t n);
void dequantize_q5_0(const void* x, float* y, int64_t n);
void quantize_q5_1(const float* x, void* y, int64_t n);
void dequantize_q5_1(const void* x, float* y, int64_t n);
void quantize_q8_0(const float* x, void* y, int64_t n);
void dequantize_q8_0(const void* x, float* y, int64_t n);
void quantize_q8_1(const float* x, void* y, int64_t n);
void dequantize_q8_1(const void* x, float* y, int64_t n);

void quantize_q2_k(const float* x, void* y, int64_t n);
void dequantize_q2_k(const void* x, float* y, int64_t n);
void quantize_q3_k(const float* x, void* y, int64_t n);
void dequantize_q3_k(const void* x, float* y, int64_t n);
void quantize_q4_k(const float* x, void* y, int64_t n);
void dequantize_q4_k(const void* x, float* y, int64_t n);
void quantize_q5_k(const float* x, void* y, int64_t n);
void dequantize_q5_k(const void* x, float* y, int64_t n);
void quantize_q6_k(const float* x, void* y, int64_t n);
void dequantize_q6_k(const void* x, float* y, int64_t n);
void quantize_q8_k(const float* x, void* y, int64_t n);
void dequantize_q8_k(const void* x, float* y, int64_t n);

// FP8 E4M3 (OCP "fn" variant: bias 7, no infinities, 0x7f/0xff are NaN, max
// finite 448). Saturating conversion; round to nearest even. One byte per element.
uint8_t f32_to_fp8_e4m3(float f);
float fp8_e4m3_to_f32(uint8_t v);
void quantize_fp8_e4m3(const float* x, void* y, int64_t n);
void dequantize_fp8_e4m3(const void* x, float* y, int64_t n);

}  // namespace sustain

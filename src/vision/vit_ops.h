// The few operations the vision encoder needs that the text models do not
// (kernels/ops.h has the rest): LayerNorm with bias, GELU as ggml's CPU
// backend rounds it, non-causal multi-head attention over all patches, and
// 2-D average pooling.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace sustain::vision {

// y[r] = (x[r] − mean) / sqrt(var + eps) · w + b for each of n_rows rows of n.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n,
                float eps);

// Tanh-form GELU, computed as the reference's CPU backend does: the input is
// rounded to f16 and looked up in a table of f16 results (exact GELU outside
// [−10, 10], where it is 0 or x). In place over n values.
void gelu_f16_table(float* x, int64_t n);

// Multi-head attention with no mask: every one of n rows attends to all n.
// q, k, v, out: [n][n_head · head_dim] row-major; scale multiplies q·k.
// Scores and the weighted sum go through kernels::matmul in f32.
void attention_full(const float* q, const float* k, const float* v, float* out, int64_t n,
                    int n_head, int head_dim, float scale, ThreadPool& pool);

// x: [side·side][c] (rows = grid cells, row-major over the grid) → out:
// [(side/k)²][c], the mean of each k×k cell block (stride k, no padding).
void avg_pool_grid(const float* x, float* out, int side, int k, int64_t c);

}  // namespace sustain::vision

// Roofline arithmetic for decode (DESIGN.md §6): what one decode step must
// read and compute at context L, and the speed each machine limit allows.
// Pure functions over a ModelCost, so tests check them by hand.
#pragma once

#include <cstdint>

namespace sustain::bench {

// What one decoded token costs a model, independent of the context.
struct ModelCost {
  // Bytes the forward reads per step besides the KV cache: every layer
  // matrix, the output matrix, norms and biases, and one embedding row.
  int64_t weight_bytes_per_step = 0;
  // Multiply-accumulates per token in the weight matrices (layers + output).
  int64_t matmul_params = 0;
  int64_t n_layer = 0, n_head = 0, head_dim = 0;
  int64_t kv_bytes_per_token = 0;  // K + V over every layer and KV head but the sliding ones
  // Sliding-window layers (Gemma 3): K + V per token over them, read for at
  // most `window` tokens of context.
  int64_t window_bytes_per_token = 0, window = 0;
};

// Bytes read by one decode step at context L: weights + KV of L tokens
// (of min(L, window) in the sliding-window layers).
double decode_bytes(const ModelCost& m, double ctx);
// FLOPs of one decoded token at context L:
//   2 × matmul_params + 4 × n_layer × n_head × head_dim × L
// (Q·Kᵀ and P·V are 2·head_dim·L FLOPs each per head and layer).
double decode_flops(const ModelCost& m, double ctx);

struct Bound {
  double bandwidth_tok_s = 0;  // read GB/s × 1e9 ÷ decode_bytes
  double compute_tok_s = 0;    // GFLOP/s × 1e9 ÷ decode_flops
  double bytes_per_step = 0, flops_per_token = 0;
};
Bound decode_bound(const ModelCost& m, double ctx, double read_gbps, double gflops);

// The seeds' bandwidth model (seed 000 §5.2): decode is bound by the bytes
// each step reads, so speed scales with their inverse from a measured peak:
//   tok/s(L) = peak_tok_s × decode_bytes(L_peak) ÷ decode_bytes(L)
double seed_model_tok_s(const ModelCost& m, double peak_ctx, double peak_tok_s, double ctx);

// Prompt processing time as a function of depth: each token at depth d costs
// a + b·d seconds (the matmuls, plus attention over d earlier tokens), so a
// fill from L0 to L1 takes a·(L1 − L0) + b·(L1² − L0²)/2.
struct PrefillFit {
  double a = 0, b = 0;  // seconds per token, seconds per token per token of depth
  int points = 0;
  double seconds(double from, double to) const {
    return a * (to - from) + b * (to * to - from * from) / 2.0;
  }
};
// Least squares over fills (from_i, to_i, seconds_i); b is clamped at 0 (and
// a refitted) where noise would make it negative. points = 0 when nothing fits.
PrefillFit fit_prefill(const double* from, const double* to, const double* seconds, int n);

}  // namespace sustain::bench

// Backend-neutral kernel entry points (DESIGN.md §4). model/ calls these and
// nothing below them. Each op has a scalar reference in kernels/ref.h (the
// oracle the tests compare against) and a SIMD implementation (Highway,
// dynamic dispatch: one binary for AVX2, AVX-512 and NEON) behind this API.
//
// Shapes follow src/tensor/README.md: W[n_out, n_in] row-major, y = x · Wᵀ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "tensor/qtype.h"

namespace sustain::kernels {

// A weight matrix W[n_out, n_in], rows contiguous (a view into the mmap),
// or repacked into groups of 16 rows (`tiled`, tensor/row_tiles.h): then only
// matmul and matmul_batch read it, and row_bytes is still one row's bytes.
struct WeightView {
  QType type = QType::F32;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const void* data = nullptr;
  size_t row_bytes = 0;  // bytes of one row of n_in elements
  bool tiled = false;
};

// Whether matmul reads format `t` repacked into row tiles on this CPU (Q4_0,
// Q5_0, Q8_0 with AVX-512 VNNI): what `--repack` needs.
bool row_tiles_available(QType t);

// The row-tile copy of `w` (rows) in `dst` (tensor/row_tiles.h's
// row_tiles_bytes): the view matmul reads it through.
WeightView repack_rows(const WeightView& w, void* dst);

// The format activations are converted to before the dot products with a
// weight of format `w`, as llama.cpp does on CPUs: Q8_K for K-quants, Q8_0
// for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, F16 for F16, BF16 for BF16, F32 for F32
// and for the formats dotted after dequantizing (see matmul_supported).
QType activation_type(QType w);

// Whether matmul (and get_row) handle weights of format w: every format with
// a reference dequantizer in the tensor/ traits table. Formats without an
// integer dot in llama.cpp (Q8_1, Q8_K, FP8_E4M3 as weights) are dequantized
// and dotted in f32. model/ checks this at load time, so matmul never meets an
// unsupported format (it cannot return an error).
bool matmul_supported(QType w);

// Bytes of caller-owned scratch that matmul needs for n_tokens rows of n_in.
size_t matmul_scratch_bytes(QType w, int64_t n_in, int64_t n_tokens);

// Y[t, o] = sum_i X[t, i] * W[o, i] for t < n_tokens, o < n_out.
// X is f32 [n_tokens, n_in] with row stride ldx (elements); Y is f32 with
// row stride ldy. Each activation row is quantized once to activation_type()
// and dotted with integer instructions; work is split over output rows (and
// tokens for large batches) on `pool`, so decode reads each weight byte once
// per call for the whole batch. `scratch` holds matmul_scratch_bytes().
void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
            int64_t ldy, ThreadPool& pool, void* scratch);

// One product of a batch: Y = X · Wᵀ for n_tokens rows, as matmul takes it.
struct MatmulJob {
  WeightView w;
  const float* x = nullptr;
  int64_t ldx = 0;
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Element-wise work that makes the products' input row by row (an RMS norm,
// a SwiGLU): fn(ctx, t) writes row t of every job's x, reading nothing that
// another row's call writes. matmul_batch calls it once per token row, just
// before it quantizes that row, in the same parallel region, so in a decode
// step of several sequences that work is shared over the threads instead of
// running on the caller while they wait (the step's serial gaps, issue 20).
struct RowPrologue {
  void (*fn)(const void* ctx, int64_t t) = nullptr;
  const void* ctx = nullptr;
};

// Bytes of scratch that matmul_batch needs for these jobs.
size_t matmul_batch_scratch_bytes(std::span<const MatmulJob> jobs);

// Runs every job of the batch as matmul would, with the same result bit for
// bit, in two parallel regions in all: one quantizes every job's activation
// rows (once for consecutive jobs that share x, n_tokens and activation
// format: a mixture-of-experts gate and up), one runs every job's rows, split
// into one contiguous run per thread of equal estimated cost. For many small
// products (the experts of a decode step) this replaces a pool dispatch per
// product, and a thread's idle tail at the end of each, with one split of all
// the work.
// With a prologue, rows 0 .. (the jobs' most tokens) - 1 are made by it
// first, each before it is quantized or read; the results are what calling
// it for every row before matmul_batch gives, bit for bit.
// `scratch` holds matmul_batch_scratch_bytes(jobs); scratch_bytes is checked.
void matmul_batch(std::span<const MatmulJob> jobs, ThreadPool& pool, void* scratch,
                  size_t scratch_bytes, RowPrologue prologue = {});

// y = x / sqrt(mean(x^2) + eps) * weight   (weight may be nullptr: no gain).
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);

struct RopeParams {
  int head_dim = 0;
  int rope_dim = 0;  // leading dims rotated; the rest pass through
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // 1 / linear scaling factor
  const float* freq_factors = nullptr;  // Llama 3 rope_freqs: rope_dim/2 divisors, or nullptr
  bool neox = false;                    // pairs (i, i + rope_dim/2) instead of (2i, 2i + 1)
  // YaRN (used when ext_factor != 0): llama.cpp's parameters and meaning.
  float ext_factor = 0.0f, attn_factor = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;
  bool operator==(const RopeParams&) const = default;
};
// Rotates n_heads vectors of head_dim (contiguous) at position pos, in place.
void rope(float* x, int n_heads, int64_t pos, const RopeParams& p);
// rope() in two halves, so the angles of a position can serve many calls
// (q and k, every layer of a forward): the rope_dim / 2 angles' cosines and
// sines at pos, then the rotation by them, bit for bit rope()'s.
void rope_angles(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out);
void rope_rotate(float* x, int n_heads, const RopeParams& p, const float* cos, const float* sin);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out[i] = gelu(gate[i]) * up[i], GELU in its tanh form (Gemma):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void geglu(const float* gate, const float* up, float* out, int64_t n);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n);
// y[i] += b[i] for each of n_rows rows of n (bias broadcast)
void add_bias(float* y, const float* b, int64_t n_rows, int64_t n);
// In-place softmax over n values.
void softmax(float* x, int64_t n);
// The unnormalised weights of a softmax at temperature t > 0 whose largest
// scaled value is m: w[i] = 1 where x[i] / t == m (so +inf, or -inf when
// every value is, weighs 1), else exp(x[i] / t - m), 0 where that is below
// -87 (float's normal range ends at -87.3) or undefined (x[i] NaN). Within
// a few ulp of exp; element by element the same bits wherever the array is
// split (sampling relies on it: its candidate chain and its shortcuts from
// raw logits must pick the same token).
void exp_weights(const float* x, float t, float m, float* w, int64_t n);
// float -> f16 (IEEE binary16, round to nearest even): bit for bit
// tensor/quant.h's quantize_f16, vectorised (the KV cache's f16 rows).
void to_f16(const float* x, void* y, int64_t n);
// Dequantizes row `row` of a (possibly quantized) matrix into out[n_in]: embedding lookup.
void get_row(const WeightView& w, int64_t row, float* out);

}  // namespace sustain::kernels

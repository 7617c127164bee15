// A deliberately plain reference forward pass: the test oracle that the real
// engine (SIMD kernels, paged KV cache, batching) is compared against, next to
// llama.cpp's logits. Every weight is dequantized to f32 once at load time;
// activations and the KV cache stay f32 (unless RefOptions asks for
// llama.cpp's roundings); dot products and norms accumulate in double. One token at a time, one
// position after another — no batching, no threads, no cleverness — so a reader can check it line
// by line against the architecture's definition.
//
// Memory: 4 bytes per parameter (a 135M-parameter model needs ~540 MB).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/arch_config.h"
#include "tensor/qtype.h"

namespace sustain {
namespace gguf {
class File;
}

namespace test {

// What a forward pass saw. `sustain synth` models have random weights, so
// these are how a test tells "finite and plausibly scaled" from "blew up".
struct ForwardStats {
  float max_abs_residual = 0;    // the residual stream: embedding and after every block
  float max_abs_attn_score = 0;  // scaled Q·K before the softmax
  float max_abs_ffn = 0;         // FFN hidden: gate, up and silu(gate) * up
  float max_abs_logit = 0;
  // Elements that were inf or NaN in any of the above or in Q, K, V and the
  // attention output (which feed them).
  uint64_t n_non_finite = 0;

  float max_abs() const;
  bool all_finite() const { return n_non_finite == 0; }
};

// Rounding that llama.cpp's CPU backend applies and a plain f32 pass does
// not. Off by default: the oracle is exact f32 arithmetic on the dequantized
// weights. On, it rounds the values llama.cpp rounds. Measured on
// ../shared/ref: f32-weight files then agree with llama.cpp's kvf16 logits to
// ~1e-4 of std instead of ~2e-3, which pins down the f16-KV arithmetic; with
// quantized weights the gain is small, because any one-ulp difference in
// summation order flips some 8-bit rounding and spreads.
struct RefOptions {
  // Each matmul's input row goes through the weight format's activation
  // partner before the product: Q8_K for K-quants, Q8_0 / Q8_1 for the
  // 32-element formats, F16 / BF16 for F16 / BF16 weights, nothing for F32.
  bool quantize_activations = false;
  // An f16 KV cache without flash attention: K and V are stored as f16, and
  // Q and the softmax weights are rounded to f16 before they meet them.
  bool kv_f16 = false;
};

// How RoPE pairs the dimensions of a head. llama.cpp: kNorm ("normal",
// consecutive pairs (2i, 2i+1)) for `llama`, kNeox (pairs (i, i + n_rot/2))
// for `qwen2` and `qwen3`.
enum class RopeStyle { kNorm, kNeox };
RopeStyle rope_style(Arch arch);

class RefModel {
 public:
  // Reads the architecture, checks every tensor's shape against the weight
  // table and dequantizes all weights to f32. Errors name the file and tensor.
  // YaRN RoPE scaling is not implemented here (kUnsupported).
  static Expected<RefModel> load(const gguf::File& f, const RefOptions& opt = {});

  const ArchConfig& config() const { return cfg_; }

  // Runs `tokens` causally from an empty cache and returns the logits after
  // every position ([tokens.size()][n_vocab]). Token ids must be < n_vocab.
  std::vector<std::vector<float>> forward(const std::vector<int32_t>& tokens,
                                          ForwardStats* stats = nullptr) const;

  // Feeds `prompt`, then appends the argmax token `n_gen` times (no stop on
  // end-of-generation). Returns only the generated ids.
  std::vector<int32_t> generate_greedy(const std::vector<int32_t>& prompt, int n_gen,
                                       ForwardStats* stats = nullptr) const;

 private:
  // A weight matrix [rows, cols], dequantized, with the format its input
  // row is rounded to under RefOptions::quantize_activations.
  struct Matrix {
    std::vector<float> w;
    size_t rows = 0, cols = 0;
    QType act_type = QType::F32;
  };
  struct Layer {
    std::vector<float> attn_norm;       // [n_embd]
    Matrix wq, wk, wv;                  // [q_dim, n_embd], [k_dim, n_embd], [v_dim, n_embd]
    std::vector<float> bq, bk, bv;      // qwen2 only
    std::vector<float> q_norm, k_norm;  // qwen3 only: [head_dim_k]
    Matrix wo;                          // [n_embd, n_head * head_dim_v]
    std::vector<float> ffn_norm;        // [n_embd]
    Matrix w_gate, w_up;                // [n_ff, n_embd]
    Matrix w_down;                      // [n_embd, n_ff]
  };
  struct Cache;  // per layer: K and V rows of every position so far

  // Runs one token at position cache.n_pos and returns its logits.
  std::vector<float> step(Cache& cache, int32_t token, ForwardStats* stats) const;
  void apply_rope(float* head, int pos) const;
  // y = W x, with x first rounded as RefOptions says.
  void matvec(const Matrix& m, const float* x, float* y) const;

  ArchConfig cfg_;
  RefOptions opt_;
  RopeStyle rope_style_ = RopeStyle::kNorm;
  std::vector<double> inv_freq_;  // rope_dim / 2 angles per position, all scaling folded in
  std::vector<float> tok_embd_;   // [n_vocab, n_embd]: rows are looked up, never rounded
  Matrix output_;                 // [n_vocab, n_embd]: output.weight or, tied, token_embd
  std::vector<float> output_norm_;
  std::vector<Layer> layers_;
};

}  // namespace test
}  // namespace sustain

// `sustain synth --preset needle-retriever`: a 2-layer `llama` model whose
// weights are constructed, not trained, so that its top-1 prediction after a
// query key K is the value V that followed K somewhere in a long haystack
// (the construction of ../shared/ref/needle/README.md). It makes "what does a
// quantized KV cache cost for long-context retrieval?" measurable on a CPU.
//
// Tokens (512-token vocabulary): keys 300–363, values 400–463, everything
// else filler. Residual stream (n_embd 512):
//   0        constant 1
//   1..64    key identity          65..128   value identity
//   129..192 filler identity (id mod 64)
//   193..256 P: "the key before me" (written by layer 0)
//   257..320 A: "the answer"        (written by layer 1)
// Layer 0 is a previous-token head made of RoPE alone: Q and K read the
// constant dimension, key pair m is phase-shifted by its frequency ω_m, so the
// score of query i on key j is ∝ Σ_m cos(ω_m (i − j − 1)), peaked at offset 1
// by `pos_gap` logits over offsets 0 and 2. Layer 1 is an induction head in
// the 32 lowest-frequency pairs (rope base 1e10: they barely turn at 64K):
// Q = the current key's identity, K = the P slot, a match scores `match_gap`.
// The output reads A: logit[400+v] = 10 · A_v.
//
// The dense variant keeps the function but makes the K vectors look like a
// trained model's: the key codes are dense random unit vectors (not one-hot),
// the induction head's Q/K dimensions are mixed by a random orthogonal
// matrix, every token adds a low-norm random background to its layer-0 and
// layer-1 K, and the residual stream is rotated by a random orthogonal
// matrix (RMSNorm with unit gains is rotation invariant, so this changes no
// logit in exact arithmetic but spreads every weight over all dimensions).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace sustain::tools {

inline constexpr const char* kNeedleRetrieverPreset = "needle-retriever";

struct RetrieverOptions {
  // Logit gap of layer 0's previous-token head between offset 1 and offsets
  // 0 and 2 (the reference model: 30; its control: 1e-4, i.e. switched off).
  double pos_gap = 30.0;
  // Logit of a key match in layer 1's induction head (anything else: 0 for
  // one-hot codes, ≈ match_gap · cos(code_a, code_b) for dense ones).
  double match_gap = 30.0;
  // Layer 0 uses only the RoPE pairs whose frequency is at least this
  // (0: all 64 high-frequency pairs; the reference's `cut0.1`: 0.1 → 13 pairs).
  double min_freq = 0.0;
  // Dense variant (see above); the next three fields apply only to it.
  bool dense = false;
  // Norm of the random background added to every token's K (relative to the
  // norm of the signal part of K, which is 1 after RMSNorm scaling).
  double background = 0.05;
  // Largest |cos| allowed between two key codes (codes are redrawn until
  // every pair is below it); sets the induction head's worst-case margin.
  double max_code_cos = 0.5;
  uint64_t seed = 42;
};

// Options for a named variant: "default", "control" (pos_gap 1e-4),
// "cut<F>" (min_freq F, e.g. "cut0.1"), "dense". Unknown names: kInvalidArgument.
Expected<RetrieverOptions> retriever_variant(const std::string& name);

struct RetrieverInfo {
  int pos_pairs = 0;       // RoPE pairs layer 0 uses
  double pos_scale = 0.0;  // per-pair amplitude of layer 0's Q and K
  double match_scale = 0.0;
  uint64_t file_bytes = 0;
};

// Writes the model (f32 tensors, a synthetic 512-token SentencePiece vocabulary).
Expected<RetrieverInfo> write_needle_retriever(const RetrieverOptions& opt,
                                               const std::string& out_path);

}  // namespace sustain::tools

// The pieces every llama-family forward pass is built from. Each
// architecture's forward (model/arch/<arch>.cc) is an explicit sequence of
// these calls, so the differences between architectures stay visible.
#pragma once

#include "model/model.h"

namespace sustain {

// Tokens [begin, end) of a batch.
struct TokenSpan {
  const Batch& batch;
  int64_t begin, end;
  int64_t size() const { return end - begin; }
  const BatchToken& operator[](int64_t i) const {
    return batch.tokens[static_cast<size_t>(begin + i)];
  }
};

attention::AttnParams attn_params(const ArchConfig& c);

// How Q and K are rotated: llama pairs neighbours (2i, 2i+1); qwen2/qwen3 use
// the NeoX layout (i, i + d/2), as their checkpoints were trained.
kernels::RopeParams rope_params(const ArchConfig& c, const ModelWeights& w, bool neox);

// ws.x[t] = embedding row of token t.
void embed(const Model& m, TokenSpan s, Workspace& ws);

struct AttnOptions {
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3: RMSNorm of each head of Q and K before RoPE
  bool neox = false;
  // gemma3: RMSNorm of the branch's output (post_attention_norm) before the
  // residual add; a sliding window; the local layers' own RoPE base with no
  // frequency scaling.
  bool post_norm = false;
  int window = 0;
  float rope_base = 0.0f;  // 0: the config's rope_freq_base and scaling
};
// x += [norm](Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x)));
// stores K/V in the cache.
void attention_block(const Model& m, int layer, TokenSpan s, const AttnOptions& o,
                     kv::KvCache& cache, Workspace& ws, ThreadPool& pool);

struct FfnOptions {
  bool gelu = false;       // gemma3: GELU (tanh form) instead of SiLU on the gate
  bool post_norm = false;  // gemma3: RMSNorm of the output (post_ffw_norm) before the add
};
// x += [norm](W_down · (act(W_gate · norm(x)) * (W_up · norm(x)))), act = SiLU or GELU
void ffn_block(const Model& m, int layer, TokenSpan s, Workspace& ws, ThreadPool& pool,
               const FfnOptions& o = {});

// Mixture of experts (qwen3moe): each token's FFN is the weighted sum of the
// SwiGLU experts its router ranks highest, x += Σ_j w_j · expert_j(norm(x));
// tokens are grouped by expert so each expert's matrices are read once.
void moe_ffn_block(const Model& m, int layer, TokenSpan s, Workspace& ws, ThreadPool& pool);

// logits of the tokens that want them: W_out · norm(x), in span order.
void output_head(const Model& m, TokenSpan s, Workspace& ws, ThreadPool& pool, float* logits);

// Architecture forwards (model/arch/*.cc).
Status forward_llama(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits);
Status forward_qwen2(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits);
Status forward_qwen3(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits);
Status forward_qwen3moe(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                        ThreadPool& pool, float* logits);
Status forward_gemma3(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                      ThreadPool& pool, float* logits);

inline Status forward_llama_family(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                                   ThreadPool& pool, float* logits) {
  switch (m.config().arch) {
    case Arch::kLlama: return forward_llama(m, s, cache, ws, pool, logits);
    case Arch::kQwen2: return forward_qwen2(m, s, cache, ws, pool, logits);
    case Arch::kQwen3: return forward_qwen3(m, s, cache, ws, pool, logits);
    case Arch::kQwen3Moe: return forward_qwen3moe(m, s, cache, ws, pool, logits);
    case Arch::kGemma3: return forward_gemma3(m, s, cache, ws, pool, logits);
  }
  return error(Code::kInternal, "unknown architecture");
}

}  // namespace sustain

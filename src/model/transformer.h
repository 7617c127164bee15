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

// Tensor split: this rank's partial product y (n floats) summed with the
// other ranks' in place (one all-reduce); nothing on one rank. A failure is
// kept in ws.comm_status for stage_output to return.
void reduce_partial(Workspace& ws, float* y, int64_t n);

// The blocks this forward computes, [stage_begin, stage_end): all the main
// blocks (an MTP block is not run by the forward), or those of the pipeline
// stage in ws.stage (model/stage.h).
int stage_begin(const Workspace& ws);
int stage_end(const Model& m, const Workspace& ws);
// The first stage embeds (token rows times `embd_scale`, rows given as
// embeddings as they are); a later stage receives the residual stream.
Status stage_input(const Model& m, TokenSpan s, Workspace& ws, float embd_scale = 1.0f);
// The last stage computes the logits (output_head); an earlier one sends the
// residual stream on.
Status stage_output(const Model& m, TokenSpan s, Workspace& ws, ThreadPool& pool, float* logits);

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
  // qwen35: attn_q yields each head's query and a gate beside it; the
  // attention output is multiplied by sigmoid(gate) before attn_output.
  bool out_gate = false;
  int kv_layer = -1;  // the layer's index in the KV cache; -1: the block index
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

// Tokens of the gated delta rule solved together in prefill.
inline constexpr int kDeltaRuleChunk = 64;

// One sequence's tokens in a span of a hybrid model's batch: [begin, end),
// in position order, and its recurrent-state slot.
struct SeqRun {
  int32_t slot = -1;
  int64_t begin = 0, end = 0;
};
// The runs of span `s`; fails naming the sequence when its tokens are not one
// run in position order starting where its state stands, or it has no state.
Status seq_runs(TokenSpan s, const kv::KvCache& cache, std::vector<SeqRun>& runs);

// Gated DeltaNet (qwen35): x += W_out · gatednorm(deltarule(conv(W_qkv · norm(x))), z);
// advances each sequence's conv state and S matrices for block `layer`,
// the `state_layer`-th recurrent block.
void delta_net_block(const Model& m, int layer, int state_layer, TokenSpan s,
                     const std::vector<SeqRun>& runs, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool);

// The state update of delta_net_block for `n` positions of one sequence
// from their recorded inputs (RecurrentRecord), without the projections:
// the convolution and the delta rule only.
void delta_net_replay(const Model& m, int layer, int state_layer, const RecurrentRecord& rec,
                      int64_t n, kv::KvCache& cache, Workspace& ws, ThreadPool& pool);

// Mixture of experts (qwen3moe): each token's FFN is the weighted sum of the
// SwiGLU experts its router ranks highest, x += Σ_j w_j · expert_j(norm(x));
// tokens are grouped by expert so each expert's matrices are read once.
void moe_ffn_block(const Model& m, int layer, TokenSpan s, Workspace& ws, ThreadPool& pool);

// logits of the tokens that want them: W_out · norm(x), in span order (the
// normed rows stay in ws.logits_in). `norm` / `out` replace the model's
// output norm and matrix (an MTP block's own head).
void output_head(const Model& m, TokenSpan s, Workspace& ws, ThreadPool& pool, float* logits,
                 const std::vector<float>* norm = nullptr,
                 const kernels::WeightView* out = nullptr);

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
Status forward_qwen35(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                      ThreadPool& pool, float* logits);
// qwen35's MTP block: token i and h_prev row i (the main model's normed
// final hidden state at position i - 1) give a draft of the token after i.
Status forward_qwen35_mtp(const Model& m, TokenSpan s, const float* h_prev, kv::KvCache& cache,
                          Workspace& ws, ThreadPool& pool, float* logits);

inline Status forward_llama_family(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                                   ThreadPool& pool, float* logits) {
  switch (m.config().arch) {
    case Arch::kLlama: return forward_llama(m, s, cache, ws, pool, logits);
    case Arch::kQwen2: return forward_qwen2(m, s, cache, ws, pool, logits);
    case Arch::kQwen3: return forward_qwen3(m, s, cache, ws, pool, logits);
    case Arch::kQwen3Moe: return forward_qwen3moe(m, s, cache, ws, pool, logits);
    case Arch::kGemma3: return forward_gemma3(m, s, cache, ws, pool, logits);
    case Arch::kQwen35: return forward_qwen35(m, s, cache, ws, pool, logits);
  }
  return error(Code::kInternal, "unknown architecture");
}

}  // namespace sustain

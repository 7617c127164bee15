// Qwen 3.5 (dense hybrid): of every full_attention_interval main blocks, the
// last is gated full attention (per-head RMSNorm of Q and K, NeoX RoPE over
// the first rope_dim dims — IMROPE reduces to it for text — and a sigmoid
// gate on the output) and the others Gated DeltaNet (model/delta_net.cc),
// whose recurrent state lives beside the KV pages. Every block has a SwiGLU
// FFN whose norm the files call post_attention_norm. The MTP blocks after
// the main ones are not part of this forward. Norm gains are used as stored
// (llama.cpp's converter added Qwen's "+1", except for the DeltaNet norm).
#include <algorithm>

#include "model/transformer.h"

namespace sustain {

Status forward_qwen35(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                      ThreadPool& pool, float* logits) {
  const ArchConfig& c = m.config();
  std::vector<SeqRun> runs;
  SUSTAIN_TRY(seq_runs(s, cache, runs));
  embed(m, s, ws);
  int state_layer = 0;
  for (uint32_t il = 0; il < c.n_main_layer(); ++il) {
    const int l = static_cast<int>(il);
    if (c.is_recurrent(il)) {
      delta_net_block(m, l, state_layer++, s, runs, cache, ws, pool);
    } else {
      AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true};
      o.out_gate = true;
      o.kv_layer = c.kv_layer(il);
      attention_block(m, l, s, o, cache, ws, pool);
    }
    ffn_block(m, l, s, ws, pool);
  }
  output_head(m, s, ws, pool, logits);
  for (const SeqRun& r : runs)
    cache.states().set_pos(r.slot, cache.states().pos(r.slot) + (r.end - r.begin));
  return Status::ok();
}

// The MTP / NextN block (the first block after the main ones):
//   u = W_eh · [RMSNorm(embed(x_i))·enorm ; RMSNorm(h_{i-1})·hnorm]
//   u += GatedAttention(RMSNorm(u)) over the block's own KV (layer 0 of `cache`)
//   u += FFN(RMSNorm(u));  logits = head(RMSNorm(u)·shared_head_norm)
// with the model's output norm, embedding and LM head where the block has
// none of its own. RMSNorm of the all-zero h row (position 0) is 0.
Status forward_qwen35_mtp(const Model& m, TokenSpan s, const float* h_prev, kv::KvCache& cache,
                          Workspace& ws, ThreadPool& pool, float* logits) {
  const ArchConfig& c = m.config();
  const uint32_t il = c.n_main_layer();
  const LayerWeights& L = m.weights().layers[il];
  const int64_t T = s.size(), d = c.n_embd;
  const kernels::WeightView& emb = L.nextn_embed.data ? L.nextn_embed : m.weights().token_embd;
  for (int64_t i = 0; i < T; ++i) {
    if (s[i].embd != nullptr) {
      std::copy_n(s[i].embd, d, ws.x.data() + i * d);  // an image row, as the main model takes it
    } else {
      kernels::get_row(emb, s[i].id, ws.x.data() + i * d);
    }
    float* in = ws.mtp_in.data() + i * 2 * d;
    kernels::rms_norm(ws.x.data() + i * d, L.nextn_enorm.data(), in, d, c.rms_eps);
    kernels::rms_norm(h_prev + (s.begin + i) * d, L.nextn_hnorm.data(), in + d, d, c.rms_eps);
  }
  kernels::matmul(L.nextn_eh_proj, ws.mtp_in.data(), 2 * d, T, ws.x.data(), d, pool,
                  ws.matmul_scratch.data());
  AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true};
  o.out_gate = true;
  o.kv_layer = 0;
  attention_block(m, static_cast<int>(il), s, o, cache, ws, pool);
  ffn_block(m, static_cast<int>(il), s, ws, pool);
  const std::vector<float>* norm = L.nextn_head_norm.empty() ? nullptr : &L.nextn_head_norm;
  const kernels::WeightView* head = L.nextn_head.data ? &L.nextn_head : nullptr;
  output_head(m, s, ws, pool, logits, norm, head);
  return Status::ok();
}

}  // namespace sustain

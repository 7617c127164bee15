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
  // A pipeline stage without DeltaNet blocks keeps no recurrent state.
  std::vector<SeqRun> runs;
  if (cache.has_state()) SUSTAIN_TRY(seq_runs(s, cache, runs));
  SUSTAIN_TRY(stage_input(m, s, ws));
  // The stage's state holds its own DeltaNet blocks, numbered from 0.
  int state_layer = 0;
  for (int il = stage_begin(ws); il < stage_end(m, ws); ++il) {
    const auto l = static_cast<uint32_t>(il);
    if (c.is_recurrent(l)) {
      delta_net_block(m, il, state_layer++, s, runs, cache, ws, pool);
    } else {
      AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true};
      o.out_gate = true;
      o.kv_layer = c.kv_layer(l);
      attention_block(m, il, s, o, cache, ws, pool);
    }
    ffn_block(m, il, s, ws, pool);
  }
  SUSTAIN_TRY(stage_output(m, s, ws, pool, logits));
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

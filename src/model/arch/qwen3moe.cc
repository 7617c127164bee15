// Qwen 3 MoE (Qwen3-30B-A3B and kin): qwen3's attention (per-head RMSNorm of
// Q and K, NeoX RoPE over the whole head) and, in every block, a mixture of
// SwiGLU experts in place of the dense FFN (no shared expert).
#include "model/transformer.h"

namespace sustain {

Status forward_qwen3moe(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                        ThreadPool& pool, float* logits) {
  SUSTAIN_TRY(stage_input(m, s, ws));
  const AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true};
  for (int il = stage_begin(ws); il < stage_end(m, ws); ++il) {
    attention_block(m, il, s, o, cache, ws, pool);
    moe_ffn_block(m, il, s, ws, pool);
  }
  return stage_output(m, s, ws, pool, logits);
}

}  // namespace sustain

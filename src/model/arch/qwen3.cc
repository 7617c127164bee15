// Qwen 3 (dense): no QKV bias; an RMSNorm over each head of Q and K before
// RoPE (NeoX layout).
#include "model/transformer.h"

namespace sustain {

Status forward_qwen3(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits) {
  SUSTAIN_TRY(stage_input(m, s, ws));
  const AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true};
  for (int il = stage_begin(ws); il < stage_end(m, ws); ++il) {
    attention_block(m, il, s, o, cache, ws, pool);
    ffn_block(m, il, s, ws, pool);
  }
  return stage_output(m, s, ws, pool, logits);
}

}  // namespace sustain

// Qwen 2 / 2.5: the llama block with biases on Q, K and V, and NeoX RoPE.
#include "model/transformer.h"

namespace sustain {

Status forward_qwen2(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits) {
  SUSTAIN_TRY(stage_input(m, s, ws));
  const AttnOptions o{.qkv_bias = true, .qk_norm = false, .neox = true};
  for (int il = stage_begin(ws); il < stage_end(m, ws); ++il) {
    attention_block(m, il, s, o, cache, ws, pool);
    ffn_block(m, il, s, ws, pool);
  }
  return stage_output(m, s, ws, pool, logits);
}

}  // namespace sustain

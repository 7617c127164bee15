// Llama 2/3/3.x, Mistral, SmolLM, TinyStories: pre-norm blocks, RoPE on
// neighbouring pairs (Llama 3.1+ with per-frequency factors), GQA, SwiGLU.
#include "model/transformer.h"

namespace sustain {

Status forward_llama(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits) {
  SUSTAIN_TRY(stage_input(m, s, ws));
  const AttnOptions o{.qkv_bias = false, .qk_norm = false, .neox = false};
  for (int il = stage_begin(ws); il < stage_end(m, ws); ++il) {
    attention_block(m, il, s, o, cache, ws, pool);
    ffn_block(m, il, s, ws, pool);
  }
  return stage_output(m, s, ws, pool, logits);
}

}  // namespace sustain

// Llama 2/3/3.x, Mistral, SmolLM, TinyStories: pre-norm blocks, RoPE on
// neighbouring pairs (Llama 3.1+ with per-frequency factors), GQA, SwiGLU.
#include "model/transformer.h"

namespace sustain {

Status forward_llama(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits) {
  embed(m, s, ws);
  const AttnOptions o{.qkv_bias = false, .qk_norm = false, .neox = false};
  for (int il = 0; il < static_cast<int>(m.config().n_layer); ++il) {
    attention_block(m, il, s, o, cache, ws, pool);
    ffn_block(m, il, s, ws, pool);
  }
  output_head(m, s, ws, pool, logits);
  return Status::ok();
}

}  // namespace sustain

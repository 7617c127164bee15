// Qwen 3 (dense): no QKV bias; an RMSNorm over each head of Q and K before
// RoPE (NeoX layout).
#include "model/transformer.h"

namespace sustain {

Status forward_qwen3(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool, float* logits) {
  embed(m, s, ws);
  const AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true};
  for (int il = 0; il < static_cast<int>(m.config().n_layer); ++il) {
    attention_block(m, il, s, o, cache, ws, pool);
    ffn_block(m, il, s, ws, pool);
  }
  output_head(m, s, ws, pool, logits);
  return Status::ok();
}

}  // namespace sustain

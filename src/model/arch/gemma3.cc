// Gemma 3: blocks of sliding-window attention (the last W positions, with
// their own RoPE base and no frequency scaling) interleaved with global ones
// (period P: block i is local when i mod P < P - 1); per-head RMSNorm of Q and
// K; an RMSNorm on each branch's output before the residual add; a GELU-gated
// FFN; embeddings scaled by sqrt(n_embd); tied output. The GGUF's norm gains
// already include Gemma's "+1" (llama.cpp's converter adds it), so they are
// used as stored.
#include <cmath>

#include "model/transformer.h"

namespace sustain {

Status forward_gemma3(const Model& m, TokenSpan s, kv::KvCache& cache, Workspace& ws,
                      ThreadPool& pool, float* logits) {
  const ArchConfig& c = m.config();
  // Token embeddings are scaled by sqrt(n_embd) (in f32, as llama.cpp);
  // embeddings given directly (image tokens) are not.
  SUSTAIN_TRY(stage_input(m, s, ws, std::sqrt(static_cast<float>(c.n_embd))));
  const FfnOptions f{.gelu = true, .post_norm = true};
  for (int b = stage_begin(ws); b < stage_end(m, ws); ++b) {
    const auto il = static_cast<uint32_t>(b);
    AttnOptions o{.qkv_bias = false, .qk_norm = true, .neox = true, .post_norm = true};
    if (c.is_sliding(il)) {
      o.window = static_cast<int>(c.sliding_window);
      o.rope_base = c.rope_freq_base_swa;
    }
    attention_block(m, static_cast<int>(il), s, o, cache, ws, pool);
    ffn_block(m, static_cast<int>(il), s, ws, pool, f);
  }
  return stage_output(m, s, ws, pool, logits);
}

}  // namespace sustain

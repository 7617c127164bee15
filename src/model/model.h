// Model: a GGUF file's weights as views into the mapping, its ArchConfig, and
// forward(Batch) → logits. The forward pass is explicit C++ per architecture
// (model/arch/<arch>.cc) built from the shared transformer pieces in
// transformer.h; kernels are reached only through kernels/ops.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/arch_config.h"
#include "model/batch.h"

namespace sustain {

struct LayerWeights {
  kernels::WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
  // Mixture of experts: the router [n_expert, n_embd] and one view per
  // expert into each stacked tensor (gate/up [n_ff_exp, n_embd], down
  // [n_embd, n_ff_exp]).
  kernels::WeightView router;
  std::vector<kernels::WeightView> gate_exps, up_exps, down_exps;
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  std::vector<float> q_norm, k_norm;       // qwen3: [head_dim]
  std::vector<float> attn_post_norm, ffn_post_norm;  // gemma3: [n_embd]
  std::vector<float> bq, bk, bv;           // qwen2: [q_dim], [k_dim], [v_dim]
};

struct ModelWeights {
  kernels::WeightView token_embd;  // [n_vocab, n_embd]
  kernels::WeightView output;      // [n_vocab, n_embd]; token_embd when tied
  std::vector<float> output_norm;  // [n_embd]
  std::vector<float> rope_freqs;   // Llama 3 factors, empty if none
  std::vector<LayerWeights> layers;
};

// Buffers for one forward call of up to `max_tokens` tokens, allocated once.
struct Workspace {
  int64_t max_tokens = 0;
  std::vector<float> x, cur, q, k, v, attn_out, gate, up, hidden;  // [max_tokens, dim]
  std::vector<float> logits_in;                                    // [max_tokens, n_embd]
  std::vector<uint8_t> matmul_scratch, attn_scratch;
  std::vector<attention::QueryInfo> queries;
  // Mixture of experts: router logits [max_tokens, n_expert]; each token's
  // chosen experts and weights [max_tokens, n_expert_used]; the rows routed to
  // one expert, gathered [max_tokens, n_embd], and their output.
  std::vector<float> router_logits, expert_weight, expert_in, expert_out;
  // expert_rows lists the (token, slot) pairs routed to each expert, expert
  // by expert; expert e's run is [expert_start[e], expert_start[e + 1]).
  std::vector<int32_t> expert_id, expert_rows, expert_start, expert_next;
};

class Model {
 public:
  static Expected<std::unique_ptr<Model>> load(const std::string& path);

  const ArchConfig& config() const { return cfg_; }
  const gguf::File& file() const { return file_; }
  const ModelWeights& weights() const { return w_; }

  // KV geometry for this model with the given cache formats.
  kv::KvGeometry kv_geometry(QType k_type = QType::F16, QType v_type = QType::F16,
                             int page_tokens = 32) const;

  // Allocates a workspace for batches of up to max_tokens tokens.
  Workspace make_workspace(int64_t max_tokens, int n_threads) const;

  // Runs the batch: appends every token's K/V to the cache and writes the
  // logits of the tokens with `logits` set, in batch order, to
  // logits[n_logits × n_vocab]. Batches larger than the workspace are
  // processed in workspace-sized chunks.
  Status forward(const Batch& batch, kv::KvCache& cache, Workspace& ws, ThreadPool& pool,
                 float* logits) const;

 private:
  Model() = default;
  gguf::File file_;
  ArchConfig cfg_;
  ModelWeights w_;
};

}  // namespace sustain

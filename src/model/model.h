// Model: a GGUF file's weights as views into the mapping, its ArchConfig, and
// forward(Batch) → logits. The forward pass is explicit C++ per architecture
// (model/arch/<arch>.cc) built from the shared transformer pieces in
// transformer.h; kernels are reached only through kernels/ops.h.
#pragma once

#include <memory>
#include <optional>
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
#include "model/repack.h"
#include "model/shard.h"
#include "model/stage.h"

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
  // Gated DeltaNet (qwen35): fused q/k/v [conv_channels, n_embd], output
  // gate z [inner, n_embd], β and decay inputs [n_v_heads, n_embd], output
  // [n_embd, inner]; dt bias and A [n_v_heads]; conv taps [conv_channels][K];
  // gated-norm gain [head_dim].
  kernels::WeightView ssm_qkv, ssm_gate, ssm_beta, ssm_alpha, ssm_out;
  std::vector<float> ssm_dt_bias, ssm_a, ssm_conv, ssm_norm;
  // MTP / NextN block (qwen35): projection of [embedding ; hidden] and its
  // norms; the optional own embedding and LM head (absent: the model's).
  kernels::WeightView nextn_eh_proj, nextn_embed, nextn_head;
  std::vector<float> nextn_enorm, nextn_hnorm, nextn_head_norm;
};

struct ModelWeights {
  kernels::WeightView token_embd;  // [n_vocab, n_embd]
  kernels::WeightView output;      // [n_vocab, n_embd]; token_embd when tied
  std::vector<float> output_norm;  // [n_embd]
  std::vector<float> rope_freqs;   // Llama 3 factors, empty if none
  std::vector<LayerWeights> layers;
};

// A hybrid's DeltaNet inputs for some positions of one sequence, as a
// forward computed them: per recurrent layer, each position's convolution
// input (conv_channels), β and decay (n_v_heads each). A speculative verify
// step records its sequences' rows, so that after a rejected draft the
// state is rebuilt from the accepted positions' rows alone
// (Model::replay_recurrent) instead of a forward over them.
struct RecurrentRecord {
  int32_t slot = -1;        // the sequence's recurrent-state slot
  int64_t pos0 = 0;         // the first position recorded
  int64_t n_max = 0;        // positions [pos0, pos0 + n_max) are recorded
  int64_t width = 0;        // floats per position and layer: conv_channels + 2 n_v_heads
  std::vector<float> rows;  // [n_recurrent_layer][n_max][width]
};

// Buffers for one forward call of up to `max_tokens` tokens, allocated once.
struct Workspace {
  int64_t max_tokens = 0;
  std::vector<float> x, cur, q, k, v, attn_out, gate, up, hidden;  // [max_tokens, dim]
  std::vector<float> logits_in;                                    // [max_tokens, n_embd]
  // qwen35 gated attention: the query projection with each head's gate
  // beside it [max_tokens, 2 q_dim], and the gates [max_tokens, q_dim].
  std::vector<float> q_gate, attn_gate;
  // Gated DeltaNet: projected channels before and after the convolution
  // [max_tokens, conv_channels], z and the outputs [max_tokens, inner],
  // β and decay [max_tokens, n_v_heads], and per-thread chunk scratch.
  std::vector<float> ssm_mixed, ssm_conv, ssm_z, ssm_o, ssm_beta, ssm_g, ssm_scratch;
  std::vector<float> mtp_in;  // MTP block: [embedding ; hidden] [max_tokens, 2 n_embd]
  // RoPE angles of a forward's tokens, [token][cos rope_dim/2, sin rope_dim/2],
  // with the positions and parameters they are for: every layer that rotates
  // the same tokens the same way reuses them (transformer.cc rope_table).
  std::vector<float> rope_table;
  std::vector<int64_t> rope_pos;
  kernels::RopeParams rope_key;
  size_t ssm_scratch_floats = 0;  // per thread
  std::vector<uint8_t> matmul_scratch, attn_scratch;
  std::vector<attention::QueryInfo> queries;
  // Mixture of experts: router logits [max_tokens, n_expert]; each token's
  // chosen experts and weights [max_tokens, n_expert_used]; the rows routed to
  // experts, gathered [expert_group_rows, n_embd], and their output.
  std::vector<float> router_logits, expert_weight, expert_in, expert_out;
  // A tensor split's rank: its experts' weighted outputs [max_tokens, n_embd].
  std::vector<float> moe_partial;
  // expert_rows lists the (token, slot) pairs routed to each expert, expert
  // by expert; expert e's run is [expert_start[e], expert_start[e + 1]).
  std::vector<int32_t> expert_id, expert_rows, expert_start, expert_next;
  // Rows of one group of experts run together (expert_in, expert_out, gate,
  // up and hidden hold that many), and the group's matmul jobs.
  int64_t expert_group_rows = 0;
  std::vector<kernels::MatmulJob> expert_jobs;
  // Tensor split with attn_output whole: every head's attention output,
  // gathered from the ranks [max_tokens, file q_dim].
  std::vector<float> attn_all;
  // Tensor split with the head split: this rank's logits columns
  // [max_tokens, its vocabulary rows].
  std::vector<float> logits_part;
  // The first failure of a collective inside a block (the blocks return no
  // status); stage_output returns it.
  Status comm_status;
  // The pipeline stage of the forward call in progress (null: the whole
  // model); set by Model::forward for the call's duration.
  const PipelineStage* stage = nullptr;
  // Set by the caller: the DeltaNet blocks copy the inputs of these
  // sequences' positions into them (null: nothing is recorded).
  std::vector<RecurrentRecord>* record = nullptr;
};

class Model {
 public:
  // `shard` (optional): load one rank's share of a tensor split
  // (model/shard.h). config() is then the rank's (its heads and FFN width),
  // the views cover its rows and columns, and forward() needs a stage whose
  // all_reduce (and gather_heads, where attn_output stays whole) reach the
  // other ranks.
  static Expected<std::unique_ptr<Model>> load(const std::string& path,
                                               const TensorShard* shard = nullptr);

  const ArchConfig& config() const { return cfg_; }
  // The file's architecture (config() of a shard is the rank's part of it).
  const ArchConfig& file_config() const { return file_cfg_; }
  // What --repack did at load (all zero when it was off).
  const RepackReport& repack_report() const { return repack_; }
  const TensorShard* shard() const { return shard_ ? &*shard_ : nullptr; }
  const gguf::File& file() const { return file_; }
  const ModelWeights& weights() const { return w_; }

  // KV geometry for this model with the given cache formats: the layers
  // that keep KV, and for hybrid models the recurrent state of each of
  // `state_slots` sequences.
  kv::KvGeometry kv_geometry(QType k_type = QType::F16, QType v_type = QType::F16,
                             int page_tokens = 32, int state_slots = 1) const;

  // Allocates a workspace for batches of up to max_tokens tokens.
  Workspace make_workspace(int64_t max_tokens, int n_threads) const;

  // Runs the batch: appends every token's K/V to the cache and writes the
  // logits of the tokens with `logits` set, in batch order, to
  // logits[n_logits × n_vocab]. Batches larger than the workspace are
  // processed in workspace-sized chunks. Hybrid models also advance each
  // sequence's recurrent state, so there every sequence's tokens must form
  // one run in position order that starts where its state stands.
  // `hidden` (optional, with logits): the normed final hidden state of the
  // same tokens [n_logits × n_embd], what the LM head multiplies and an MTP
  // block takes as input. `hidden_all` (optional, logits or not): the same
  // for every token of the batch, in batch order [n_tokens × n_embd] (the
  // MTP proposer feeds its block every position).
  // `stage` (optional): run only that pipeline stage's blocks over a cache
  // of stage_kv_geometry(); the first stage embeds, the others receive the
  // residual stream, the last computes the logits, the others send it on.
  // Every stage is called with the same batch and workspace size, so their
  // chunks match. hidden / hidden_all come only from the stage that ends
  // with the last block and computes the logits (a layer split's last
  // stage; rank 0 of a tensor split, whose residual stream is whole after
  // each all-reduce).
  Status forward(const Batch& batch, kv::KvCache& cache, Workspace& ws, ThreadPool& pool,
                 float* logits, float* hidden = nullptr, float* hidden_all = nullptr,
                 const PipelineStage* stage = nullptr) const;

  // The KV geometry of a stage's cache: only the layers of blocks
  // [layer_begin, layer_end); kv_layer_begin is set to match.
  kv::KvGeometry stage_kv_geometry(PipelineStage& stage, QType k_type = QType::F16,
                                   QType v_type = QType::F16, int page_tokens = 32) const;

  // The model's MTP / NextN block (qwen35; kUnsupported for a model without
  // one): token t of the batch with h_prev row t — the `hidden` of the
  // main forward at position pos - 1, zeros at position 0 — gives logits
  // that draft the token after t, for the tokens with `logits` set. The
  // block attends over its own KV in `mtp_cache` (mtp_kv_geometry).
  // `x_rows` (optional): the block's output before its head for the same
  // tokens [n_logits × n_embd]; with logits null the head is not run, and
  // mtp_head() gives those logits later (the MTP proposer computes them
  // only for a sequence the speculation gate lets draft).
  Status forward_mtp(const Batch& batch, const float* h_prev, kv::KvCache& mtp_cache, Workspace& ws,
                     ThreadPool& pool, float* logits, float* x_rows = nullptr) const;
  // The MTP block's head over `rows` rows of forward_mtp's x_rows: logits
  // [rows × n_vocab] and, optionally, the normed rows the head multiplied
  // [rows × n_embd] (what a chained MTP pass takes as its hidden input).
  Status mtp_head(const float* x_rows, int64_t rows, Workspace& ws, ThreadPool& pool, float* logits,
                  float* normed = nullptr) const;
  // A hybrid: advances state `rec.slot` of `cache` over the first `n`
  // recorded positions (from its state at rec.pos0), as a forward over those
  // tokens would, from the recorded rows: the convolution and the delta
  // rule of every DeltaNet block, no matrix. kInvalidArgument when the
  // record does not hold them or the state does not stand at rec.pos0.
  Status replay_recurrent(const RecurrentRecord& rec, int64_t n, kv::KvCache& cache, Workspace& ws,
                          ThreadPool& pool) const;
  // Sizes `rec` for `n` positions of this model (width and rows).
  void size_record(RecurrentRecord& rec, int64_t n) const;
  kv::KvGeometry mtp_kv_geometry(QType k_type = QType::F16, QType v_type = QType::F16,
                                 int page_tokens = 32) const;

 private:
  Model() = default;
  gguf::File file_;
  ArchConfig cfg_, file_cfg_;
  std::optional<TensorShard> shard_;
  // A shard's column slices (attn_output, ffn_down), copied out of the mapping.
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  RepackReport repack_;
  ModelWeights w_;
};

}  // namespace sustain

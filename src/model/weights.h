// The weight table: one list of every tensor an architecture has, with its
// GGUF name, role, layer and shape. Loading, validation, memory planning,
// quantization (which role gets which format) and synth all walk this list,
// so adding a tensor is a one-line change in weights.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/arch_config.h"

namespace sustain {
namespace gguf {
class File;
}

enum class TensorRole {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kRopeFreqs,  // Llama 3.1+ per-frequency RoPE factors
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,
  kAttnKNorm,
  kAttnOutput,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  // Mixture of experts: the router and each expert's matrices stacked along
  // a leading expert dimension ([n_expert, out, in]).
  kFfnGateInp,
  kFfnGateExps,
  kFfnUpExps,
  kFfnDownExps,
  // Gemma 3: RMSNorm of each branch's output before the residual add.
  kAttnPostNorm,
  kFfnPostNorm,
  // Gated DeltaNet (qwen35): fused q/k/v input projection, the output gate
  // z, per-value-head step β and decay (alpha, dt bias, A), the causal
  // convolution's taps, the gated RMSNorm and the output projection.
  kSsmQkv,
  kSsmGate,
  kSsmBeta,
  kSsmAlpha,
  kSsmDtBias,
  kSsmA,
  kSsmConv1d,
  kSsmNorm,
  kSsmOut,
  // MTP / NextN block (qwen35): input norms of the embedding and of the main
  // model's hidden state, their projection, and the block's output norm and
  // optional own embedding and LM head.
  kNextnEhProj,
  kNextnEnorm,
  kNextnHnorm,
  kNextnSharedHeadNorm,
  kNextnEmbedTokens,
  kNextnSharedHeadHead,
};
const char* tensor_role_name(TensorRole r);  // "attn_q", "ffn_down", ...

struct WeightSpec {
  std::string name;            // GGUF tensor name, e.g. "blk.3.attn_q.weight"
  TensorRole role;
  int layer = -1;              // -1 for tensors outside the blocks
  std::vector<int64_t> shape;  // PyTorch order: [out, in] for matrices
  bool required = true;

  // A matrix, or a stack of expert matrices ([n_expert, out, in]).
  bool is_matrix() const { return shape.size() >= 2; }
  uint64_t n_elements() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

// Every tensor of the architecture, in the order GGUF files conventionally
// list them (globals first, then blocks). `with_rope_freqs` adds the optional
// Llama 3 RoPE factor tensor.
std::vector<WeightSpec> weight_table(const ArchConfig& cfg, bool with_rope_freqs = false);

// The table without its optional tensors: what a file of the architecture
// holds when it carries none of them (what synth writes and `plan --preset`
// counts).
std::vector<WeightSpec> default_weight_table(const ArchConfig& cfg, bool with_rope_freqs = false);

// Checks that every required tensor is present with the table's shape, that
// optional ones, when present, have the right shape too, and that the file
// holds no tensor the table does not know. Errors name the tensor and shapes.
Status validate_weights(const ArchConfig& cfg, const gguf::File& f);

// Whether a tensor name is a mixture of experts' stacked expert matrices
// ("blk.N.ffn_{gate,up,down}_exps.weight"), of which a token reads only
// n_expert_used / n_expert.
bool is_expert_stack(std::string_view name);

// Total parameters of the table (what `synth --list` and `info` report).
uint64_t parameter_count(const std::vector<WeightSpec>& table);

}  // namespace sustain

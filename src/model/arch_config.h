// ArchConfig: a model's architecture and hyperparameters, read from GGUF
// metadata (`general.architecture` and the `{arch}.*` keys). Everything that
// needs a model's geometry — loading, validation, memory planning, synth,
// quantize — starts from this struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/qtype.h"

namespace sustain {
namespace gguf {
class File;
class Writer;
}  // namespace gguf

enum class Arch {
  kLlama,  // Llama 2/3/3.x, Mistral, SmolLM, TinyStories
  kQwen2,  // Qwen 2 / 2.5: biases on Q, K and V
  kQwen3,     // Qwen 3: RMS norm on Q and K per head
  kQwen3Moe,  // Qwen 3 MoE: qwen3 attention, a mixture of experts in every FFN
  kGemma3,    // Gemma 3: sliding-window and global layers, post-norms, GELU FFN
  kQwen35,    // Qwen 3.5 (dense hybrid): Gated DeltaNet layers, gated full attention, MTP
};

const char* arch_name(Arch a);  // GGUF spelling: "llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "qwen35"

// kLlama3 is not a metadata value: Llama 3.1+ files carry the per-frequency
// factors as a `rope_freqs.weight` tensor, and its presence selects it.
enum class RopeScaling { kNone, kLinear, kYarn, kLlama3 };
const char* rope_scaling_name(RopeScaling s);

struct ArchConfig {
  Arch arch = Arch::kLlama;
  std::string name;            // general.name, informational
  uint32_t n_layer = 0;        // {arch}.block_count
  uint32_t n_embd = 0;         // {arch}.embedding_length
  uint32_t n_ff = 0;           // {arch}.feed_forward_length
  uint32_t n_head = 0;         // {arch}.attention.head_count
  uint32_t n_head_kv = 0;      // {arch}.attention.head_count_kv (defaults to n_head)
  uint32_t head_dim_k = 0;     // {arch}.attention.key_length (defaults to n_embd / n_head)
  uint32_t head_dim_v = 0;     // {arch}.attention.value_length (defaults to head_dim_k)
  uint32_t n_vocab = 0;        // token_embd rows (or {arch}.vocab_size / tokenizer size)
  uint32_t n_ctx_train = 0;    // {arch}.context_length
  float rms_eps = 1e-5f;       // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;
  uint32_t rope_dim = 0;       // {arch}.rope.dimension_count (defaults to head_dim_k)
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale_factor = 1.0f;         // {arch}.rope.scaling.factor
  uint32_t rope_orig_ctx = 0;             // {arch}.rope.scaling.original_context_length
  bool tied_output = false;    // no output.weight: the embedding matrix is reused
  // Mixture of experts (qwen3moe): every FFN is n_expert SwiGLU experts of
  // width n_ff_exp, of which each token uses the n_expert_used its router
  // ranks highest. 0 experts = a dense FFN of width n_ff.
  uint32_t n_expert = 0;       // {arch}.expert_count
  uint32_t n_expert_used = 0;  // {arch}.expert_used_count
  uint32_t n_ff_exp = 0;       // {arch}.expert_feed_forward_length (default n_ff / n_expert_used)

  // Sliding-window attention (gemma3): with a window W > 0 and period P,
  // block i attends only to the last W positions (itself included) when
  // i mod P < P - 1; the other blocks are global. Sliding blocks rotate with
  // their own RoPE base and no frequency scaling.
  uint32_t sliding_window = 0;          // {arch}.attention.sliding_window
  uint32_t sliding_window_pattern = 0;  // {arch}.attention.sliding_window_pattern (gemma3: 6)
  float rope_freq_base_swa = 10000.0f;  // {arch}.rope.freq_base_swa
  float final_logit_softcap = 0.0f;     // {arch}.final_logit_softcapping; 0 = none

  // Hybrid linear attention (qwen35). Of the n_layer blocks the last n_nextn
  // are MTP/NextN blocks, not run by the main forward; main block i is a
  // Gated DeltaNet layer unless (i + 1) is a multiple of
  // full_attention_interval, when it is gated full attention. A DeltaNet
  // layer has ssm_n_k_heads query/key heads and ssm_n_v_heads value heads of
  // ssm_head_dim, a causal convolution of ssm_conv_kernel taps over its
  // q/k/v channels, and a recurrent state per value head.
  uint32_t n_nextn = 0;                 // {arch}.nextn_predict_layers
  uint32_t full_attention_interval = 0; // {arch}.full_attention_interval (qwen35: 4)
  uint32_t ssm_conv_kernel = 0;         // {arch}.ssm.conv_kernel
  uint32_t ssm_head_dim = 0;            // {arch}.ssm.state_size (d_k = d_v)
  uint32_t ssm_n_k_heads = 0;           // {arch}.ssm.group_count
  uint32_t ssm_n_v_heads = 0;           // {arch}.ssm.time_step_rank
  uint32_t ssm_inner = 0;               // {arch}.ssm.inner_size (= n_v_heads × head_dim)
  uint32_t rope_sections[4] = {0, 0, 0, 0};  // {arch}.rope.dimension_sections (IMROPE)

  bool has_qkv_bias() const { return arch == Arch::kQwen2; }
  bool has_qk_norm() const {
    return arch == Arch::kQwen3 || arch == Arch::kQwen3Moe || arch == Arch::kGemma3 ||
           arch == Arch::kQwen35;
  }
  bool is_sliding(uint32_t layer) const {
    return sliding_window > 0 && sliding_window_pattern > 0 &&
           layer % sliding_window_pattern < sliding_window_pattern - 1;
  }
  bool is_moe() const { return n_expert > 0; }
  bool is_hybrid() const { return arch == Arch::kQwen35; }
  // Blocks the main forward runs (the MTP blocks come after them).
  uint32_t n_main_layer() const { return n_layer - n_nextn; }
  bool is_nextn(uint32_t layer) const { return layer >= n_main_layer(); }
  // A Gated DeltaNet block: no KV cache, a fixed-size recurrent state.
  bool is_recurrent(uint32_t layer) const {
    return is_hybrid() && !is_nextn(layer) && full_attention_interval > 0 &&
           (layer + 1) % full_attention_interval != 0;
  }
  // Main blocks that keep a KV cache, and block `layer`'s index among them
  // (-1 for a recurrent or MTP block).
  uint32_t n_kv_layer() const;
  int kv_layer(uint32_t layer) const;
  // Per KV layer (kv_layer's numbering): 1 where the block is sliding-window.
  std::vector<uint8_t> kv_window_layers() const;
  uint32_t n_recurrent_layer() const { return n_main_layer() - n_kv_layer(); }
  // DeltaNet channels: q and k of every key head, v of every value head.
  uint32_t ssm_conv_channels() const {
    return 2 * ssm_n_k_heads * ssm_head_dim + ssm_n_v_heads * ssm_head_dim;
  }
  // Recurrent state of one sequence, every DeltaNet layer: the last K-1
  // inputs of the convolution and one head_dim × head_dim matrix per value
  // head, in f32.
  uint64_t recurrent_state_bytes() const {
    const uint64_t conv = uint64_t{ssm_conv_kernel > 0 ? ssm_conv_kernel - 1 : 0} *
                          ssm_conv_channels();
    const uint64_t ssm = uint64_t{ssm_n_v_heads} * ssm_head_dim * ssm_head_dim;
    return uint64_t{n_recurrent_layer()} * (conv + ssm) * sizeof(float);
  }
  // qwen35's full attention projects a sigmoid output gate beside each
  // query head: attn_q has 2 × q_dim outputs.
  bool has_attn_gate() const { return arch == Arch::kQwen35; }
  // Width of the FFN's hidden activations for one token and expert.
  uint32_t ffn_width() const { return is_moe() ? n_ff_exp : n_ff; }
  uint32_t q_dim() const { return n_head * head_dim_k; }
  uint32_t k_dim() const { return n_head_kv * head_dim_k; }
  uint32_t v_dim() const { return n_head_kv * head_dim_v; }
};

// Reads and validates the architecture from a GGUF file. Errors name the key.
Expected<ArchConfig> arch_config_from_gguf(const gguf::File& f);

// Writes the `general.architecture` and `{arch}.*` keys for cfg.
void arch_config_to_gguf(const ArchConfig& cfg, gguf::Writer& w);

// Checks internal consistency (head counts divide, sizes non-zero, ...).
Status validate_arch_config(const ArchConfig& cfg);

// KV-cache bytes per token of context:
//   n_kv_layer × n_head_kv × (row_bytes(k_type, head_dim_k) + row_bytes(v_type, head_dim_v))
// i.e. 2 × n_layers × n_kv_heads × head_dim × bytes/element when K and V
// share a format; block scales are included for quantized formats. Formats
// whose block does not divide the head dimension cannot hold a KV row: nullopt.
std::optional<uint64_t> kv_bytes_per_token(const ArchConfig& cfg, QType k_type, QType v_type);

}  // namespace sustain

#include "model/arch_config.h"

#include <cmath>
#include <string_view>

#include "gguf/gguf.h"

namespace sustain {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kGemma3: return "gemma3";
    case Arch::kQwen35: return "qwen35";
  }
  return "?";
}

uint32_t ArchConfig::n_kv_layer() const {
  uint32_t n = 0;
  for (uint32_t il = 0; il < n_main_layer(); ++il) n += !is_recurrent(il);
  return n;
}

int ArchConfig::kv_layer(uint32_t layer) const {
  if (layer >= n_main_layer() || is_recurrent(layer)) return -1;
  int k = 0;
  for (uint32_t il = 0; il < layer; ++il) k += !is_recurrent(il);
  return k;
}

std::vector<uint8_t> ArchConfig::kv_window_layers() const {
  std::vector<uint8_t> w(n_kv_layer(), 0);
  for (uint32_t l = 0; l < n_main_layer(); ++l)
    if (const int k = kv_layer(l); k >= 0 && is_sliding(l)) w[size_t(k)] = 1;
  return w;
}

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::kNone: return "none";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kYarn: return "yarn";
    case RopeScaling::kLlama3: return "llama3";
  }
  return "?";
}

namespace {

// Reads a uint32-sized hyperparameter; a value beyond 2^31 is rejected so
// later products in 64 bits cannot overflow.
Expected<uint32_t> get_dim(const gguf::File& f, const std::string& key,
                           std::optional<uint32_t> dflt = std::nullopt) {
  if (!f.has(key)) {
    if (dflt) return *dflt;
    return error(Code::kBadFile, "{}: required key `{}` is missing", f.path(), key);
  }
  SUSTAIN_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v > (1u << 31)) return error(Code::kBadFile, "{}: `{}` = {} is out of range", f.path(), key, v);
  return static_cast<uint32_t>(v);
}

}  // namespace

Expected<ArchConfig> arch_config_from_gguf(const gguf::File& f) {
  ArchConfig c;
  SUSTAIN_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
  if (arch == "llama") {
    c.arch = Arch::kLlama;
  } else if (arch == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (arch == "qwen3") {
    c.arch = Arch::kQwen3;
  } else if (arch == "qwen3moe") {
    c.arch = Arch::kQwen3Moe;
  } else if (arch == "gemma3") {
    c.arch = Arch::kGemma3;
  } else if (arch == "qwen35") {
    c.arch = Arch::kQwen35;
  } else {
    return error(Code::kUnsupported,
                 "{}: architecture `{}` is not supported (supported: llama, qwen2, qwen3, "
                 "qwen3moe, gemma3, qwen35)",
                 f.path(), arch);
  }
  SUSTAIN_ASSIGN_OR_RETURN(c.name, f.get_string_or("general.name", ""));
  const std::string p = arch + ".";
  SUSTAIN_ASSIGN_OR_RETURN(c.n_layer, get_dim(f, p + "block_count"));
  // Weight tables, KV geometry and plans loop over the layers: a count the
  // tensor directory cannot back would make a small file cost minutes and
  // gigabytes before any tensor is found missing. Each layer has tensors of
  // its own, so the directory bounds the count (and the file size bounds it).
  // A file with no tensors at all (a vocabulary-only GGUF) still describes
  // its architecture; validate_weights refuses it as a model.
  if (!f.tensors().empty() && c.n_layer > f.tensors().size())
    return error(Code::kBadFile,
                 "{}: `{}block_count` = {} but the file holds only {} tensors (each layer needs "
                 "tensors of its own)",
                 f.path(), p, c.n_layer, f.tensors().size());
  SUSTAIN_ASSIGN_OR_RETURN(c.n_embd, get_dim(f, p + "embedding_length"));
  SUSTAIN_ASSIGN_OR_RETURN(c.n_ff, get_dim(f, p + "feed_forward_length"));
  SUSTAIN_ASSIGN_OR_RETURN(c.n_head, get_dim(f, p + "attention.head_count"));
  if (c.n_head == 0) return error(Code::kBadFile, "{}: `{}attention.head_count` is 0", f.path(), p);
  SUSTAIN_ASSIGN_OR_RETURN(c.n_head_kv, get_dim(f, p + "attention.head_count_kv", c.n_head));
  SUSTAIN_ASSIGN_OR_RETURN(c.head_dim_k, get_dim(f, p + "attention.key_length", c.n_embd / c.n_head));
  SUSTAIN_ASSIGN_OR_RETURN(c.head_dim_v, get_dim(f, p + "attention.value_length", c.head_dim_k));
  SUSTAIN_ASSIGN_OR_RETURN(c.n_ctx_train, get_dim(f, p + "context_length", 2048));
  SUSTAIN_ASSIGN_OR_RETURN(c.rope_dim, get_dim(f, p + "rope.dimension_count", c.head_dim_k));
  SUSTAIN_ASSIGN_OR_RETURN(double eps, f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rms_eps = static_cast<float>(eps);
  SUSTAIN_ASSIGN_OR_RETURN(double base, f.get_float_or(p + "rope.freq_base", 10000.0));
  c.rope_freq_base = static_cast<float>(base);

  SUSTAIN_ASSIGN_OR_RETURN(std::string scaling, f.get_string_or(p + "rope.scaling.type", "none"));
  SUSTAIN_ASSIGN_OR_RETURN(double factor, f.get_float_or(p + "rope.scaling.factor", 1.0));
  c.rope_scale_factor = static_cast<float>(factor);
  SUSTAIN_ASSIGN_OR_RETURN(c.rope_orig_ctx,
                           get_dim(f, p + "rope.scaling.original_context_length", c.n_ctx_train));
  if (scaling == "none" || scaling.empty()) {
    c.rope_scaling = RopeScaling::kNone;
  } else if (scaling == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
  } else if (scaling == "yarn") {
    c.rope_scaling = RopeScaling::kYarn;
  } else {
    return error(Code::kUnsupported, "{}: `{}rope.scaling.type` = `{}` is not supported", f.path(),
                 p, scaling);
  }
  if (f.find_tensor("rope_freqs.weight")) c.rope_scaling = RopeScaling::kLlama3;

  if (c.arch == Arch::kGemma3) {
    SUSTAIN_ASSIGN_OR_RETURN(c.sliding_window, get_dim(f, p + "attention.sliding_window", 0));
    // llama.cpp's Gemma 3 default period: 5 sliding blocks, then a global one.
    SUSTAIN_ASSIGN_OR_RETURN(c.sliding_window_pattern,
                             get_dim(f, p + "attention.sliding_window_pattern", 6));
    if (c.sliding_window > 0 && c.sliding_window_pattern == 0)
      return error(Code::kBadFile, "{}: `{}attention.sliding_window_pattern` is 0", f.path(), p);
    SUSTAIN_ASSIGN_OR_RETURN(double swa_base, f.get_float_or(p + "rope.freq_base_swa", 10000.0));
    c.rope_freq_base_swa = static_cast<float>(swa_base);
    SUSTAIN_ASSIGN_OR_RETURN(double cap, f.get_float_or(p + "final_logit_softcapping", 0.0));
    if (!(cap >= 0.0) || !std::isfinite(cap))
      return error(Code::kBadFile, "{}: `{}final_logit_softcapping` = {} must be >= 0", f.path(),
                   p, cap);
    c.final_logit_softcap = static_cast<float>(cap);
  }
  if (c.arch == Arch::kQwen3Moe) {
    SUSTAIN_ASSIGN_OR_RETURN(c.n_expert, get_dim(f, p + "expert_count"));
    SUSTAIN_ASSIGN_OR_RETURN(c.n_expert_used, get_dim(f, p + "expert_used_count"));
    if (c.n_expert == 0 || c.n_expert_used == 0 || c.n_expert_used > c.n_expert)
      return error(Code::kBadFile,
                   "{}: `{}expert_used_count` = {} must be in [1, `{}expert_count` = {}]", f.path(),
                   p, c.n_expert_used, p, c.n_expert);
    // llama.cpp's default when the key is absent (qwen3moe.cpp).
    SUSTAIN_ASSIGN_OR_RETURN(c.n_ff_exp,
                             get_dim(f, p + "expert_feed_forward_length", c.n_ff / c.n_expert_used));
    if (c.n_ff_exp == 0)
      return error(Code::kBadFile, "{}: `{}expert_feed_forward_length` is 0", f.path(), p);
  }

  if (c.arch == Arch::kQwen35) {
    SUSTAIN_ASSIGN_OR_RETURN(c.n_nextn, get_dim(f, p + "nextn_predict_layers", 0));
    if (c.n_nextn >= c.n_layer)
      return error(Code::kBadFile,
                   "{}: `{}nextn_predict_layers` = {} leaves no main block of `{}block_count` = {}",
                   f.path(), p, c.n_nextn, p, c.n_layer);
    if (f.has(p + "attention.recurrent_layers"))
      return error(Code::kUnsupported,
                   "{}: `{}attention.recurrent_layers` (an explicit layer pattern) is not "
                   "supported; sustain follows `{}full_attention_interval`",
                   f.path(), p, p);
    SUSTAIN_ASSIGN_OR_RETURN(c.full_attention_interval,
                             get_dim(f, p + "full_attention_interval", 4));
    if (c.full_attention_interval == 0)
      return error(Code::kBadFile, "{}: `{}full_attention_interval` is 0", f.path(), p);
    SUSTAIN_ASSIGN_OR_RETURN(c.ssm_conv_kernel, get_dim(f, p + "ssm.conv_kernel"));
    SUSTAIN_ASSIGN_OR_RETURN(c.ssm_head_dim, get_dim(f, p + "ssm.state_size"));
    SUSTAIN_ASSIGN_OR_RETURN(c.ssm_n_k_heads, get_dim(f, p + "ssm.group_count"));
    SUSTAIN_ASSIGN_OR_RETURN(c.ssm_n_v_heads, get_dim(f, p + "ssm.time_step_rank"));
    SUSTAIN_ASSIGN_OR_RETURN(c.ssm_inner, get_dim(f, p + "ssm.inner_size"));
    if (!f.has(p + "rope.dimension_sections"))
      return error(Code::kBadFile, "{}: required key `{}rope.dimension_sections` is missing",
                   f.path(), p);
    SUSTAIN_ASSIGN_OR_RETURN(auto sec, f.get_int_array(p + "rope.dimension_sections"));
    if (sec.size() > 4)
      return error(Code::kBadFile, "{}: `{}rope.dimension_sections` has {} entries (at most 4)",
                   f.path(), p, sec.size());
    for (size_t i = 0; i < sec.size(); ++i) {
      if (sec[i] < 0 || sec[i] > 65536)
        return error(Code::kBadFile, "{}: `{}rope.dimension_sections`[{}] = {} is out of range",
                     f.path(), p, i, sec[i]);
      c.rope_sections[i] = static_cast<uint32_t>(sec[i]);
    }
  }

  // Vocabulary size: the embedding matrix is the authority.
  if (const auto* emb = f.find_tensor("token_embd.weight"); emb && emb->shape.size() == 2) {
    if (emb->shape[0] > (int64_t{1} << 31))
      return error(Code::kBadFile, "{}: token_embd.weight has {} rows", f.path(), emb->shape[0]);
    c.n_vocab = static_cast<uint32_t>(emb->shape[0]);
  } else if (f.has(p + "vocab_size")) {
    SUSTAIN_ASSIGN_OR_RETURN(c.n_vocab, get_dim(f, p + "vocab_size"));
  } else if (f.has("tokenizer.ggml.tokens")) {
    SUSTAIN_ASSIGN_OR_RETURN(auto toks, f.get_string_array("tokenizer.ggml.tokens"));
    c.n_vocab = static_cast<uint32_t>(toks.size());
  }
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  Status st = validate_arch_config(c);
  if (!st) return st.with_context(f.path());
  return c;
}

void arch_config_to_gguf(const ArchConfig& c, gguf::Writer& w) {
  const std::string a = arch_name(c.arch);
  const std::string p = a + ".";
  w.set_str("general.architecture", a);
  if (!c.name.empty()) w.set_str("general.name", c.name);
  w.set_u32(p + "context_length", c.n_ctx_train);
  w.set_u32(p + "embedding_length", c.n_embd);
  w.set_u32(p + "block_count", c.n_layer);
  w.set_u32(p + "feed_forward_length", c.n_ff);
  w.set_u32(p + "attention.head_count", c.n_head);
  w.set_u32(p + "attention.head_count_kv", c.n_head_kv);
  w.set_u32(p + "attention.key_length", c.head_dim_k);
  w.set_u32(p + "attention.value_length", c.head_dim_v);
  w.set_u32(p + "rope.dimension_count", c.rope_dim);
  w.set_f32(p + "rope.freq_base", c.rope_freq_base);
  w.set_f32(p + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.set_u32(p + "vocab_size", c.n_vocab);
  if (c.arch == Arch::kGemma3) {
    w.set_u32(p + "attention.sliding_window", c.sliding_window);
    w.set_u32(p + "attention.sliding_window_pattern", c.sliding_window_pattern);
    w.set_f32(p + "rope.freq_base_swa", c.rope_freq_base_swa);
    if (c.final_logit_softcap > 0.0f) w.set_f32(p + "final_logit_softcapping", c.final_logit_softcap);
  }
  if (c.is_hybrid()) {
    w.set_u32(p + "nextn_predict_layers", c.n_nextn);
    w.set_u32(p + "full_attention_interval", c.full_attention_interval);
    w.set_u32(p + "ssm.conv_kernel", c.ssm_conv_kernel);
    w.set_u32(p + "ssm.state_size", c.ssm_head_dim);
    w.set_u32(p + "ssm.group_count", c.ssm_n_k_heads);
    w.set_u32(p + "ssm.time_step_rank", c.ssm_n_v_heads);
    w.set_u32(p + "ssm.inner_size", c.ssm_inner);
    w.set(p + "rope.dimension_sections",
          gguf::Value::i32_array({static_cast<int32_t>(c.rope_sections[0]),
                                  static_cast<int32_t>(c.rope_sections[1]),
                                  static_cast<int32_t>(c.rope_sections[2]),
                                  static_cast<int32_t>(c.rope_sections[3])}));
  }
  if (c.is_moe()) {
    w.set_u32(p + "expert_count", c.n_expert);
    w.set_u32(p + "expert_used_count", c.n_expert_used);
    w.set_u32(p + "expert_feed_forward_length", c.n_ff_exp);
  }
  if (c.rope_scaling == RopeScaling::kLinear || c.rope_scaling == RopeScaling::kYarn) {
    w.set_str(p + "rope.scaling.type", rope_scaling_name(c.rope_scaling));
    w.set_f32(p + "rope.scaling.factor", c.rope_scale_factor);
    w.set_u32(p + "rope.scaling.original_context_length", c.rope_orig_ctx);
  }
}

Status validate_arch_config(const ArchConfig& c) {
  if (c.n_layer == 0 || c.n_embd == 0 || c.n_ff == 0 || c.n_head == 0 || c.n_head_kv == 0)
    return error(Code::kBadFile, "layers, embedding, FFN and head counts must be non-zero (got {}, {}, {}, {}, {})",
               c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv);
  if (c.n_head % c.n_head_kv != 0)
    return error(Code::kBadFile, "head_count {} is not a multiple of head_count_kv {}", c.n_head, c.n_head_kv);
  if (c.head_dim_k == 0 || c.head_dim_v == 0)
    return error(Code::kBadFile, "attention key/value length must be non-zero");
  if (c.rope_dim == 0 || c.rope_dim > c.head_dim_k || c.rope_dim % 2 != 0)
    return error(Code::kBadFile, "rope dimension {} must be even and at most the head dimension {}", c.rope_dim,
               c.head_dim_k);
  if (c.n_vocab == 0) return error(Code::kBadFile, "vocabulary size is 0");
  if ((c.arch == Arch::kQwen3Moe) != c.is_moe())
    return error(Code::kBadFile, "{} {} experts", arch_name(c.arch),
                 c.is_moe() ? "cannot have" : "needs");
  if (c.is_moe() && (c.n_expert_used == 0 || c.n_expert_used > c.n_expert || c.n_ff_exp == 0))
    return error(Code::kBadFile, "{} of {} experts used per token, expert FFN {}: out of range",
                 c.n_expert_used, c.n_expert, c.n_ff_exp);
  if (!(c.rms_eps > 0.0f) || !(c.rope_freq_base > 0.0f))
    return error(Code::kBadFile, "rms epsilon and rope base must be positive");
  if (c.is_hybrid()) {
    if (c.n_nextn >= c.n_layer)
      return error(Code::kBadFile, "nextn_predict_layers {} leaves no main block of {}", c.n_nextn,
                   c.n_layer);
    if (c.full_attention_interval == 0)
      return error(Code::kBadFile, "full_attention_interval is 0");
    if (c.ssm_conv_kernel == 0 || c.ssm_conv_kernel > 64 || c.ssm_head_dim == 0 ||
        c.ssm_n_k_heads == 0 || c.ssm_n_v_heads == 0)
      return error(Code::kBadFile,
                   "ssm.conv_kernel {} (1..64), ssm.state_size {}, ssm.group_count {} and "
                   "ssm.time_step_rank {} must be non-zero",
                   c.ssm_conv_kernel, c.ssm_head_dim, c.ssm_n_k_heads, c.ssm_n_v_heads);
    if (c.ssm_n_v_heads % c.ssm_n_k_heads != 0)
      return error(Code::kBadFile,
                   "ssm.time_step_rank {} (value heads) is not a multiple of ssm.group_count {} "
                   "(key heads)",
                   c.ssm_n_v_heads, c.ssm_n_k_heads);
    if (uint64_t{c.ssm_inner} != uint64_t{c.ssm_n_v_heads} * c.ssm_head_dim)
      return error(Code::kBadFile,
                   "ssm.inner_size {} must equal ssm.time_step_rank {} × ssm.state_size {}",
                   c.ssm_inner, c.ssm_n_v_heads, c.ssm_head_dim);
    if (c.head_dim_k != c.head_dim_v)
      return error(Code::kBadFile, "qwen35 attention key length {} and value length {} differ",
                   c.head_dim_k, c.head_dim_v);
    // IMROPE for text: every rotary pair must take the token position (a
    // pair on the fourth stream would stay unrotated, which only images use).
    const uint32_t s0 = c.rope_sections[0], s1 = c.rope_sections[1], s2 = c.rope_sections[2];
    const uint32_t sect = s0 + s1 + s2 + c.rope_sections[3];
    if (sect == 0) return error(Code::kBadFile, "rope.dimension_sections are all 0");
    for (uint32_t j = 0; j < c.rope_dim / 2; ++j) {
      const uint32_t sec = j % sect;
      const bool pos = (sec % 3 == 0 && sec < 3 * s0) || (sec % 3 == 1 && sec < 3 * s1) ||
                       (sec % 3 == 2 && sec < 3 * s2);
      if (!pos)
        return error(Code::kUnsupported,
                     "rope.dimension_sections [{}, {}, {}, {}] leave rotary pair {} of {} on the "
                     "fourth (image) position stream, which sustain does not implement",
                     s0, s1, s2, c.rope_sections[3], j, c.rope_dim / 2);
    }
  } else if (c.n_nextn != 0) {
    return error(Code::kBadFile, "{} cannot have NextN/MTP blocks", arch_name(c.arch));
  }
  return Status::ok();
}

std::optional<uint64_t> kv_bytes_per_token(const ArchConfig& c, QType k_type, QType v_type) {
  const auto& tk = qtype_traits(k_type);
  const auto& tv = qtype_traits(v_type);
  if (c.head_dim_k % tk.block_elems != 0 || c.head_dim_v % tv.block_elems != 0) return std::nullopt;
  const uint64_t k_row = qtype_row_bytes(k_type, c.head_dim_k);
  const uint64_t v_row = qtype_row_bytes(v_type, c.head_dim_v);
  return uint64_t{c.n_kv_layer()} * c.n_head_kv * (k_row + v_row);
}

}  // namespace sustain

#include "model/weights.h"

#include <fmt/format.h>

#include <unordered_set>

#include "gguf/gguf.h"

namespace sustain {

const char* tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::kTokenEmbd: return "token_embd";
    case TensorRole::kOutputNorm: return "output_norm";
    case TensorRole::kOutput: return "output";
    case TensorRole::kRopeFreqs: return "rope_freqs";
    case TensorRole::kAttnNorm: return "attn_norm";
    case TensorRole::kAttnQ: return "attn_q";
    case TensorRole::kAttnK: return "attn_k";
    case TensorRole::kAttnV: return "attn_v";
    case TensorRole::kAttnQBias: return "attn_q.bias";
    case TensorRole::kAttnKBias: return "attn_k.bias";
    case TensorRole::kAttnVBias: return "attn_v.bias";
    case TensorRole::kAttnQNorm: return "attn_q_norm";
    case TensorRole::kAttnKNorm: return "attn_k_norm";
    case TensorRole::kAttnOutput: return "attn_output";
    case TensorRole::kFfnNorm: return "ffn_norm";
    case TensorRole::kFfnGate: return "ffn_gate";
    case TensorRole::kFfnUp: return "ffn_up";
    case TensorRole::kFfnDown: return "ffn_down";
    case TensorRole::kFfnGateInp: return "ffn_gate_inp";
    case TensorRole::kFfnGateExps: return "ffn_gate_exps";
    case TensorRole::kFfnUpExps: return "ffn_up_exps";
    case TensorRole::kFfnDownExps: return "ffn_down_exps";
    case TensorRole::kAttnPostNorm: return "post_attention_norm";
    case TensorRole::kFfnPostNorm: return "post_ffw_norm";
    case TensorRole::kSsmQkv: return "attn_qkv";
    case TensorRole::kSsmGate: return "attn_gate";
    case TensorRole::kSsmBeta: return "ssm_beta";
    case TensorRole::kSsmAlpha: return "ssm_alpha";
    case TensorRole::kSsmDtBias: return "ssm_dt.bias";
    case TensorRole::kSsmA: return "ssm_a";
    case TensorRole::kSsmConv1d: return "ssm_conv1d";
    case TensorRole::kSsmNorm: return "ssm_norm";
    case TensorRole::kSsmOut: return "ssm_out";
    case TensorRole::kNextnEhProj: return "nextn.eh_proj";
    case TensorRole::kNextnEnorm: return "nextn.enorm";
    case TensorRole::kNextnHnorm: return "nextn.hnorm";
    case TensorRole::kNextnSharedHeadNorm: return "nextn.shared_head_norm";
    case TensorRole::kNextnEmbedTokens: return "nextn.embed_tokens";
    case TensorRole::kNextnSharedHeadHead: return "nextn.shared_head_head";
  }
  return "?";
}

namespace {

// qwen35: Gated DeltaNet blocks, gated full-attention blocks and MTP blocks
// (a gated full-attention block with the NextN tensors beside it). The
// pre-FFN norm is `post_attention_norm` in these files.
void qwen35_layer(const ArchConfig& c, uint32_t il, std::vector<WeightSpec>& t) {
  using R = TensorRole;
  const int l = static_cast<int>(il);
  const int64_t d = c.n_embd, ff = c.n_ff, v = c.n_vocab;
  auto name = [&](const char* s) { return fmt::format("blk.{}.{}", il, s); };
  t.push_back({name("attn_norm.weight"), R::kAttnNorm, l, {d}});
  if (c.is_recurrent(il)) {
    const int64_t ch = c.ssm_conv_channels(), inner = c.ssm_inner, hv = c.ssm_n_v_heads;
    t.push_back({name("attn_qkv.weight"), R::kSsmQkv, l, {ch, d}});
    t.push_back({name("attn_gate.weight"), R::kSsmGate, l, {inner, d}});
    t.push_back({name("ssm_beta.weight"), R::kSsmBeta, l, {hv, d}});
    t.push_back({name("ssm_alpha.weight"), R::kSsmAlpha, l, {hv, d}});
    t.push_back({name("ssm_dt.bias"), R::kSsmDtBias, l, {hv}});
    t.push_back({name("ssm_a"), R::kSsmA, l, {hv}});
    t.push_back({name("ssm_conv1d.weight"), R::kSsmConv1d, l, {ch, int64_t{c.ssm_conv_kernel}}});
    t.push_back({name("ssm_norm.weight"), R::kSsmNorm, l, {int64_t{c.ssm_head_dim}}});
    t.push_back({name("ssm_out.weight"), R::kSsmOut, l, {d, inner}});
  } else {
    const int64_t q = c.q_dim(), k = c.k_dim(), vd = c.v_dim();
    t.push_back({name("attn_q.weight"), R::kAttnQ, l, {2 * q, d}});  // query | gate per head
    t.push_back({name("attn_k.weight"), R::kAttnK, l, {k, d}});
    t.push_back({name("attn_v.weight"), R::kAttnV, l, {vd, d}});
    t.push_back({name("attn_q_norm.weight"), R::kAttnQNorm, l, {int64_t{c.head_dim_k}}});
    t.push_back({name("attn_k_norm.weight"), R::kAttnKNorm, l, {int64_t{c.head_dim_k}}});
    t.push_back({name("attn_output.weight"), R::kAttnOutput, l, {d, int64_t{c.n_head} * c.head_dim_v}});
  }
  t.push_back({name("post_attention_norm.weight"), R::kFfnNorm, l, {d}});
  t.push_back({name("ffn_gate.weight"), R::kFfnGate, l, {ff, d}});
  t.push_back({name("ffn_up.weight"), R::kFfnUp, l, {ff, d}});
  t.push_back({name("ffn_down.weight"), R::kFfnDown, l, {d, ff}});
  if (c.is_nextn(il)) {
    t.push_back({name("nextn.eh_proj.weight"), R::kNextnEhProj, l, {d, 2 * d}});
    t.push_back({name("nextn.enorm.weight"), R::kNextnEnorm, l, {d}});
    t.push_back({name("nextn.hnorm.weight"), R::kNextnHnorm, l, {d}});
    // Absent: the main model's output norm, embedding and LM head serve.
    t.push_back({name("nextn.shared_head_norm.weight"), R::kNextnSharedHeadNorm, l, {d}, false});
    t.push_back({name("nextn.embed_tokens.weight"), R::kNextnEmbedTokens, l, {v, d}, false});
    t.push_back({name("nextn.shared_head_head.weight"), R::kNextnSharedHeadHead, l, {v, d}, false});
  }
}

}  // namespace

std::vector<WeightSpec> weight_table(const ArchConfig& c, bool with_rope_freqs) {
  using R = TensorRole;
  const int64_t d = c.n_embd, ff = c.n_ff, v = c.n_vocab;
  const int64_t q = c.q_dim(), k = c.k_dim(), vd = c.v_dim();
  std::vector<WeightSpec> t;
  t.push_back({"token_embd.weight", R::kTokenEmbd, -1, {v, d}});
  t.push_back({"output_norm.weight", R::kOutputNorm, -1, {d}});
  if (!c.tied_output) t.push_back({"output.weight", R::kOutput, -1, {v, d}});
  if (with_rope_freqs || c.rope_scaling == RopeScaling::kLlama3)
    t.push_back({"rope_freqs.weight", R::kRopeFreqs, -1, {int64_t{c.rope_dim} / 2}});
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    if (c.is_hybrid()) {
      qwen35_layer(c, il, t);
      continue;
    }
    const int l = static_cast<int>(il);
    auto name = [&](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    t.push_back({name("attn_norm.weight"), R::kAttnNorm, l, {d}});
    t.push_back({name("attn_q.weight"), R::kAttnQ, l, {q, d}});
    t.push_back({name("attn_k.weight"), R::kAttnK, l, {k, d}});
    t.push_back({name("attn_v.weight"), R::kAttnV, l, {vd, d}});
    if (c.has_qkv_bias()) {
      t.push_back({name("attn_q.bias"), R::kAttnQBias, l, {q}});
      t.push_back({name("attn_k.bias"), R::kAttnKBias, l, {k}});
      t.push_back({name("attn_v.bias"), R::kAttnVBias, l, {vd}});
    }
    if (c.has_qk_norm()) {
      t.push_back({name("attn_q_norm.weight"), R::kAttnQNorm, l, {int64_t{c.head_dim_k}}});
      t.push_back({name("attn_k_norm.weight"), R::kAttnKNorm, l, {int64_t{c.head_dim_k}}});
    }
    t.push_back({name("attn_output.weight"), R::kAttnOutput, l, {d, q}});
    if (c.arch == Arch::kGemma3)
      t.push_back({name("post_attention_norm.weight"), R::kAttnPostNorm, l, {d}});
    t.push_back({name("ffn_norm.weight"), R::kFfnNorm, l, {d}});
    if (c.is_moe()) {
      const int64_t ne = c.n_expert, fe = c.n_ff_exp;
      t.push_back({name("ffn_gate_inp.weight"), R::kFfnGateInp, l, {ne, d}});
      t.push_back({name("ffn_gate_exps.weight"), R::kFfnGateExps, l, {ne, fe, d}});
      t.push_back({name("ffn_up_exps.weight"), R::kFfnUpExps, l, {ne, fe, d}});
      t.push_back({name("ffn_down_exps.weight"), R::kFfnDownExps, l, {ne, d, fe}});
      continue;
    }
    t.push_back({name("ffn_gate.weight"), R::kFfnGate, l, {ff, d}});
    t.push_back({name("ffn_up.weight"), R::kFfnUp, l, {ff, d}});
    t.push_back({name("ffn_down.weight"), R::kFfnDown, l, {d, ff}});
    if (c.arch == Arch::kGemma3)
      t.push_back({name("post_ffw_norm.weight"), R::kFfnPostNorm, l, {d}});
  }
  return t;
}

std::vector<WeightSpec> default_weight_table(const ArchConfig& c, bool with_rope_freqs) {
  std::vector<WeightSpec> t = weight_table(c, with_rope_freqs);
  std::erase_if(t, [](const WeightSpec& w) { return !w.required; });
  return t;
}

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}
}  // namespace

Status validate_weights(const ArchConfig& c, const gguf::File& f) {
  // The table has several tensors per layer: a block count beyond the
  // directory is refused before it is built, so a tensorless file claiming
  // 2^31 layers costs nothing.
  if (c.n_layer > f.tensors().size())
    return error(Code::kBadFile, "{}: {} layers need more tensors than the {} the file holds",
                 f.path(), c.n_layer, f.tensors().size());
  const auto table = weight_table(c, f.find_tensor("rope_freqs.weight") != nullptr);
  std::unordered_set<std::string> known;
  for (const auto& w : table) {
    known.insert(w.name);
    const gguf::TensorInfo* ti = f.find_tensor(w.name);
    if (!ti) {
      if (w.required)
        return error(Code::kBadFile, "{}: tensor `{}` is missing ({} {} expects it)", f.path(),
                     w.name, arch_name(c.arch), tensor_role_name(w.role));
      continue;
    }
    if (ti->shape != w.shape)
      return error(Code::kBadFile, "{}: tensor `{}` has shape {}, expected {}", f.path(), w.name,
                   shape_str(ti->shape), shape_str(w.shape));
  }
  for (const auto& ti : f.tensors())
    if (!known.count(ti.name))
      return error(Code::kBadFile, "{}: unexpected tensor `{}` for architecture {}", f.path(),
                   ti.name, arch_name(c.arch));
  return Status::ok();
}

bool is_expert_stack(std::string_view name) {
  constexpr std::string_view kSuffix = "_exps.weight";
  return name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix;
}

uint64_t parameter_count(const std::vector<WeightSpec>& table) {
  uint64_t n = 0;
  for (const auto& w : table) n += w.n_elements();
  return n;
}

}  // namespace sustain

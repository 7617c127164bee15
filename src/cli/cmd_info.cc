// `sustain info FILE`: what a GGUF file holds — architecture, parameter
// count, tensor formats and bytes, KV-cache bytes per token for each KV
// format, tokenizer — as text or JSON. A vision projector (mmproj) file is
// described by its encoder, input size and image tokens instead.
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/weights.h"
#include "tools/quant_mix.h"
#include "vision/projector.h"

namespace sustain::cli {
namespace {

struct InfoArgs {
  std::string path;
  bool json = false;
  bool tensors = false;
  bool metadata = false;
};

// KV formats that `info` reports bytes/token for (same format for K and V).
constexpr QType kKvTypes[] = {QType::F32,  QType::F16,  QType::BF16, QType::Q8_0,
                              QType::Q5_1, QType::Q5_0, QType::Q4_1, QType::Q4_0,
                              QType::FP8_E4M3};

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string human_count(uint64_t n) {
  if (n >= 1000000000ull) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1000000ull) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1000ull) return fmt::format("{:.2f}K", n / 1e3);
  return fmt::format("{}", n);
}

std::string file_type_name(uint64_t ft) {
  for (const auto& t : tools::file_types())
    if (t.gguf_file_type == ft) return std::string(t.name);
  return fmt::format("{}", ft);
}

std::string value_summary(const gguf::Value& v) {
  using VT = gguf::ValueType;
  switch (v.type) {
    case VT::kString: {
      const auto& s = std::get<std::string>(v.v);
      std::string out = s.size() > 60 ? s.substr(0, 57) + "..." : s;
      for (auto& c : out)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      return "\"" + out + "\"";
    }
    case VT::kArray: {
      const auto& a = std::get<gguf::Array>(v.v);
      return fmt::format("[{} x {}]", a.items.size(), gguf::value_type_name(a.elem_type));
    }
    case VT::kBool: return std::get<bool>(v.v) ? "true" : "false";
    case VT::kFloat32:
    case VT::kFloat64: return fmt::format("{}", std::get<double>(v.v));
    case VT::kInt8:
    case VT::kInt16:
    case VT::kInt32:
    case VT::kInt64: return fmt::format("{}", std::get<int64_t>(v.v));
    default: return fmt::format("{}", std::get<uint64_t>(v.v));
  }
}

// j["vision"]: the projector's hyperparameters, or the problem that stops it loading.
void describe_projector(const std::string& path, nlohmann::ordered_json& j) {
  auto& v = j["vision"];
  auto p = vision::Projector::open(path);
  if (!p) {
    v["problem"] = p.status().message();
    return;
  }
  const vision::VisionHparams& hp = p->hparams();
  j["name"] = "vision projector, " + hp.projector_type;
  v["projector_type"] = hp.projector_type;
  v["image_size"] = hp.image_size;
  v["patch_size"] = hp.patch_size;
  v["n_patches"] = hp.n_patches();
  v["n_layer"] = hp.n_layer;
  v["n_embd"] = hp.n_embd;
  v["n_ff"] = hp.n_ff;
  v["n_head"] = hp.n_head;
  v["head_dim"] = hp.head_dim();
  v["eps"] = hp.eps;
  v["image_mean"] = hp.image_mean;
  v["image_std"] = hp.image_std;
  v["n_image_tokens"] = p->n_tokens();
  v["out_dim"] = p->out_dim();
  v["bytes"] = p->tensor_bytes();
  for (const auto& [k, val] : p->head().describe()) v["projector"][k] = val;
}

int run_info(const InfoArgs& a) {
  auto opened = gguf::File::open(a.path);
  if (!opened) return fail(opened.status().message());
  const gguf::File& f = *opened;
  nlohmann::ordered_json j;
  j["file"] = a.path;
  j["file_bytes"] = f.file_size();
  j["gguf_version"] = f.version();
  j["alignment"] = f.alignment();
  j["n_tensors"] = f.tensors().size();
  j["n_metadata"] = f.metadata().size();

  // Tensor-format histogram and parameter count.
  struct Hist {
    uint64_t count = 0, elements = 0, bytes = 0;
  };
  std::map<std::string, Hist> hist;
  uint64_t n_params = 0, tensor_bytes = 0;
  for (const auto& t : f.tensors()) {
    auto& h = hist[std::string(qtype_name(t.type))];
    ++h.count;
    h.elements += t.n_elements;
    h.bytes += t.n_bytes;
    n_params += t.n_elements;
    tensor_bytes += t.n_bytes;
  }
  j["n_params"] = n_params;
  j["tensor_bytes"] = tensor_bytes;
  j["bits_per_weight"] = n_params ? 8.0 * tensor_bytes / n_params : 0.0;
  auto ft = f.get_uint_or("general.file_type", ~0ull);
  if (ft && *ft != ~0ull) j["file_type"] = file_type_name(*ft);
  for (const auto& [name, h] : hist)
    j["tensor_types"][name] = {{"count", h.count}, {"elements", h.elements}, {"bytes", h.bytes}};

  auto arch_str = f.get_string_or("general.architecture", "");
  j["architecture"] = arch_str ? *arch_str : "";
  auto cfg = arch_config_from_gguf(f);
  std::string arch_problem;
  if (cfg) {
    const ArchConfig& c = *cfg;
    j["name"] = c.name;
    j["hparams"] = {{"n_layer", c.n_layer},
                    {"n_embd", c.n_embd},
                    {"n_ff", c.n_ff},
                    {"n_head", c.n_head},
                    {"n_head_kv", c.n_head_kv},
                    {"head_dim_k", c.head_dim_k},
                    {"head_dim_v", c.head_dim_v},
                    {"n_vocab", c.n_vocab},
                    {"n_ctx_train", c.n_ctx_train},
                    {"rope_freq_base", c.rope_freq_base},
                    {"rope_dim", c.rope_dim},
                    {"rope_scaling", rope_scaling_name(c.rope_scaling)},
                    {"rms_eps", c.rms_eps},
                    {"tied_output", c.tied_output},
                    {"qkv_bias", c.has_qkv_bias()},
                    {"qk_norm", c.has_qk_norm()},
                    {"n_expert", c.n_expert},
                    {"n_expert_used", c.n_expert_used},
                    {"n_ff_exp", c.n_ff_exp},
                    {"sliding_window", c.sliding_window},
                    {"sliding_window_pattern", c.sliding_window_pattern},
                    {"rope_freq_base_swa", c.rope_freq_base_swa}};
    if (c.sliding_window > 0 || c.is_hybrid()) {
      std::vector<std::string> kinds;
      for (uint32_t il = 0; il < c.n_layer; ++il)
        kinds.push_back(c.is_nextn(il)       ? "mtp"
                        : c.is_recurrent(il) ? "linear"
                        : c.is_sliding(il)   ? "sliding"
                                             : "full");
      j["layer_kinds"] = kinds;
    }
    if (c.is_hybrid()) {
      j["hparams"]["n_nextn"] = c.n_nextn;
      j["hparams"]["full_attention_interval"] = c.full_attention_interval;
      j["hparams"]["ssm"] = {{"conv_kernel", c.ssm_conv_kernel},
                             {"head_dim", c.ssm_head_dim},
                             {"n_k_heads", c.ssm_n_k_heads},
                             {"n_v_heads", c.ssm_n_v_heads},
                             {"inner", c.ssm_inner}};
      j["recurrent_state_bytes_per_sequence"] = c.recurrent_state_bytes();
      j["n_kv_layer"] = c.n_kv_layer();
    }
    if (c.is_moe()) {
      // A token reads only its experts: the stacked expert tensors count
      // n_expert_used / n_expert toward the parameters it uses.
      uint64_t active = 0;
      for (const auto& t : f.tensors())
        active += is_expert_stack(t.name) ? t.n_elements / c.n_expert * c.n_expert_used
                                          : t.n_elements;
      j["n_params_active"] = active;
    }
    Status wv = validate_weights(c, f);
    j["weights_valid"] = wv.is_ok();
    if (!wv) j["weights_problem"] = wv.message();
    for (QType kt : kKvTypes) {
      auto b = kv_bytes_per_token(c, kt, kt);
      std::string key(qtype_name(kt));
      for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (key == "fp8_e4m3") key = "fp8";
      if (b) {
        j["kv_bytes_per_token"][key] = *b;
      } else {
        j["kv_bytes_per_token"][key] = nullptr;
      }
    }
  } else if (vision::is_projector_file(f)) {
    describe_projector(a.path, j);
  } else {
    arch_problem = cfg.status().message();
    j["arch_problem"] = arch_problem;
  }

  // Tokenizer.
  auto tok_model = f.get_string_or("tokenizer.ggml.model", "");
  if (tok_model && !tok_model->empty()) {
    j["tokenizer"]["model"] = *tok_model;
    if (auto pre = f.get_string_or("tokenizer.ggml.pre", ""); pre && !pre->empty())
      j["tokenizer"]["pre"] = *pre;
    if (const auto* v = f.find("tokenizer.ggml.tokens"); v && v->type == gguf::ValueType::kArray)
      j["tokenizer"]["n_tokens"] = std::get<gguf::Array>(v->v).items.size();
    if (const auto* v = f.find("tokenizer.ggml.merges"); v && v->type == gguf::ValueType::kArray)
      j["tokenizer"]["n_merges"] = std::get<gguf::Array>(v->v).items.size();
    for (const char* k : {"bos", "eos", "eot", "pad", "unknown"}) {
      auto id = f.get_uint_or(fmt::format("tokenizer.ggml.{}_token_id", k), ~0ull);
      if (id && *id != ~0ull && *id < (1ull << 32)) j["tokenizer"][std::string(k) + "_id"] = *id;
    }
    j["tokenizer"]["has_chat_template"] = f.has("tokenizer.chat_template");
  }

  if (a.tensors) {
    for (const auto& t : f.tensors())
      j["tensors"].push_back({{"name", t.name},
                              {"type", qtype_name(t.type)},
                              {"shape", t.shape},
                              {"bytes", t.n_bytes},
                              {"offset", f.data_offset() + t.offset}});
  }
  if (a.metadata) {
    for (const auto& [k, v] : f.metadata()) j["metadata"][k] = value_summary(v);
  }

  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  // Text report.
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(fmt::format("file          {} ({}, GGUF v{}, {} tensors, {} metadata keys)", a.path,
                   human_bytes(f.file_size()), f.version(), f.tensors().size(),
                   f.metadata().size()));
  line(fmt::format("architecture  {}{}", j["architecture"].get<std::string>(),
                   j.contains("name") && !j["name"].get<std::string>().empty()
                       ? "  (" + j["name"].get<std::string>() + ")"
                       : ""));
  line(fmt::format("parameters    {} ({}), {} of tensor data, {:.2f} bits/weight{}",
                   human_count(n_params), n_params, human_bytes(tensor_bytes),
                   j["bits_per_weight"].get<double>(),
                   j.contains("file_type") ? ", file type " + j["file_type"].get<std::string>() : ""));
  if (cfg) {
    const ArchConfig& c = *cfg;
    line(fmt::format("layers        {}   d_model {}   d_ff {}   vocab {}", c.n_layer, c.n_embd,
                     c.n_ff, c.n_vocab));
    if (c.is_moe())
      line(fmt::format("experts       {} per FFN, {} used per token, expert FFN {}; {} ({}) "
                       "parameters active per token",
                       c.n_expert, c.n_expert_used, c.n_ff_exp,
                       human_count(j["n_params_active"].get<uint64_t>()),
                       j["n_params_active"].get<uint64_t>()));
    if (c.is_hybrid()) {
      line(fmt::format("hybrid        {} Gated DeltaNet blocks, {} full-attention blocks (every {}th), "
                       "{} MTP block{}",
                       c.n_recurrent_layer(), c.n_kv_layer(), c.full_attention_interval, c.n_nextn,
                       c.n_nextn == 1 ? "" : "s"));
      line(fmt::format("deltanet      {} key / {} value heads of {}, conv {} taps; recurrent state "
                       "{} per sequence",
                       c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim, c.ssm_conv_kernel,
                       human_bytes(c.recurrent_state_bytes())));
    }
    if (c.sliding_window > 0) {
      uint32_t local = 0;
      for (uint32_t il = 0; il < c.n_layer; ++il) local += c.is_sliding(il);
      line(fmt::format("sliding       window {} tokens on {} of {} blocks (period {}), RoPE base {} "
                       "there; the others global",
                       c.sliding_window, local, c.n_layer, c.sliding_window_pattern,
                       c.rope_freq_base_swa));
    }
    line(fmt::format("attention     {} heads, {} KV heads (GQA {}), head dim {} / {}{}{}", c.n_head,
                     c.n_head_kv, c.n_head / c.n_head_kv, c.head_dim_k, c.head_dim_v,
                     c.has_qkv_bias() ? ", QKV bias" : "", c.has_qk_norm() ? ", Q/K norm" : ""));
    line(fmt::format("rope          base {}, dim {}, scaling {}{}", c.rope_freq_base, c.rope_dim,
                     rope_scaling_name(c.rope_scaling),
                     c.rope_scaling == RopeScaling::kLinear || c.rope_scaling == RopeScaling::kYarn
                         ? fmt::format(" x{}", c.rope_scale_factor)
                         : ""));
    line(fmt::format("context       {} tokens (trained)", c.n_ctx_train));
    line(fmt::format("output        {}", c.tied_output ? "tied to token_embd" : "separate output.weight"));
    if (!j["weights_valid"].get<bool>())
      line("weights       PROBLEM: " + j["weights_problem"].get<std::string>());
    else
      line("weights       every tensor present with the expected shape");
  } else if (j.contains("vision")) {
    const auto& v = j["vision"];
    if (v.contains("image_size")) {
      line(fmt::format("encoder       ViT: {} blocks, width {}, FFN {}, {} heads of {}, "
                       "LayerNorm eps {}",
                       v["n_layer"].get<uint32_t>(), v["n_embd"].get<uint32_t>(),
                       v["n_ff"].get<uint32_t>(), v["n_head"].get<uint32_t>(),
                       v["head_dim"].get<uint32_t>(), v["eps"].get<float>()));
      line(fmt::format("image         {0}x{0} input, {1}x{1} patches -> {2} patches, "
                       "mean {3} std {4}",
                       v["image_size"].get<uint32_t>(), v["patch_size"].get<uint32_t>(),
                       v["n_patches"].get<uint32_t>(), v["image_mean"].dump(),
                       v["image_std"].dump()));
      std::string facts;
      for (auto it = v["projector"].begin(); it != v["projector"].end(); ++it)
        facts += fmt::format("{}{}: {}", facts.empty() ? "" : "; ", it.key(),
                             it.value().get<std::string>());
      line(fmt::format("projector     {} ({})", v["projector_type"].get<std::string>(), facts));
      line(fmt::format("output        {} image tokens of width {} per image "
                       "(the text model's n_embd)",
                       v["n_image_tokens"].get<int64_t>(), v["out_dim"].get<int64_t>()));
    }
    if (v.contains("problem"))
      line("weights       PROBLEM: " + v["problem"].get<std::string>());
    else
      line("weights       every tensor present with the expected shape");
  } else {
    line("hparams       not available: " + arch_problem);
  }
  line("");
  line("tensor formats");
  for (const auto& [name, h] : hist)
    line(fmt::format("  {:<8} {:>5} tensors  {:>14} elements  {:>12}", name, h.count,
                     human_count(h.elements), human_bytes(h.bytes)));
  if (cfg) {
    line("");
    line(fmt::format("KV cache per token (K and V in the same format) = 2 x n_layer x n_kv_heads x "
                     "head_dim x bytes/elem{}",
                     cfg->is_hybrid() ? fmt::format(", over the {} of {} blocks that keep KV",
                                                    cfg->n_kv_layer(), cfg->n_layer)
                                      : std::string()));
    for (auto it = j["kv_bytes_per_token"].begin(); it != j["kv_bytes_per_token"].end(); ++it) {
      if (it.value().is_null()) {
        line(fmt::format("  {:<6} n/a (head dim {} is not a multiple of its block)", it.key(),
                         cfg->head_dim_k));
        continue;
      }
      const uint64_t b = it.value().get<uint64_t>();
      line(fmt::format("  {:<6} {:>10} /token   {:>11} at 32K   {:>11} at trained {}", it.key(),
                       human_bytes(b), human_bytes(b * 32768), human_bytes(b * cfg->n_ctx_train),
                       cfg->n_ctx_train));
    }
  }
  if (j.contains("tokenizer")) {
    const auto& t = j["tokenizer"];
    line("");
    std::string ids;
    for (const char* k : {"bos_id", "eos_id", "eot_id", "pad_id", "unknown_id"})
      if (t.contains(k)) ids += fmt::format(" {}={}", k, t[k].get<uint64_t>());
    line(fmt::format("tokenizer     {}{}, {} tokens{}{}{}", t["model"].get<std::string>(),
                     t.contains("pre") ? " (pre " + t["pre"].get<std::string>() + ")" : "",
                     t.contains("n_tokens") ? t["n_tokens"].get<uint64_t>() : 0,
                     t.contains("n_merges") ? fmt::format(", {} merges", t["n_merges"].get<uint64_t>()) : "",
                     ids, t["has_chat_template"].get<bool>() ? ", chat template" : ""));
  }
  if (a.metadata) {
    line("");
    line("metadata");
    for (const auto& [k, v] : f.metadata()) line(fmt::format("  {:<48} {}", k, value_summary(v)));
  }
  if (a.tensors) {
    line("");
    line(fmt::format("  {:<36} {:<8} {:<20} {:>12} {:>12}", "tensor", "type", "shape", "bytes", "offset"));
    for (const auto& t : f.tensors())
      line(fmt::format("  {:<36} {:<8} {:<20} {:>12} {:>12}", t.name, qtype_name(t.type),
                       fmt::format("[{}]", fmt::join(t.shape, ", ")), t.n_bytes,
                       f.data_offset() + t.offset));
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  auto* sub = app.add_subcommand("info", "Describe a GGUF file: architecture, parameters, formats, KV bytes per token, tokenizer; or a vision projector (mmproj)");
  sub->add_option("file", args->path, "GGUF file")->required();
  sub->add_flag("--json", args->json, "print a JSON object instead of text");
  sub->add_flag("--tensors", args->tensors, "list every tensor (name, type, shape, bytes, offset)");
  sub->add_flag("--metadata", args->metadata, "list every metadata key");
  return [args] { return run_info(*args); };
}

}  // namespace sustain::cli

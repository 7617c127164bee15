#include "tools/tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

namespace sustain::tools {
namespace {

using nlohmann::json;

// The pre-tokenizer regexes as tokenizer.json files spell them.
constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Expected<json> read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(Code::kIo, "cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(Code::kBadFile, "{} is not valid JSON", path);
  return j;
}

// Walks the pre_tokenizer tree: the Split regex and whether ByteLevel is there.
void scan_pre(const json& p, std::vector<std::string>& regexes, bool& byte_level,
              bool& byte_level_regex) {
  if (!p.is_object()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    for (const json& q : p["pretokenizers"]) scan_pre(q, regexes, byte_level, byte_level_regex);
  } else if (type == "Split" && p.contains("pattern") && p["pattern"].is_object()) {
    const json& pat = p["pattern"];
    if (pat.contains("Regex") && pat["Regex"].is_string()) regexes.push_back(pat["Regex"]);
    if (pat.contains("String") && pat["String"].is_string())
      regexes.push_back("string:" + pat["String"].get<std::string>());
  } else if (type == "ByteLevel") {
    byte_level = true;
    byte_level_regex = byte_level_regex || p.value("use_regex", true);
  } else {
    regexes.push_back("type:" + type);
  }
}

Expected<std::string> detect_pre(const json& root, const std::string& path) {
  std::vector<std::string> regexes;
  bool byte_level = false, byte_level_regex = false;
  scan_pre(root.value("pre_tokenizer", json()), regexes, byte_level, byte_level_regex);
  if (!byte_level)
    return error(Code::kUnsupported,
                 "{}: pre_tokenizer has no ByteLevel step (only byte-level "
                 "BPE tokenizers are supported)",
                 path);
  if (regexes.empty() && byte_level_regex) return std::string("gpt-2");
  if (regexes.size() == 1 && regexes[0] == kLlama3Regex) return std::string("llama-bpe");
  if (regexes.size() == 1 && regexes[0] == kQwen2Regex) return std::string("qwen2");
  return error(Code::kUnsupported,
               "{}: pre_tokenizer {} is not one sustain recognises (Llama 3, Qwen 2, GPT-2); "
               "name tokenizer.ggml.pre explicitly",
               path, root.value("pre_tokenizer", json()).dump().substr(0, 300));
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Expected<TokenizerJsonInfo> import_tokenizer_json(const std::string& path, gguf::Writer& w,
                                                  const TokenizerJsonOptions& opt) {
  SUSTAIN_ASSIGN_OR_RETURN(json root, read_json(path));
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
    return error(Code::kBadFile, "{}: no \"model\" object", path);
  const json& model = root["model"];
  if (model.value("type", "") != "BPE")
    return error(Code::kUnsupported, "{}: model.type is '{}', only BPE is supported", path,
                 model.value("type", ""));
  if (model.value("byte_fallback", false))
    return error(Code::kUnsupported,
                 "{}: BPE with byte_fallback (SentencePiece style) is not "
                 "supported",
                 path);
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return error(Code::kBadFile, "{}: model.vocab is not an object", path);

  std::string pre = opt.pre;
  if (pre.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(pre, detect_pre(root, path));
  }

  bool nfc = false;
  const json norm = root.value("normalizer", json());
  if (norm.is_object()) {
    const std::string type = norm.value("type", "");
    const bool empty_seq = type == "Sequence" && norm.contains("normalizers") &&
                           norm["normalizers"].is_array() && norm["normalizers"].empty();
    if (type == "NFC") {
      nfc = true;
    } else if (!empty_seq) {
      return error(Code::kUnsupported, "{}: normalizer '{}' is not supported (only NFC)", path,
                   type);
    }
  }

  // id -> (text, type)
  std::map<uint32_t, std::pair<std::string, int32_t>> by_id;
  constexpr uint32_t kMaxId = 1u << 24;
  for (const auto& [text, idv] : model["vocab"].items()) {
    if (!idv.is_number_unsigned() || idv.get<uint64_t>() >= kMaxId)
      return error(Code::kBadFile, "{}: model.vocab[\"{}\"] is not a valid id", path, text);
    by_id[idv.get<uint32_t>()] = {text, 1};
  }
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const json& t : root["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() ||
          !t.contains("content") || !t["content"].is_string() || t["id"].get<uint64_t>() >= kMaxId)
        return error(Code::kBadFile, "{}: malformed entry in added_tokens: {}", path,
                     t.dump().substr(0, 200));
      const std::string content = t["content"];
      const bool looks_special = content.size() >= 4 && content.rfind("<|", 0) == 0 &&
                                 content.compare(content.size() - 2, 2, "|>") == 0;
      by_id[t["id"].get<uint32_t>()] = {content,
                                        t.value("special", false) || looks_special ? 3 : 4};
    }
  }
  if (by_id.empty()) return error(Code::kBadFile, "{}: the vocabulary is empty", path);
  uint32_t n = by_id.rbegin()->first + 1;
  if (opt.n_vocab != 0) {
    if (opt.n_vocab < n)
      return error(Code::kInvalidArgument, "{} has token ids up to {}, more than n_vocab = {}",
                   path, n - 1, opt.n_vocab);
    n = opt.n_vocab;
  }
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, 5);
  for (uint32_t i = 0; i < n; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  std::map<std::string, uint32_t> seen;
  for (const auto& [id, tt] : by_id) {
    auto [it, fresh] = seen.emplace(tt.first, id);
    if (!fresh)
      return error(Code::kBadFile, "{}: token '{}' has ids {} and {}", path, tt.first, it->second,
                   id);
    tokens[id] = tt.first;
    types[id] = tt.second;
  }

  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return error(Code::kBadFile, "{}: malformed entry in model.merges: {}", path,
                     m.dump().substr(0, 200));
      }
    }
  }
  if (merges.empty()) return error(Code::kBadFile, "{}: model.merges is empty", path);

  json cfg;
  std::string cfg_path = opt.config_path;
  if (cfg_path.empty()) {
    auto beside = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(beside)) cfg_path = beside.string();
  }
  if (!cfg_path.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(cfg, read_json(cfg_path));
  }

  w.set_str("tokenizer.ggml.model", "gpt2");
  w.set_str("tokenizer.ggml.pre", pre);
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array(merges));
  if (nfc) w.set_bool("tokenizer.sustain.nfc", true);
  if (cfg.is_object()) {
    auto set_id = [&](const char* cfg_key, const std::string& gguf_key) {
      if (auto t = config_token(cfg, cfg_key)) {
        if (auto it = seen.find(*t); it != seen.end()) w.set_u32(gguf_key, it->second);
      }
    };
    set_id("bos_token", "tokenizer.ggml.bos_token_id");
    set_id("eos_token", "tokenizer.ggml.eos_token_id");
    set_id("pad_token", "tokenizer.ggml.padding_token_id");
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      w.set_bool("tokenizer.ggml.add_bos_token", cfg["add_bos_token"].get<bool>());
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      w.set_bool("tokenizer.ggml.add_eos_token", cfg["add_eos_token"].get<bool>());
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
      w.set_str("tokenizer.chat_template", cfg["chat_template"].get<std::string>());
  }

  TokenizerJsonInfo info;
  info.n_vocab = n;
  info.n_merges = static_cast<uint32_t>(merges.size());
  info.pre = pre;
  return info;
}

}  // namespace sustain::tools

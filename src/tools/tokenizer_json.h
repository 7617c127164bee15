// Imports a Hugging Face tokenizer.json (byte-level BPE: Llama 3, Qwen 2/3,
// GPT-2 style) into GGUF tokenizer metadata, so a synthetic or converted
// model carries a real vocabulary.
//
// Written keys: tokenizer.ggml.{model = "gpt2", pre, tokens, token_type,
// merges}, the bos/eos/padding token ids and add_bos_token/add_eos_token
// where tokenizer_config.json (read from beside tokenizer.json) names them,
// tokenizer.chat_template when it has one, and tokenizer.sustain.nfc when
// the tokenizer declares an NFC normalizer (llama.cpp ignores that key and
// does not normalize; sustain follows the tokenizer's definition).
//
// Token types follow convert_hf_to_gguf.py: added tokens marked special, or
// written "<|...|>", are control (3); other added tokens user-defined (4);
// ids below n_vocab that no token uses are "[PAD<id>]" unused (5).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf.h"

namespace sustain::tools {

struct TokenizerJsonOptions {
  // tokenizer_config.json; "" = the one beside tokenizer.json, if any.
  std::string config_path;
  // tokenizer.ggml.pre; "" = recognised from the pre-tokenizer's regex
  // (Llama 3 -> "llama-bpe", Qwen 2 -> "qwen2", plain ByteLevel -> "gpt-2").
  std::string pre;
  // Total tokens (the model's embedding rows); 0 = as many as the file has.
  uint32_t n_vocab = 0;
};

// What was imported (for messages and for checking against the model).
struct TokenizerJsonInfo {
  uint32_t n_vocab = 0;
  uint32_t n_merges = 0;
  std::string pre;
};

// Errors (kBadFile / kUnsupported) name the file and the field at fault.
Expected<TokenizerJsonInfo> import_tokenizer_json(const std::string& path, gguf::Writer& w,
                                                  const TokenizerJsonOptions& opt = {});

}  // namespace sustain::tools

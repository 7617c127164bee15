// Pre-tokenizers for byte-level BPE: the regex splits that llama.cpp applies
// for each tokenizer.ggml.pre, written by hand over Unicode character
// classes (no regex engine: std::regex is slow and has no \p{L}).
//
// A pre-tokenizer is a list of steps. Each step splits every piece the
// previous one produced; text a step's pattern does not match stays a piece
// of its own (Hugging Face's "Isolated" split behaviour).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sustain::tokenizer {

enum class PreType {
  kGpt2,           // 's|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,         // Llama 3: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
  kQwen2,          // as Llama 3 but \p{N} one digit at a time
  kStarcoder,      // \p{N}, then GPT-2
  kFalcon,         // punctuation runs, GPT-2, [0-9]{3}
  kDeepseekLlm,    // newlines, letter runs, punctuation runs, trailing space, CJK, \p{N}+
  kDeepseekCoder,  // newlines, \s?\p{L}+, \s?\p{P}+, CJK, \p{N}
  kDefault,        // llama.cpp's fallback: punctuation runs, GPT-2, \p{N}+, [0-9]{3}
};

// What a tokenizer.ggml.pre name selects, with the flags llama.cpp ties to it.
struct PreConfig {
  PreType type = PreType::kDefault;
  bool ignore_merges = false;  // a word that is a token is not split into merges
  bool clean_spaces = true;    // detokenize drops the space in " ." " ," " 's" ...
  bool add_bos = false;        // default of add_bos_token when the file has none
  bool nfc = false;            // default of NFC normalization (the HF tokenizer's normalizer)
};

// An unknown name is an error naming it and listing the supported ones. An
// empty name is llama.cpp's "default".
Expected<PreConfig> pre_config(const std::string& name);
std::string supported_pre_names();

// Splits valid UTF-8 into words (UTF-8, not yet byte-encoded).
std::vector<std::string> pre_tokenize(PreType type, std::string_view text);

}  // namespace sustain::tokenizer

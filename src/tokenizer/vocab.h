// The loaded vocabulary shared by the tokenizer's source files (private).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace sustain::tokenizer {

// Token attributes, from tokenizer.ggml.token_type (llama.cpp's
// llama_token_attr, of which these are the ones tokenization reads).
enum Attr : uint16_t {
  kAttrNormal = 1 << 0,
  kAttrUnknown = 1 << 1,
  kAttrControl = 1 << 2,
  kAttrUserDefined = 1 << 3,
  kAttrUnused = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 6,  // whitespace before the token's text is dropped
  kAttrRstrip = 1 << 7,  // whitespace after the token's text is dropped
};

struct Tokenizer::Impl {
  bool spm = true;  // "llama"; else "gpt2" (byte-level BPE)
  std::string model, pre;
  PreConfig pre_cfg;

  std::vector<std::string> text;  // per id
  std::vector<float> score;
  std::vector<uint16_t> attr;
  std::unordered_map<std::string, int32_t> text_to_id;
  std::unordered_map<std::string, int32_t> merge_rank;  // "left right" -> rank (BPE)
  std::array<int32_t, 256> byte_token{};                // id for each byte, -1 if none

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SPM: a space before text that starts the input
  bool clean_spaces = false;
  bool nfc = false;

  std::vector<int32_t> specials;  // control / user-defined / unknown, longest first
  std::unordered_set<int32_t> eog;
  std::vector<std::string> piece;  // token_to_piece(id, special = true)

  int32_t find(std::string_view s) const {
    auto it = text_to_id.find(std::string(s));
    return it == text_to_id.end() ? -1 : it->second;
  }
  bool valid(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(text.size()); }

  // Tokenizes one run of plain text (no special tokens) and appends the ids.
  void spm_tokenize(const std::string& text, std::vector<int32_t>& out) const;
  void bpe_tokenize(std::string_view text, std::vector<int32_t>& out) const;
};

}  // namespace sustain::tokenizer

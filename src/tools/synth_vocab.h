// Synthetic tokenizer vocabularies for `sustain synth`.
//
// A random-weight model still needs a tokenizer that llama.cpp (and sustain)
// can load and use, with the real vocabulary size and the real special tokens
// at their real ids. Real vocabularies cannot be shipped, so this generates one
// deterministically: a GPT-2 style byte-level BPE ("gpt2") or a SentencePiece
// vocabulary with byte fallback ("llama"), made of common English words, code
// fragments, digit groups and whitespace runs, then filled breadth-first with
// letter extensions until the requested size is reached.
//
// Guarantees (checked by tests/tools/test_synth_vocab.cc):
//  - token strings are unique; ids of specials are exactly as given;
//  - gpt2: ids are the 256 byte tokens (GPT-2's byte-to-unicode order) first,
//    then merged tokens in merge order; every merge "A B" has A, B and A+B in
//    the vocabulary, A+B is created by that merge alone and has a larger id
//    than A and B; each built-in word encodes to a single token;
//  - llama: <unk>/<s>/</s> (unless the spec names those ids), the 256
//    "<0xXX>" byte tokens, single characters, then pieces each made of two
//    pieces with smaller ids and a score below both (higher = merged earlier).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"

namespace sustain::tools {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
inline constexpr int32_t kTokenNormal = 1;
inline constexpr int32_t kTokenUnknown = 2;
inline constexpr int32_t kTokenControl = 3;
inline constexpr int32_t kTokenUserDefined = 4;
inline constexpr int32_t kTokenUnused = 5;
inline constexpr int32_t kTokenByte = 6;

struct SpecialToken {
  uint32_t id = 0;
  std::string text;
  bool control = true;  // control → token_type 3, else user-defined 4
};

struct SynthVocabSpec {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece with byte fallback)
  std::string pre;    // tokenizer.ggml.pre, e.g. "llama-bpe", "qwen2", "smollm"; required for gpt2
  uint32_t n_vocab = 0;                // total tokens, including specials and padding
  std::vector<SpecialToken> specials;  // at their real ids (e.g. Llama 3: 128000..128255)
  uint32_t bos_id = 0, eos_id = 0;
  std::optional<uint32_t> eot_id, pad_id, unk_id;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;  // written as tokenizer.chat_template when non-empty
};

// Which ids become what. Ids without a special are regular tokens, except the
// ids above the highest special when regular tokens also sit below the lowest
// one: those are padding (Qwen's 151665..151935, the embedding matrix rounded
// up), written "[PAD<id>]" with type 5 (unused) as convert_hf_to_gguf.py does.
// For "llama", ids bos_id, eos_id and unk_id (default 0) that no special names
// become "<s>", "</s>" and "<unk>"; the unk id always has type 2 (unknown).
struct SynthVocab {
  std::vector<std::string> tokens;   // n_vocab entries
  std::vector<int32_t> token_types;  // n_vocab entries, kToken*
  std::vector<float> scores;         // llama only: n_vocab entries
  std::vector<std::string> merges;   // gpt2 only: "A B", in rank order
};

// Builds the vocabulary (deterministic; about 0.5 s for 152k tokens). Fails
// with kInvalidArgument on a bad spec: unknown model, ids out of range,
// duplicate ids or texts, a special whose text is a byte token, or too few
// regular ids for the byte tokens.
Expected<SynthVocab> build_synth_vocab(const SynthVocabSpec& spec);

// Builds the vocabulary and sets tokenizer.ggml.{model, pre, tokens,
// token_type, scores (llama) | merges (gpt2), bos/eos/eot/padding/unknown
// token ids, add_bos_token, add_eos_token} and tokenizer.chat_template.
Status write_synth_vocab(gguf::Writer& w, const SynthVocabSpec& spec);

}  // namespace sustain::tools

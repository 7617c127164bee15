// Tokenizer built from a GGUF file's `tokenizer.*` metadata: SentencePiece
// ("llama": score-ordered merges with byte fallback) and byte-level BPE
// ("gpt2": ranked merges after a pre-tokenizer chosen by tokenizer.ggml.pre).
// An unknown model or pre-tokenizer is an error, never a silent fallback.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sustain::gguf {
class File;
}

namespace sustain::tokenizer {

class Tokenizer {
 public:
  static Expected<Tokenizer> from_gguf(const gguf::File& f);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Text -> ids. add_special: BOS/EOS as the vocabulary says (add_bos_token /
  // add_eos_token). parse_special: text of control / user-defined tokens
  // becomes those tokens; otherwise it is tokenized as plain text. Invalid
  // UTF-8 is an error naming the byte offset.
  Expected<std::vector<int32_t>> encode(std::string_view text, bool add_special,
                                        bool parse_special) const;

  // The bytes a token stands for (byte tokens decoded, '▁' -> ' ' for SPM,
  // GPT-2 byte-unicode decoded for BPE). Control tokens give their text when
  // `special` is true, "" otherwise.
  std::string token_to_piece(int32_t id, bool special = true) const;
  std::string decode(const std::vector<int32_t>& ids, bool special = true) const;

  int32_t n_vocab() const;
  int32_t bos() const;  // -1 if none
  int32_t eos() const;
  int32_t eot() const;            // -1 if none
  bool is_eog(int32_t id) const;  // end of generation: eos, eot and similar
  bool add_bos() const;
  const std::string& model() const;  // "llama" or "gpt2"
  const std::string& pre() const;

  // The vocabulary; opaque outside the tokenizer's own sources (vocab.h).
  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streams detokenized text without ever splitting a UTF-8 character: bytes of
// an incomplete character are held back until the next token completes it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool special = false) : t_(&t), special_(special) {}
  // Returns the complete UTF-8 text that token `id` finishes (may be empty).
  std::string push(int32_t id);
  // Whatever is left at the end (an incomplete sequence becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer* t_;
  bool special_;
  std::string pending_;
};

}  // namespace sustain::tokenizer

// Lexer for the chat-template subset of Jinja2: splits the source into text,
// tag delimiters and expression tokens, applying the whitespace control of
// the environment Hugging Face renders with (see parser.cc).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sustain::chat::jinja {

enum class Tok : uint8_t {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  Tok type;
  size_t pos;  // byte offset in the normalized source
  std::string text;
  int64_t ival = 0;
  double fval = 0;
};

// A token type's name in error messages.
const char* tok_name(Tok t);

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::string where(size_t pos) const;
  std::pair<int, int> line_col(size_t pos) const;

  Status run(std::vector<Token>& out);

 private:
  size_t find_tag(size_t from) const;

  // lstrip_blocks: only spaces and tabs between the line start and the tag.
  static void lstrip_line(std::string& text, bool line_starting);

  // Position after a tag end at `p`: `-` eats all following whitespace,
  // trim_blocks one newline.
  size_t after_tag_end(size_t p, bool strip, bool trim_newline) const;

  bool word_at(size_t p, const char* w) const;

  bool is_raw(size_t body) const;

  // {% raw %}...{% endraw %}: the text in between is emitted verbatim.
  Status lex_raw(size_t tag, size_t body, std::vector<Token>& out, size_t& pos);

  Status lex_tag(bool var, size_t p, std::vector<Token>& out, size_t& pos);

  Status lex_number(size_t& p, std::vector<Token>& out);

  // Python string-literal escapes (Jinja decodes literals with unicode-escape).
  Status lex_string(size_t& p, std::vector<Token>& out);

  std::string src_;
  std::vector<size_t> line_starts_;
};

}  // namespace sustain::chat::jinja

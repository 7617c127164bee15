// Lexer and parser for the chat-template subset of Jinja2.
//
// Whitespace follows the environment Hugging Face transformers (and so the
// published templates) render with: trim_blocks (the first newline after a
// block or comment tag is dropped), lstrip_blocks (spaces and tabs before a
// block or comment tag on its own line are dropped), `-` strips all
// whitespace on that side of a tag, `+` turns the trimming off, line endings
// become "\n" and one trailing newline of the template is dropped
// (keep_trailing_newline=False). The operator precedence is Jinja2's:
// filters and tests bind tighter than arithmetic, arithmetic tighter than
// comparisons, then not / and / or / `x if c else y`.
#include <algorithm>
#include <cstring>
#include <string>

#include "chat/lexer.h"

namespace sustain::chat::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_cp(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::kText:
      return "text";
    case Tok::kVarBegin:
      return "'{{'";
    case Tok::kVarEnd:
      return "'}}'";
    case Tok::kBlockBegin:
      return "'{%'";
    case Tok::kBlockEnd:
      return "'%}'";
    case Tok::kName:
      return "name";
    case Tok::kString:
      return "string";
    case Tok::kInt:
      return "integer";
    case Tok::kFloat:
      return "float";
    case Tok::kOp:
      return "operator";
    case Tok::kEof:
      return "end of template";
  }
  return "?";
}

std::string Lexer::where(size_t pos) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  size_t line = static_cast<size_t>(it - line_starts_.begin());
  size_t col = pos - line_starts_[line - 1] + 1;
  return fmt::format("line {}, column {}", line, col);
}

std::pair<int, int> Lexer::line_col(size_t pos) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  size_t line = static_cast<size_t>(it - line_starts_.begin());
  return {static_cast<int>(line), static_cast<int>(pos - line_starts_[line - 1] + 1)};
}

Status Lexer::run(std::vector<Token>& out) {
  size_t pos = 0;
  bool line_starting = true;
  const size_t n = src_.size();
  while (pos < n) {
    size_t tag = find_tag(pos);
    std::string text = src_.substr(pos, (tag == std::string::npos ? n : tag) - pos);
    if (tag == std::string::npos) {
      if (!text.empty()) out.push_back({Tok::kText, pos, std::move(text)});
      break;
    }
    char kind = src_[tag + 1];
    char mod = tag + 2 < n ? src_[tag + 2] : '\0';
    if (mod == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && mod != '+') {
      lstrip_line(text, line_starting);
    }
    if (!text.empty()) out.push_back({Tok::kText, pos, std::move(text)});
    size_t body = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
    if (kind == '#') {
      size_t end = src_.find("#}", body);
      if (end == std::string::npos)
        return error(Code::kInvalidArgument, "{}: unclosed comment '{{#'", where(tag));
      bool strip = end > body && src_[end - 1] == '-';
      bool keep = end > body && src_[end - 1] == '+';
      pos = after_tag_end(end + 2, strip, !keep);
    } else if (kind == '%' && is_raw(body)) {
      SUSTAIN_TRY(lex_raw(tag, body, out, pos));
    } else {
      out.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, tag, {}});
      SUSTAIN_TRY(lex_tag(kind == '{', body, out, pos));
    }
    line_starting = pos > 0 && src_[pos - 1] == '\n';
  }
  out.push_back({Tok::kEof, n, {}});
  return Status::ok();
}

size_t Lexer::find_tag(size_t from) const {
  for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
    if (p + 1 < src_.size()) {
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
    }
  }
  return std::string::npos;
}

// lstrip_blocks: only spaces and tabs between the line start and the tag.
void Lexer::lstrip_line(std::string& text, bool line_starting) {
  size_t nl = text.rfind('\n');
  size_t start = nl == std::string::npos ? 0 : nl + 1;
  if (nl == std::string::npos && !line_starting) return;
  for (size_t i = start; i < text.size(); ++i)
    if (text[i] != ' ' && text[i] != '\t') return;
  text.resize(start);
}

// Position after a tag end at `p`: `-` eats all following whitespace,
// trim_blocks one newline.
size_t Lexer::after_tag_end(size_t p, bool strip, bool trim_newline) const {
  if (strip) {
    while (p < src_.size() && is_space(src_[p])) ++p;
  } else if (trim_newline && p < src_.size() && src_[p] == '\n') {
    ++p;
  }
  return p;
}

bool Lexer::word_at(size_t p, const char* w) const {
  size_t len = std::strlen(w);
  if (src_.compare(p, len, w) != 0) return false;
  return p + len >= src_.size() || !(is_ident_start(src_[p + len]) || is_digit(src_[p + len]));
}

bool Lexer::is_raw(size_t body) const {
  size_t p = body;
  while (p < src_.size() && is_space(src_[p])) ++p;
  return word_at(p, "raw");
}

// {% raw %}...{% endraw %}: the text in between is emitted verbatim.
Status Lexer::lex_raw(size_t tag, size_t body, std::vector<Token>& out, size_t& pos) {
  size_t p = body;
  while (is_space(src_[p])) ++p;
  p += 3;
  while (p < src_.size() && is_space(src_[p])) ++p;
  bool strip = false;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) strip = src_[p++] == '-';
  if (src_.compare(p, 2, "%}") != 0)
    return error(Code::kInvalidArgument, "{}: expected '%}}' after 'raw'", where(p));
  size_t start = after_tag_end(p + 2, strip, true);
  for (size_t q = src_.find("{%", start); q != std::string::npos; q = src_.find("{%", q + 1)) {
    size_t r = q + 2;
    bool lstrip = r < src_.size() && src_[r] == '-';
    if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ++r;
    while (r < src_.size() && is_space(src_[r])) ++r;
    if (!word_at(r, "endraw")) continue;
    r += 6;
    while (r < src_.size() && is_space(src_[r])) ++r;
    bool rstrip = false;
    if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) rstrip = src_[r++] == '-';
    if (src_.compare(r, 2, "%}") != 0) continue;
    std::string text = src_.substr(start, q - start);
    if (lstrip)
      while (!text.empty() && is_space(text.back())) text.pop_back();
    if (!text.empty()) out.push_back({Tok::kText, start, std::move(text)});
    pos = after_tag_end(r + 2, rstrip, true);
    return Status::ok();
  }
  return error(Code::kInvalidArgument, "{}: unclosed '{{% raw %}}' (no '{{% endraw %}}')",
               where(tag));
}

Status Lexer::lex_tag(bool var, size_t p, std::vector<Token>& out, size_t& pos) {
  const size_t n = src_.size();
  const size_t tag_start = out.back().pos;
  // Open brackets: inside them `}}` and `%}` do not end the tag (Jinja's
  // lexer balances them the same way), so `{{ {'a': {'b': 1}} }}` works.
  std::vector<std::pair<char, size_t>> open;
  while (true) {
    while (p < n && is_space(src_[p])) ++p;
    if (p >= n) {
      if (!open.empty())
        return error(Code::kInvalidArgument, "{}: '{}' is never closed", where(open.back().second),
                     src_[open.back().second]);
      return error(Code::kInvalidArgument, "{}: unclosed '{}' (no '{}' before the end)",
                   where(tag_start), var ? "{{" : "{%", var ? "}}" : "%}");
    }
    if (open.empty()) {
      const char* end = var ? "}}" : "%}";
      bool strip = src_[p] == '-' && src_.compare(p + 1, 2, end) == 0;
      bool keep = !var && src_[p] == '+' && src_.compare(p + 1, 2, end) == 0;
      if (strip || keep || src_.compare(p, 2, end) == 0) {
        out.push_back({var ? Tok::kVarEnd : Tok::kBlockEnd, p, {}});
        size_t after = p + 2 + ((strip || keep) ? 1 : 0);
        pos = after_tag_end(after, strip, !var && !keep);
        return Status::ok();
      }
    }
    char c = src_[p];
    if (is_ident_start(c)) {
      size_t b = p;
      while (p < n && (is_ident_start(src_[p]) || is_digit(src_[p]))) ++p;
      out.push_back({Tok::kName, b, src_.substr(b, p - b)});
    } else if (is_digit(c)) {
      SUSTAIN_TRY(lex_number(p, out));
    } else if (c == '\'' || c == '"') {
      SUSTAIN_TRY(lex_string(p, out));
    } else {
      static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                   "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                   "]",  "{",  "}",  ",",  ".",  ":",  "|"};
      const char* found = nullptr;
      for (const char* op : kOps)
        if (src_.compare(p, std::strlen(op), op) == 0) {
          found = op;
          break;
        }
      if (!found)
        return error(Code::kInvalidArgument, "{}: unexpected character '{}' in a tag", where(p), c);
      if (found[1] == '\0') {
        if (c == '(') open.emplace_back(')', p);
        if (c == '[') open.emplace_back(']', p);
        if (c == '{') open.emplace_back('}', p);
        if (c == ')' || c == ']' || c == '}') {
          if (open.empty()) return error(Code::kInvalidArgument, "{}: unmatched '{}'", where(p), c);
          if (open.back().first != c)
            return error(Code::kInvalidArgument, "{}: expected '{}' before '{}'", where(p),
                         open.back().first, c);
          open.pop_back();
        }
      }
      out.push_back({Tok::kOp, p, found});
      p += std::strlen(found);
    }
  }
}

Status Lexer::lex_number(size_t& p, std::vector<Token>& out) {
  const size_t n = src_.size(), b = p;
  std::string digits;
  auto take_digits = [&] {
    while (p < n && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < n && is_digit(src_[p + 1]))))
      if (src_[p++] != '_') digits += src_[p - 1];
  };
  take_digits();
  bool is_float = false;
  if (p + 1 < n && src_[p] == '.' && is_digit(src_[p + 1])) {
    is_float = true;
    digits += src_[p++];
    take_digits();
  }
  if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
    size_t q = p + 1;
    if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < n && is_digit(src_[q])) {
      is_float = true;
      digits += 'e';
      digits.append(src_, p + 1, q - p - 1);
      p = q;
      take_digits();
    }
  }
  Token t{is_float ? Tok::kFloat : Tok::kInt, b, src_.substr(b, p - b)};
  if (is_float) {
    t.fval = std::strtod(digits.c_str(), nullptr);
  } else {
    if (digits.size() > 18)
      return error(Code::kInvalidArgument, "{}: integer literal {} is too large", where(b), digits);
    t.ival = std::stoll(digits);
  }
  out.push_back(std::move(t));
  return Status::ok();
}

// Python string-literal escapes (Jinja decodes literals with unicode-escape).
Status Lexer::lex_string(size_t& p, std::vector<Token>& out) {
  const size_t n = src_.size(), b = p;
  char q = src_[p++];
  std::string v;
  while (true) {
    if (p >= n) return error(Code::kInvalidArgument, "{}: unterminated string literal", where(b));
    char c = src_[p++];
    if (c == q) break;
    if (c != '\\') {
      v += c;
      continue;
    }
    if (p >= n) return error(Code::kInvalidArgument, "{}: unterminated string literal", where(b));
    char e = src_[p++];
    switch (e) {
      case 'n':
        v += '\n';
        break;
      case 't':
        v += '\t';
        break;
      case 'r':
        v += '\r';
        break;
      case '\\':
        v += '\\';
        break;
      case '\'':
        v += '\'';
        break;
      case '"':
        v += '"';
        break;
      case 'a':
        v += '\a';
        break;
      case 'b':
        v += '\b';
        break;
      case 'f':
        v += '\f';
        break;
      case 'v':
        v += '\v';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int k = 0; k < len; ++k) {
          int h = p < n ? hex_val(src_[p]) : -1;
          if (h < 0)
            return error(Code::kInvalidArgument, "{}: truncated \\{} escape in a string literal",
                         where(p), e);
          cp = cp * 16 + static_cast<uint32_t>(h);
          ++p;
        }
        if (cp > 0x10FFFF)
          return error(Code::kInvalidArgument, "{}: escape \\U{:08x} is not a code point", where(p),
                       cp);
        append_cp(cp, v);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && p < n && src_[p] >= '0' && src_[p] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
          append_cp(cp, v);
        } else {
          v += '\\';
          v += e;
        }
    }
  }
  Token t{Tok::kString, b, std::move(v)};
  out.push_back(std::move(t));
  return Status::ok();
}

}  // namespace sustain::chat::jinja

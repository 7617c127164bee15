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

#include "tokenizer/chat_template_internal.h"

namespace sustain::tokenizer::jinja {
namespace {

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

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::string where(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t col = pos - line_starts_[line - 1] + 1;
    return fmt::format("line {}, column {}", line, col);
  }
  std::pair<int, int> line_col(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(pos - line_starts_[line - 1] + 1)};
  }

  Status run(std::vector<Token>& out) {
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

 private:
  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size()) {
        char c = src_[p + 1];
        if (c == '{' || c == '%' || c == '#') return p;
      }
    }
    return std::string::npos;
  }

  // lstrip_blocks: only spaces and tabs between the line start and the tag.
  static void lstrip_line(std::string& text, bool line_starting) {
    size_t nl = text.rfind('\n');
    size_t start = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !line_starting) return;
    for (size_t i = start; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.resize(start);
  }

  // Position after a tag end at `p`: `-` eats all following whitespace,
  // trim_blocks one newline.
  size_t after_tag_end(size_t p, bool strip, bool trim_newline) const {
    if (strip) {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (trim_newline && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  bool word_at(size_t p, const char* w) const {
    size_t len = std::strlen(w);
    if (src_.compare(p, len, w) != 0) return false;
    return p + len >= src_.size() || !(is_ident_start(src_[p + len]) || is_digit(src_[p + len]));
  }

  bool is_raw(size_t body) const {
    size_t p = body;
    while (p < src_.size() && is_space(src_[p])) ++p;
    return word_at(p, "raw");
  }

  // {% raw %}...{% endraw %}: the text in between is emitted verbatim.
  Status lex_raw(size_t tag, size_t body, std::vector<Token>& out, size_t& pos) {
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

  Status lex_tag(bool var, size_t p, std::vector<Token>& out, size_t& pos) {
    const size_t n = src_.size();
    const size_t tag_start = out.back().pos;
    // Open brackets: inside them `}}` and `%}` do not end the tag (Jinja's
    // lexer balances them the same way), so `{{ {'a': {'b': 1}} }}` works.
    std::vector<std::pair<char, size_t>> open;
    while (true) {
      while (p < n && is_space(src_[p])) ++p;
      if (p >= n) {
        if (!open.empty())
          return error(Code::kInvalidArgument, "{}: '{}' is never closed",
                       where(open.back().second), src_[open.back().second]);
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
          return error(Code::kInvalidArgument, "{}: unexpected character '{}' in a tag", where(p),
                       c);
        if (found[1] == '\0') {
          if (c == '(') open.emplace_back(')', p);
          if (c == '[') open.emplace_back(']', p);
          if (c == '{') open.emplace_back('}', p);
          if (c == ')' || c == ']' || c == '}') {
            if (open.empty())
              return error(Code::kInvalidArgument, "{}: unmatched '{}'", where(p), c);
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

  Status lex_number(size_t& p, std::vector<Token>& out) {
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
        return error(Code::kInvalidArgument, "{}: integer literal {} is too large", where(b),
                     digits);
      t.ival = std::stoll(digits);
    }
    out.push_back(std::move(t));
    return Status::ok();
  }

  // Python string-literal escapes (Jinja decodes literals with unicode-escape).
  Status lex_string(size_t& p, std::vector<Token>& out) {
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
            return error(Code::kInvalidArgument, "{}: escape \\U{:08x} is not a code point",
                         where(p), cp);
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

  std::string src_;
  std::vector<size_t> line_starts_;
};

class Parser {
 public:
  Parser(const Lexer& lex, std::vector<Token> toks, const ChatTemplateLimits& limits)
      : lex_(lex), toks_(std::move(toks)), limits_(limits) {}

  Expected<Body> parse_all() {
    std::string stop;
    return parse_body({}, "", 0, stop);
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(i_ + ahead, toks_.size() - 1)];
  }
  const Token& next() {
    const Token& t = toks_[std::min(i_, toks_.size() - 1)];
    if (i_ < toks_.size() - 1) ++i_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.type == Tok::kOp && t.text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.type == Tok::kName && t.text == name;
  }
  Status fail(const Token& t, const std::string& what) const {
    return error(Code::kInvalidArgument, "{}: {}", lex_.where(t.pos), what);
  }
  std::string describe(const Token& t) const {
    if (t.type == Tok::kName || t.type == Tok::kOp) return fmt::format("'{}'", t.text);
    return tok_name(t.type);
  }
  Status expect_op(const char* op) {
    if (!is_op(op))
      return fail(peek(), fmt::format("expected '{}', found {}", op, describe(peek())));
    next();
    return Status::ok();
  }
  Status expect_block_end(const char* tag) {
    if (peek().type != Tok::kBlockEnd)
      return fail(peek(),
                  fmt::format("expected '%}}' to close '{}', found {}", tag, describe(peek())));
    next();
    return Status::ok();
  }
  Expected<std::string> expect_name(const char* what) {
    if (peek().type != Tok::kName)
      return fail(peek(), fmt::format("expected {}, found {}", what, describe(peek())));
    return next().text;
  }

  NodePtr node(NodeType type, const Token& at) {
    auto n = std::make_unique<Node>();
    n->type = type;
    auto [line, col] = lex_.line_col(at.pos);
    n->line = line;
    n->col = col;
    return n;
  }

  // Every expression node passes through here: the tree depth bounds the
  // evaluator's recursion and the destructor's.
  Expected<NodePtr> seal(NodePtr n) {
    int d = 0;
    for (auto& k : n->kids)
      if (k) d = std::max(d, k->depth);
    for (auto& kw : n->kwargs) d = std::max(d, kw.second->depth);
    n->depth = d + 1;
    if (n->depth > limits_.max_depth)
      return error(Code::kInvalidArgument,
                   "line {}, column {}: expression nested deeper than the limit of {}", n->line,
                   n->col, limits_.max_depth);
    return n;
  }

  // Parses statements until one of `stops` ({% endfor %} ...) or the end.
  Expected<Body> parse_body(std::initializer_list<const char*> stops, const char* opener,
                            size_t opener_pos, std::string& stop_found) {
    if (++block_depth_ > limits_.max_depth)
      return error(Code::kInvalidArgument, "{}: blocks nested deeper than the limit of {}",
                   lex_.where(opener_pos), limits_.max_depth);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Tok::kEof) {
        if (stops.size() != 0)
          return error(Code::kInvalidArgument, "{}: unclosed '{{% {} %}}' (expected '{{% {} %}}')",
                       lex_.where(opener_pos), opener, *stops.begin());
        break;
      }
      if (t.type == Tok::kText) {
        auto n = node(NodeType::kText, t);
        n->name = next().text;
        body.push_back(std::move(n));
      } else if (t.type == Tok::kVarBegin) {
        auto n = node(NodeType::kOutput, next());
        SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_expression());
        n->kids.push_back(std::move(e));
        if (peek().type != Tok::kVarEnd)
          return fail(peek(), fmt::format("expected '}}}}', found {}", describe(peek())));
        next();
        body.push_back(std::move(n));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& kw = peek(1);
        if (kw.type != Tok::kName) return fail(kw, "expected a tag name after '{%'");
        for (const char* s : stops)
          if (kw.text == s) {
            next();
            next();
            stop_found = s;
            --block_depth_;
            return body;
          }
        SUSTAIN_ASSIGN_OR_RETURN(auto st, parse_statement());
        if (st) body.push_back(std::move(st));
      } else {
        return fail(t, fmt::format("unexpected {}", describe(t)));
      }
    }
    --block_depth_;
    return body;
  }

  Expected<NodePtr> parse_statement() {
    const Token& begin = next();
    const Token& kw = next();
    const std::string k = kw.text;
    if (k == "if") return parse_if(begin);
    if (k == "for") return parse_for(begin);
    if (k == "set") return parse_set(begin);
    if (k == "macro") return parse_macro(begin);
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) return fail(kw, fmt::format("'{}' outside a for loop", k));
      auto n = node(k == "break" ? NodeType::kBreak : NodeType::kContinue, begin);
      SUSTAIN_TRY(expect_block_end(k.c_str()));
      return n;
    }
    if (k == "generation") {
      auto n = node(NodeType::kScope, begin);
      SUSTAIN_TRY(expect_block_end("generation"));
      std::string stop;
      SUSTAIN_ASSIGN_OR_RETURN(auto b,
                               parse_body({"endgeneration"}, "generation", begin.pos, stop));
      SUSTAIN_TRY(expect_block_end("endgeneration"));
      n->bodies.push_back(std::move(b));
      return n;
    }
    static const char* kEnds[] = {"endif", "endfor", "endmacro", "endset",
                                  "else",  "elif",   "endraw",   "endgeneration"};
    for (const char* e : kEnds)
      if (k == e) return fail(kw, fmt::format("unexpected '{{% {} %}}' with no open block", k));
    return fail(kw, fmt::format("unsupported tag '{}'", k));
  }

  Expected<NodePtr> parse_if(const Token& begin) {
    auto n = node(NodeType::kIf, begin);
    std::string stop = "elif";
    while (stop == "elif") {
      SUSTAIN_ASSIGN_OR_RETURN(auto cond, parse_expression());
      SUSTAIN_TRY(expect_block_end("if"));
      n->kids.push_back(std::move(cond));
      SUSTAIN_ASSIGN_OR_RETURN(auto b,
                               parse_body({"endif", "elif", "else"}, "if", begin.pos, stop));
      n->bodies.push_back(std::move(b));
    }
    if (stop == "else") {
      SUSTAIN_TRY(expect_block_end("else"));
      SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endif"}, "if", begin.pos, stop));
      n->bodies.push_back(std::move(b));
    }
    SUSTAIN_TRY(expect_block_end("endif"));
    return n;
  }

  Expected<NodePtr> parse_for(const Token& begin) {
    auto n = node(NodeType::kFor, begin);
    do {
      SUSTAIN_ASSIGN_OR_RETURN(auto name, expect_name("a loop variable"));
      n->names.push_back(name);
    } while (is_op(",") && next().type == Tok::kOp);
    if (!is_name("in"))
      return fail(peek(), fmt::format("expected 'in', found {}", describe(peek())));
    next();
    SUSTAIN_ASSIGN_OR_RETURN(auto iter, parse_expression(false));
    n->kids.push_back(std::move(iter));
    NodePtr filter;
    if (is_name("if")) {
      next();
      SUSTAIN_ASSIGN_OR_RETURN(filter, parse_expression());
    }
    n->kids.push_back(std::move(filter));
    if (is_name("recursive")) return fail(peek(), "recursive for loops are not supported");
    SUSTAIN_TRY(expect_block_end("for"));
    ++loop_depth_;
    std::string stop;
    const int refs_before = loop_refs_;
    SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endfor", "else"}, "for", begin.pos, stop));
    n->flag = loop_refs_ != refs_before;  // the body reads `loop` (or a nested loop's)
    --loop_depth_;
    n->bodies.push_back(std::move(b));
    if (stop == "else") {
      SUSTAIN_TRY(expect_block_end("else"));
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_body({"endfor"}, "for", begin.pos, stop));
      n->bodies.push_back(std::move(e));
    }
    SUSTAIN_TRY(expect_block_end("endfor"));
    return n;
  }

  Expected<NodePtr> parse_set(const Token& begin) {
    auto n = node(NodeType::kSet, begin);
    SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a variable name"));
    if (is_op(".")) {
      next();
      SUSTAIN_ASSIGN_OR_RETURN(n->name2, expect_name("an attribute name"));
    } else if (is_op(",")) {
      n->names.push_back(n->name);
      while (is_op(",")) {
        next();
        SUSTAIN_ASSIGN_OR_RETURN(auto name, expect_name("a variable name"));
        n->names.push_back(name);
      }
    }
    if (!is_op("=")) {
      if (!n->name2.empty() || !n->names.empty() || peek().type != Tok::kBlockEnd)
        return fail(peek(), fmt::format("expected '=' in 'set', found {}", describe(peek())));
      next();
      n->type = NodeType::kSetBlock;
      std::string stop;
      SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endset"}, "set", begin.pos, stop));
      SUSTAIN_TRY(expect_block_end("endset"));
      n->bodies.push_back(std::move(b));
      return n;
    }
    next();
    SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_tuple_or_expression());
    n->kids.push_back(std::move(v));
    SUSTAIN_TRY(expect_block_end("set"));
    return n;
  }

  Expected<NodePtr> parse_macro(const Token& begin) {
    auto n = node(NodeType::kMacro, begin);
    SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a macro name"));
    SUSTAIN_TRY(expect_op("("));
    while (!is_op(")")) {
      SUSTAIN_ASSIGN_OR_RETURN(auto p, expect_name("a parameter name"));
      n->names.push_back(p);
      NodePtr def;
      if (is_op("=")) {
        next();
        SUSTAIN_ASSIGN_OR_RETURN(def, parse_expression());
      }
      n->kids.push_back(std::move(def));
      if (!is_op(",")) break;
      next();
    }
    SUSTAIN_TRY(expect_op(")"));
    SUSTAIN_TRY(expect_block_end("macro"));
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string stop;
    SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endmacro"}, "macro", begin.pos, stop));
    loop_depth_ = saved_loops;
    if (peek().type == Tok::kName && peek().text == n->name) next();
    SUSTAIN_TRY(expect_block_end("endmacro"));
    n->bodies.push_back(std::move(b));
    return n;
  }

  // `a, b` (a tuple, here a list) where Jinja allows one: `set x = a, b`.
  Expected<NodePtr> parse_tuple_or_expression() {
    const Token& at = peek();
    SUSTAIN_ASSIGN_OR_RETURN(auto first, parse_expression());
    if (!is_op(",")) return first;
    auto n = node(NodeType::kListLit, at);
    n->flag = true;
    n->kids.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().type == Tok::kBlockEnd) break;
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_expression());
      n->kids.push_back(std::move(e));
    }
    return seal(std::move(n));
  }

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(depth) { ++d; }
    ~DepthGuard() { --d; }
  };

  Expected<NodePtr> parse_expression(bool with_condexpr = true) {
    DepthGuard g(expr_depth_);
    if (expr_depth_ > limits_.max_depth)
      return fail(peek(),
                  fmt::format("expression nested deeper than the limit of {}", limits_.max_depth));
    if (!with_condexpr) return parse_or();
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_or());
    while (is_name("if")) {
      auto n = node(NodeType::kCondExpr, next());
      SUSTAIN_ASSIGN_OR_RETURN(auto cond, parse_or());
      NodePtr other;
      if (is_name("else")) {
        next();
        SUSTAIN_ASSIGN_OR_RETURN(other, parse_expression());
      }
      n->kids.push_back(std::move(e));
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(other));
      SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
    }
    return e;
  }

  Expected<NodePtr> binary(NodePtr a, const Token& op, NodePtr b) {
    auto n = node(NodeType::kBinary, op);
    n->name = op.text;
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return seal(std::move(n));
  }

  Expected<NodePtr> parse_or() {
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_and());
    while (is_name("or")) {
      const Token& op = next();
      SUSTAIN_ASSIGN_OR_RETURN(auto r, parse_and());
      SUSTAIN_ASSIGN_OR_RETURN(e, binary(std::move(e), op, std::move(r)));
    }
    return e;
  }
  Expected<NodePtr> parse_and() {
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_not());
    while (is_name("and")) {
      const Token& op = next();
      SUSTAIN_ASSIGN_OR_RETURN(auto r, parse_not());
      SUSTAIN_ASSIGN_OR_RETURN(e, binary(std::move(e), op, std::move(r)));
    }
    return e;
  }
  Expected<NodePtr> parse_not() {
    if (is_name("not")) {
      DepthGuard g(expr_depth_);
      if (expr_depth_ > limits_.max_depth)
        return fail(peek(), fmt::format("expression nested deeper than the limit of {}",
                                        limits_.max_depth));
      auto n = node(NodeType::kUnary, next());
      n->name = "not";
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_not());
      n->kids.push_back(std::move(e));
      return seal(std::move(n));
    }
    return parse_compare();
  }
  Expected<NodePtr> parse_compare() {
    const Token& at = peek();
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_math1());
    NodePtr cmp;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.type == Tok::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                 t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(NodeType::kCompare, at);
        cmp->kids.push_back(std::move(e));
      }
      SUSTAIN_ASSIGN_OR_RETURN(auto r, parse_math1());
      cmp->kids.push_back(std::move(r));
      cmp->names.push_back(op);
    }
    if (cmp) return seal(std::move(cmp));
    return e;
  }
  template <typename F>
  Expected<NodePtr> left_assoc(F sub, std::initializer_list<const char*> ops) {
    SUSTAIN_ASSIGN_OR_RETURN(auto e, sub());
    while (true) {
      bool found = false;
      for (const char* op : ops)
        if (is_op(op)) found = true;
      if (!found) return e;
      const Token& op = next();
      SUSTAIN_ASSIGN_OR_RETURN(auto r, sub());
      SUSTAIN_ASSIGN_OR_RETURN(e, binary(std::move(e), op, std::move(r)));
    }
  }
  Expected<NodePtr> parse_math1() {
    return left_assoc([this] { return parse_concat(); }, {"+", "-"});
  }
  Expected<NodePtr> parse_concat() {
    return left_assoc([this] { return parse_math2(); }, {"~"});
  }
  Expected<NodePtr> parse_math2() {
    return left_assoc([this] { return parse_pow(); }, {"*", "/", "//", "%"});
  }
  Expected<NodePtr> parse_pow() {
    return left_assoc([this] { return parse_unary(true); }, {"**"});
  }

  Expected<NodePtr> parse_unary(bool with_filter) {
    NodePtr e;
    if (is_op("-") || is_op("+")) {
      DepthGuard g(expr_depth_);
      if (expr_depth_ > limits_.max_depth)
        return fail(peek(), fmt::format("expression nested deeper than the limit of {}",
                                        limits_.max_depth));
      auto n = node(NodeType::kUnary, peek());
      n->name = next().text;
      SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_unary(false));
      n->kids.push_back(std::move(k));
      SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
    } else {
      SUSTAIN_ASSIGN_OR_RETURN(e, parse_primary());
    }
    SUSTAIN_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) return parse_filter_expr(std::move(e));
    return e;
  }

  Expected<NodePtr> parse_primary() {
    const Token& t = peek();
    if (t.type == Tok::kName) {
      next();
      auto n = node(NodeType::kLiteral, t);
      if (t.text == "true" || t.text == "True") {
        n->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        n->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        n->value = Value::none();
      } else {
        n->type = NodeType::kName;
        n->name = t.text;
        if (t.text == "loop") ++loop_refs_;
      }
      return seal(std::move(n));
    }
    if (t.type == Tok::kString) {
      auto n = node(NodeType::kLiteral, t);
      std::string s = next().text;
      while (peek().type == Tok::kString) s += next().text;  // adjacent literals concatenate
      n->value = Value::string(std::move(s));
      return seal(std::move(n));
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto n = node(NodeType::kLiteral, t);
      n->value = t.type == Tok::kInt ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return seal(std::move(n));
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        auto n = node(NodeType::kListLit, t);
        n->flag = true;
        next();
        return seal(std::move(n));
      }
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_expression());
      if (is_op(",")) {
        auto n = node(NodeType::kListLit, t);
        n->flag = true;
        n->kids.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_expression());
          n->kids.push_back(std::move(k));
        }
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      }
      SUSTAIN_TRY(expect_op(")"));
      return e;
    }
    if (is_op("[")) {
      auto n = node(NodeType::kListLit, next());
      while (!is_op("]")) {
        SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_expression());
        n->kids.push_back(std::move(k));
        if (!is_op(",")) break;
        next();
      }
      SUSTAIN_TRY(expect_op("]"));
      return seal(std::move(n));
    }
    if (is_op("{")) {
      auto n = node(NodeType::kDictLit, next());
      while (!is_op("}")) {
        SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_expression());
        SUSTAIN_TRY(expect_op(":"));
        SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_expression());
        n->kids.push_back(std::move(k));
        n->kids.push_back(std::move(v));
        if (!is_op(",")) break;
        next();
      }
      SUSTAIN_TRY(expect_op("}"));
      return seal(std::move(n));
    }
    return fail(t, fmt::format("expected an expression, found {}", describe(t)));
  }

  Expected<NodePtr> parse_postfix(NodePtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& dot = next();
        if (peek().type == Tok::kInt) {
          auto n = node(NodeType::kGetItem, dot);
          auto idx = node(NodeType::kLiteral, peek());
          idx->value = Value::integer(next().ival);
          SUSTAIN_ASSIGN_OR_RETURN(idx, seal(std::move(idx)));
          n->kids.push_back(std::move(e));
          n->kids.push_back(std::move(idx));
          SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
          continue;
        }
        auto n = node(NodeType::kGetAttr, dot);
        SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("an attribute name after '.'"));
        n->kids.push_back(std::move(e));
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      } else if (is_op("[")) {
        SUSTAIN_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
      } else if (is_op("(")) {
        SUSTAIN_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Expected<NodePtr> parse_subscript(NodePtr e) {
    const Token& open = next();
    NodePtr parts[3];
    int part = 0;
    bool slice = false;
    while (true) {
      if (is_op(":")) {
        next();
        slice = true;
        if (++part > 2) return fail(peek(), "a slice has at most three parts");
        continue;
      }
      if (is_op("]")) break;
      if (parts[part]) return fail(peek(), fmt::format("expected ']', found {}", describe(peek())));
      SUSTAIN_ASSIGN_OR_RETURN(parts[part], parse_expression());
    }
    next();
    auto n = node(slice ? NodeType::kSlice : NodeType::kGetItem, open);
    n->kids.push_back(std::move(e));
    if (!slice) {
      if (!parts[0]) return fail(open, "empty subscript '[]'");
      n->kids.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) n->kids.push_back(std::move(p));
    }
    return seal(std::move(n));
  }

  // Arguments `(a, b, k=v)` appended to n->kids / n->kwargs.
  Status parse_args(Node& n) {
    SUSTAIN_TRY(expect_op("("));
    while (!is_op(")")) {
      if (is_op("*") || is_op("**"))
        return fail(peek(), "'*' and '**' arguments are not supported");
      if (peek().type == Tok::kName && is_op("=", 1)) {
        std::string k = next().text;
        next();
        SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_expression());
        n.kwargs.emplace_back(k, std::move(v));
      } else {
        if (!n.kwargs.empty()) return fail(peek(), "positional argument after keyword argument");
        SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_expression());
        n.kids.push_back(std::move(v));
      }
      if (!is_op(",")) break;
      next();
    }
    return expect_op(")");
  }

  Expected<NodePtr> parse_call(NodePtr e) {
    auto n = node(NodeType::kCall, peek());
    n->line = e->line;  // errors (raise_exception's too) point at the callee
    n->col = e->col;
    n->kids.push_back(std::move(e));
    SUSTAIN_TRY(parse_args(*n));
    return seal(std::move(n));
  }

  Expected<NodePtr> parse_filter_expr(NodePtr e) {
    while (true) {
      if (is_op("|")) {
        auto n = node(NodeType::kFilter, next());
        SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a filter name after '|'"));
        n->kids.push_back(std::move(e));
        if (is_op("(")) SUSTAIN_TRY(parse_args(*n));
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      } else if (is_name("is")) {
        auto n = node(NodeType::kTest, next());
        if (is_name("not")) {
          next();
          n->flag = true;
        }
        SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a test name after 'is'"));
        n->kids.push_back(std::move(e));
        const Token& t = peek();
        if (is_op("(")) {
          SUSTAIN_TRY(parse_args(*n));
        } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt ||
                    t.type == Tok::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("is") &&
                   !is_name("if") && !is_name("in") && !is_name("not")) {
          SUSTAIN_ASSIGN_OR_RETURN(auto arg, parse_primary());
          SUSTAIN_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
          n->kids.push_back(std::move(arg));
        }
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      } else if (is_op("(")) {
        SUSTAIN_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  const Lexer& lex_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  ChatTemplateLimits limits_;
  int block_depth_ = 0;
  int expr_depth_ = 0;
  int loop_depth_ = 0;
  int loop_refs_ = 0;
};

}  // namespace

Expected<Template> parse_template(std::string_view source, const ChatTemplateLimits& limits) {
  // Newlines normalized to "\n", and one trailing newline dropped, as Jinja does.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lex(src);
  std::vector<Token> toks;
  SUSTAIN_TRY(lex.run(toks));
  Parser p(lex, std::move(toks), limits);
  SUSTAIN_ASSIGN_OR_RETURN(auto body, p.parse_all());
  Template t;
  t.body = std::move(body);
  t.limits = limits;
  return t;
}

}  // namespace sustain::tokenizer::jinja

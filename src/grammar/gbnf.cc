#include "grammar/gbnf.h"

#include <fmt/format.h>

#include "grammar/char_class.h"

namespace sustain::grammar {
namespace {

// Parentheses nest at most this deep: the parser recurses per group, and the
// text is client input.
constexpr int kMaxNesting = 128;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Expected<Grammar> parse(const std::string& root) {
    skip_space(true);
    while (i_ < s_.size()) {
      const size_t at = i_;
      std::string name = parse_name();
      if (name.empty()) return fail(at, "expected a rule name, found {}", found());
      skip_space(false);
      if (s_.substr(i_, 3) != "::=")
        return fail(i_, "expected '::=' after the rule name '{}', found {}", name, found());
      i_ += 3;
      const uint32_t r = b_.rule(name);
      if (b_.defined(r)) return fail(at, "rule '{}' is defined twice", name);
      b_.mark_defined(r);
      SUSTAIN_TRY(parse_alternates(r, false));
      skip_space(true);
    }
    return b_.finish(root);
  }

 private:
  template <typename... Args>
  Status fail(size_t at, fmt::format_string<Args...> f, Args&&... args) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status(Code::kInvalidArgument, fmt::format("grammar: line {}, column {}: {}", line, col,
                                                      fmt::format(f, std::forward<Args>(args)...)));
  }

  std::string found() const {
    if (i_ >= s_.size()) return "the end of the text";
    const char c = s_[i_];
    if (c == '\n') return "the end of the line";
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F)
      return fmt::format("byte 0x{:02X}", static_cast<unsigned char>(c));
    return fmt::format("'{}'", c);
  }

  std::string where(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at; ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return fmt::format("line {}, column {}", line, col);
  }

  void skip_space(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == '\n' && newlines) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  Status parse_alternates(uint32_t rule, bool nested) {
    while (true) {
      GrammarBuilder::Alt alt;
      SUSTAIN_TRY(parse_sequence(alt, nested));
      b_.add_alt(rule, std::move(alt));
      skip_space(nested);
      if (i_ < s_.size() && s_[i_] == '|') {
        ++i_;
        skip_space(true);
        continue;
      }
      if (!nested && i_ < s_.size() && s_[i_] == '\n') {
        // A following line that starts with '|' continues this rule.
        const size_t save = i_;
        skip_space(true);
        if (i_ < s_.size() && s_[i_] == '|') {
          ++i_;
          skip_space(true);
          continue;
        }
        i_ = save;
      }
      if (i_ < s_.size() && s_[i_] != '\n' && !(nested && s_[i_] == ')'))
        return fail(i_, "unexpected {} in a rule (missing '|' or ')'?)", found());
      if (nested && i_ >= s_.size()) return fail(i_, "missing ')' at the end of the text");
      return Status::ok();
    }
  }

  // A code point written in the text (raw UTF-8 or an escape) at i_.
  Status parse_char(uint32_t& out, const char* in) {
    if (i_ >= s_.size()) return fail(i_, "unterminated {}", in);
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      if (i_ + 1 >= s_.size()) return fail(i_, "unterminated {}", in);
      const char e = s_[i_ + 1];
      i_ += 2;
      switch (e) {
        case 'n':
          out = '\n';
          return Status::ok();
        case 'r':
          out = '\r';
          return Status::ok();
        case 't':
          out = '\t';
          return Status::ok();
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          out = static_cast<unsigned char>(e);
          return Status::ok();
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int k = 0; k < n; ++k) {
            const int h = i_ < s_.size() ? hex_value(s_[i_]) : -1;
            if (h < 0) return fail(i_, "'\\{}' needs {} hex digits", e, n);
            v = v * 16 + static_cast<uint32_t>(h);
            ++i_;
          }
          if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
            return fail(i_ - n - 2, "'\\{}' names U+{:X}, which is not a Unicode scalar value", e,
                        v);
          out = v;
          return Status::ok();
        }
        default:
          return fail(i_ - 2, "unknown escape '\\{}' in {}", e, in);
      }
    }
    if (c < 0x80) {
      out = c;
      ++i_;
      return Status::ok();
    }
    // Raw UTF-8: decode one well-formed character.
    const int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (n == 0 || (c >= 0xF5)) return fail(i_, "invalid UTF-8 byte 0x{:02X}", c);
    if (i_ + n > s_.size()) return fail(i_, "truncated UTF-8 character");
    uint32_t v = c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s_[i_ + k]);
      if ((d & 0xC0) != 0x80) return fail(i_, "invalid UTF-8 character");
      v = (v << 6) | (d & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      return fail(i_, "invalid UTF-8 character");
    out = v;
    i_ += n;
    return Status::ok();
  }

  Status parse_literal(GrammarBuilder::Alt& item) {
    const size_t start = i_++;
    std::string bytes;
    while (true) {
      if (i_ >= s_.size() || s_[i_] == '\n') return fail(start, "unterminated string literal");
      if (s_[i_] == '"') {
        ++i_;
        break;
      }
      uint32_t c = 0;
      SUSTAIN_TRY(parse_char(c, "string literal"));
      append_utf8(bytes, c);
    }
    for (char ch : bytes) {
      ByteSet set;
      set.add(static_cast<uint8_t>(ch));
      item.push_back(bytes_sym(b_.bytes(set)));
    }
    return Status::ok();
  }

  Status parse_class(GrammarBuilder::Alt& item) {
    const size_t start = i_++;
    const bool negated = i_ < s_.size() && s_[i_] == '^';
    if (negated) ++i_;
    CodeRanges ranges;
    while (true) {
      if (i_ >= s_.size() || s_[i_] == '\n') return fail(start, "unterminated character class");
      if (s_[i_] == ']') {
        ++i_;
        break;
      }
      uint32_t lo = 0, hi = 0;
      SUSTAIN_TRY(parse_char(lo, "character class"));
      hi = lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        SUSTAIN_TRY(parse_char(hi, "character class"));
        if (hi < lo) return fail(start, "range U+{:X}-U+{:X} is backwards", lo, hi);
      }
      ranges.push_back({lo, hi});
    }
    ranges = normalize(std::move(ranges));
    if (negated) ranges = complement(ranges);
    item.push_back(class_symbol(b_, ranges, "char"));
    return Status::ok();
  }

  Status parse_count(uint32_t& out) {
    const size_t start = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[i_] - '0');
      if (v > kMaxRepetition)
        return fail(start, "repetition count is over the limit of {}", kMaxRepetition);
      ++i_;
    }
    if (i_ == start) return fail(i_, "expected a number in '{{m,n}}', found {}", found());
    out = static_cast<uint32_t>(v);
    return Status::ok();
  }

  // Applies a postfix operator (at i_) to `item`, appending the result.
  Status repeat(GrammarBuilder::Alt item, GrammarBuilder::Alt& out) {
    const size_t at = i_;
    const char op = s_[i_++];
    uint32_t m = 0, n = 0;
    bool unbounded = false;
    if (op == '*') {
      unbounded = true;
    } else if (op == '+') {
      m = 1;
      unbounded = true;
    } else if (op == '?') {
      n = 1;
    } else {  // '{'
      skip_space(false);
      SUSTAIN_TRY(parse_count(m));
      skip_space(false);
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        skip_space(false);
        if (i_ < s_.size() && s_[i_] == '}') {
          unbounded = true;
        } else {
          SUSTAIN_TRY(parse_count(n));
        }
      } else {
        n = m;
      }
      skip_space(false);
      if (i_ >= s_.size() || s_[i_] != '}')
        return fail(i_, "expected '}}' to close '{{m,n}}', found {}", found());
      ++i_;
      if (!unbounded && n < m)
        return fail(at, "in '{{{},{}}}' the maximum is below the minimum", m, n);
    }
    if (item.empty()) return fail(at, "'{}' follows nothing", op);
    Sym x = item[0];
    if (item.size() > 1) {
      const uint32_t r = b_.fresh_rule("seq");
      b_.add_alt(r, std::move(item));
      x = rule_sym(r);
    }
    for (uint32_t k = 0; k < m; ++k) out.push_back(x);
    if (b_.n_symbols() + out.size() > kMaxGrammarSymbols)
      return fail(at, "the repetition makes the grammar larger than {} symbols",
                  kMaxGrammarSymbols);
    if (unbounded) {
      const uint32_t r = b_.fresh_rule("star");
      b_.add_alt(r, {x, rule_sym(r)});
      b_.add_alt(r, {});
      out.push_back(rule_sym(r));
    } else if (n > m) {
      // x{0,k}: opt_k ::= x opt_{k-1} | ε, so at most k copies.
      uint32_t prev = UINT32_MAX;
      for (uint32_t k = 0; k < n - m; ++k) {
        const uint32_t r = b_.fresh_rule("opt");
        GrammarBuilder::Alt a{x};
        if (prev != UINT32_MAX) a.push_back(rule_sym(prev));
        b_.add_alt(r, std::move(a));
        b_.add_alt(r, {});
        prev = r;
      }
      out.push_back(rule_sym(prev));
    }
    return Status::ok();
  }

  Status parse_sequence(GrammarBuilder::Alt& out, bool nested) {
    while (true) {
      skip_space(nested);
      if (i_ >= s_.size()) return Status::ok();
      const char c = s_[i_];
      GrammarBuilder::Alt item;
      if (c == '"') {
        SUSTAIN_TRY(parse_literal(item));
      } else if (c == '[') {
        SUSTAIN_TRY(parse_class(item));
      } else if (c == '.') {
        ++i_;
        item.push_back(class_symbol(b_, complement({}), "any"));
      } else if (c == '(') {
        if (++depth_ > kMaxNesting)
          return fail(i_, "parentheses nest deeper than {} levels", kMaxNesting);
        ++i_;
        const uint32_t r = b_.fresh_rule("group");
        skip_space(true);
        SUSTAIN_TRY(parse_alternates(r, true));
        if (i_ >= s_.size() || s_[i_] != ')') return fail(i_, "expected ')', found {}", found());
        ++i_;
        --depth_;
        item.push_back(rule_sym(r));
      } else if (is_name_char(c)) {
        const size_t at = i_;
        const std::string name = parse_name();
        // `name ::=` starts the next rule: this sequence ended at a line
        // break that the caller did not see (inside a group it is an error).
        size_t k = i_;
        while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
        if (s_.substr(k, 3) == "::=") {
          if (nested) return fail(at, "missing ')' before the rule '{}'", name);
          i_ = at;
          return Status::ok();
        }
        const uint32_t r = b_.rule(name);
        b_.note_use(r, where(at));
        item.push_back(rule_sym(r));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return fail(i_, "'{}' follows nothing", c);
      } else if (c == '<') {
        return fail(i_, "token references (<...>) are not supported");
      } else {
        return Status::ok();  // '|', ')', a newline, or something the caller reports
      }
      if (i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{')) {
        SUSTAIN_TRY(repeat(std::move(item), out));
      } else {
        out.insert(out.end(), item.begin(), item.end());
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
  GrammarBuilder b_;
};

}  // namespace

Expected<Grammar> parse_gbnf(std::string_view text, const std::string& root) {
  Parser p(text);
  return p.parse(root);
}

}  // namespace sustain::grammar

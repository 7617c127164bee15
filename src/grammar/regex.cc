#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "grammar/char_class.h"
#include "grammar/grammar.h"

namespace sustain::grammar {
namespace {

constexpr int kMaxRegexNesting = 64;

CodeRanges digit_ranges() {
  return {{'0', '9'}};
}
CodeRanges word_ranges() {
  return normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
}
CodeRanges space_ranges() {
  // ECMA-262 \s: the ASCII whitespace plus the Unicode space separators.
  return normalize({{'\t', '\r'},
                    {' ', ' '},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}

// A set of decoded characters as the GBNF of their JSON-escaped text: the
// characters that JSON writes as they are in one class, and \" \\ \n \r \t
// as their escapes.
std::string class_gbnf(const CodeRanges& set) {
  CodeRanges plain;
  std::vector<std::string> escaped;
  auto has = [&](uint32_t c) {
    for (auto [lo, hi] : set)
      if (c >= lo && c <= hi) return true;
    return false;
  };
  for (auto [lo, hi] : set) {
    // Drop the control characters, '"' and '\\' from the plain part.
    uint32_t a = std::max<uint32_t>(lo, 0x20);
    auto add = [&](uint32_t x, uint32_t y) {
      if (x <= y) plain.push_back({x, y});
    };
    if (a > hi) continue;
    for (uint32_t cut : {static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
      if (cut >= a && cut <= hi) {
        add(a, cut - 1);
        a = cut + 1;
      }
    }
    add(a, hi);
  }
  if (has('"')) escaped.push_back("\"\\\\\\\"\"");
  if (has('\\')) escaped.push_back("\"\\\\\\\\\"");
  if (has('\n')) escaped.push_back("\"\\\\n\"");
  if (has('\r')) escaped.push_back("\"\\\\r\"");
  if (has('\t')) escaped.push_back("\"\\\\t\"");
  std::vector<std::string> alts;
  if (!plain.empty()) {
    std::string c = "[";
    for (auto [lo, hi] : plain) {
      c += gbnf_class_char(lo);
      if (hi > lo) c += "-" + gbnf_class_char(hi);
    }
    alts.push_back(c + "]");
  }
  for (auto& e : escaped) alts.push_back(e);
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // nothing: the pattern allows no character here
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

class RegexParser {
 public:
  RegexParser(std::string_view s, const std::string& char_rule) : s_(s), char_rule_(char_rule) {}

  Expected<std::string> parse() {
    bool anchored_start = false, anchored_end = false;
    if (!s_.empty() && s_[0] == '^') {
      anchored_start = true;
      ++i_;
    }
    std::string body;
    SUSTAIN_ASSIGN_OR_RETURN(body, parse_alt(0));
    if (i_ < s_.size()) {
      if (s_[i_] == ')') return fail("unbalanced ')'");
      return fail(fmt::format("unexpected '{}'", s_[i_]));
    }
    anchored_end = end_anchor_;
    std::string out;
    if (!anchored_start) out += char_rule_ + "* ";
    out += "(" + body + ")";
    if (!anchored_end) out += " " + char_rule_ + "*";
    return out;
  }

 private:
  Status fail(const std::string& what) const {
    return Status(Code::kInvalidArgument,
                  fmt::format("pattern at offset {}: {}", std::min(i_, s_.size()), what));
  }

  bool at_end() const { return i_ >= s_.size(); }

  Expected<std::string> parse_alt(int depth) {
    if (depth > kMaxRegexNesting) return fail("groups nest too deeply");
    std::vector<std::string> alts;
    while (true) {
      std::string seq;
      SUSTAIN_ASSIGN_OR_RETURN(seq, parse_seq(depth));
      alts.push_back(seq.empty() ? "\"\"" : seq);
      if (!at_end() && s_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    if (alts.size() == 1) return alts[0];
    std::string out;
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
    return "(" + out + ")";
  }

  Expected<std::string> parse_seq(int depth) {
    std::string out;
    while (!at_end() && s_[i_] != '|' && s_[i_] != ')') {
      if (end_anchor_) return fail("'$' is only supported at the end of the pattern");
      if (s_[i_] == '$') {
        ++i_;
        end_anchor_ = true;
        continue;
      }
      if (s_[i_] == '^') return fail("'^' is only supported at the start of the pattern");
      std::string atom;
      SUSTAIN_ASSIGN_OR_RETURN(atom, parse_atom(depth));
      SUSTAIN_ASSIGN_OR_RETURN(atom, parse_quantifier(std::move(atom)));
      if (!out.empty()) out += " ";
      out += atom;
    }
    return out;
  }

  Expected<std::string> parse_quantifier(std::string atom) {
    if (at_end()) return atom;
    const char c = s_[i_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++i_;
    } else if (c == '{') {
      const size_t start = i_++;
      std::string m, n;
      bool comma = false;
      while (!at_end() && s_[i_] != '}') {
        const char d = s_[i_++];
        if (d == ',' && !comma) {
          comma = true;
        } else if (d >= '0' && d <= '9') {
          (comma ? n : m) += d;
        } else {
          i_ = start;
          return fail("malformed '{m,n}' quantifier");
        }
      }
      if (at_end() || m.empty() || m.size() > 6 || n.size() > 6) {
        i_ = start;
        return fail("malformed '{m,n}' quantifier");
      }
      if (std::stoul(m) > kMaxRepetition || (!n.empty() && std::stoul(n) > kMaxRepetition)) {
        i_ = start;
        return fail(fmt::format("a repetition count is over the limit of {}", kMaxRepetition));
      }
      if (!n.empty() && std::stoul(n) < std::stoul(m)) {
        i_ = start;
        return fail("in '{m,n}' the maximum is below the minimum");
      }
      ++i_;
      q = "{" + m + (comma ? "," + n : "") + "}";
    } else {
      return atom;
    }
    if (!at_end() && s_[i_] == '?') ++i_;  // lazy: the same language
    if (!at_end() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '{'))
      return fail("a quantifier follows a quantifier");
    return "(" + atom + ")" + q;
  }

  // An escape after '\\' as a set of characters (class escapes and single
  // characters alike).
  Expected<CodeRanges> parse_escape(bool in_class) {
    if (at_end()) return fail("the pattern ends with '\\'");
    const char e = s_[i_++];
    switch (e) {
      case 'd':
        return digit_ranges();
      case 'D':
        return complement(digit_ranges());
      case 'w':
        return word_ranges();
      case 'W':
        return complement(word_ranges());
      case 's':
        return space_ranges();
      case 'S':
        return complement(space_ranges());
      case 't':
        return CodeRanges{{'\t', '\t'}};
      case 'n':
        return CodeRanges{{'\n', '\n'}};
      case 'r':
        return CodeRanges{{'\r', '\r'}};
      case 'f':
        return CodeRanges{{'\f', '\f'}};
      case 'v':
        return CodeRanges{{'\v', '\v'}};
      case '0':
        return CodeRanges{{0, 0}};
      case 'x':
      case 'u': {
        const int n = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (at_end() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
            return fail(fmt::format("'\\{}' needs {} hex digits", e, n));
          const char h = s_[i_++];
          v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return normalize({{v, v}});
      }
      case 'b':
        if (in_class) return CodeRanges{{'\b', '\b'}};
        return fail("word boundaries (\\b) are not supported");
      default:
        if ((e >= '1' && e <= '9') || e == 'k') return fail("backreferences are not supported");
        if (e == 'p' || e == 'P') return fail("Unicode property escapes are not supported");
        if (e == 'B') return fail("'\\B' is not supported");
        if (std::isalnum(static_cast<unsigned char>(e)))
          return fail(fmt::format("unknown escape '\\{}'", e));
        return CodeRanges{{static_cast<unsigned char>(e), static_cast<unsigned char>(e)}};
    }
  }

  // One character of the pattern's text (raw UTF-8 decoded).
  Expected<uint32_t> parse_raw_char() {
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c < 0x80) {
      ++i_;
      return static_cast<uint32_t>(c);
    }
    const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || i_ + static_cast<size_t>(n) > s_.size()) return fail("invalid UTF-8");
    uint32_t v = c & (0x7F >> n);
    for (int k = 1; k < n; ++k) v = (v << 6) | (static_cast<unsigned char>(s_[i_ + k]) & 0x3F);
    i_ += static_cast<size_t>(n);
    return v;
  }

  Expected<std::string> parse_class() {
    ++i_;  // '['
    const bool negated = !at_end() && s_[i_] == '^';
    if (negated) ++i_;
    CodeRanges set;
    bool first = true;
    while (true) {
      if (at_end()) return fail("unterminated character class");
      if (s_[i_] == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      CodeRanges item;
      bool single = true;
      if (s_[i_] == '\\') {
        ++i_;
        SUSTAIN_ASSIGN_OR_RETURN(item, parse_escape(true));
        single = item.size() == 1 && item[0].first == item[0].second;
      } else {
        uint32_t c = 0;
        SUSTAIN_ASSIGN_OR_RETURN(c, parse_raw_char());
        item = {{c, c}};
      }
      if (single && i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (s_[i_] == '\\') {
          ++i_;
          CodeRanges h;
          SUSTAIN_ASSIGN_OR_RETURN(h, parse_escape(true));
          if (h.size() != 1 || h[0].first != h[0].second)
            return fail("a class escape cannot end a range");
          hi = h[0].first;
        } else {
          SUSTAIN_ASSIGN_OR_RETURN(hi, parse_raw_char());
        }
        if (hi < item[0].first) return fail("a range in a class is backwards");
        item = {{item[0].first, hi}};
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    set = normalize(std::move(set));
    if (negated) set = complement(set);
    return class_gbnf(set);
  }

  Expected<std::string> parse_atom(int depth) {
    const char c = s_[i_];
    if (c == '(') {
      ++i_;
      if (!at_end() && s_[i_] == '?') {
        if (i_ + 1 < s_.size() && s_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return fail("lookarounds and named groups ('(?') are not supported");
        }
      }
      std::string inner;
      SUSTAIN_ASSIGN_OR_RETURN(inner, parse_alt(depth + 1));
      if (at_end() || s_[i_] != ')') return fail("missing ')'");
      ++i_;
      return "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++i_;
      return class_gbnf(complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("a quantifier follows nothing");
    if (c == '\\') {
      ++i_;
      CodeRanges set;
      SUSTAIN_ASSIGN_OR_RETURN(set, parse_escape(false));
      return class_gbnf(set);
    }
    uint32_t cp = 0;
    SUSTAIN_ASSIGN_OR_RETURN(cp, parse_raw_char());
    return class_gbnf(normalize({{cp, cp}}));
  }

  std::string_view s_;
  const std::string& char_rule_;
  size_t i_ = 0;
  bool end_anchor_ = false;
};

}  // namespace

std::string gbnf_class_char(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F || cp == ']' || cp == '[' || cp == '\\' || cp == '-' || cp == '^' ||
      cp == '"')
    return fmt::format("\\x{:02X}", cp);
  if (cp >= 0x80) return cp <= 0xFFFF ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
  return std::string(1, static_cast<char>(cp));
}

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += ch;  // raw UTF-8 is read back as the same bytes
    }
  }
  return out + "\"";
}

Expected<std::string> regex_to_gbnf(std::string_view pattern, const std::string& char_rule) {
  RegexParser p(pattern, char_rule);
  return p.parse();
}

}  // namespace sustain::grammar

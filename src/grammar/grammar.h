// A context-free grammar over bytes, the form every constraint is compiled
// to: GBNF text (gbnf.h), JSON Schema (schema.h) and the built-in JSON
// grammar all end here, and the matcher (matcher.h) runs only this.
//
// Why bytes, not code points: tokens split multi-byte UTF-8 characters
// (byte-fallback tokens carry one byte each), so a matcher over code points
// needs a partial-character state beside every stack. Compiling each
// character class to the UTF-8 byte sequences it stands for once, at build
// time (utf8_ranges.h), makes a split character an ordinary prefix.
//
// Layout: every alternative of every rule is a run of symbols in `code`,
// ended by a kEnd symbol; a rule lists where its alternatives start. A
// position is an index into `code`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace sustain::grammar {

// A set of bytes: the terminal of the grammar.
struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

struct Sym {
  enum Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = kEnd;
  uint32_t arg = 0;  // kBytes: index into Grammar::sets; kRule: rule index
};

struct Grammar {
  std::vector<Sym> code;
  std::vector<ByteSet> sets;
  std::vector<std::vector<uint32_t>> alts;  // per rule: start positions in `code`
  std::vector<std::string> names;           // per rule ("" never: generated rules get names)
  uint32_t root = 0;

  size_t n_rules() const { return alts.size(); }
};

// Limits on what one request may build (a grammar is client input).
constexpr size_t kMaxGrammarSymbols = 1 << 20;
constexpr uint32_t kMaxRepetition = 4096;  // the n of x{m,n}

// Builds a Grammar rule by rule. Rules may be referenced before they are
// defined; finish() checks that every referenced rule is defined and that no
// rule is left-recursive (the matcher expands rules at their first symbol,
// so left recursion would never end).
class GrammarBuilder {
 public:
  // The rule named `name`, declared if new.
  uint32_t rule(const std::string& name);
  // A fresh rule named after `base` (base_1, base_2, ...), already defined
  // once its alternatives are added.
  uint32_t fresh_rule(const std::string& base);
  uint32_t bytes(const ByteSet& s);  // index of an interned terminal

  using Alt = std::vector<Sym>;
  // Adds an alternative to `rule`; an empty Alt matches the empty string.
  void add_alt(uint32_t rule, Alt alt);
  bool defined(uint32_t rule) const { return defined_[rule]; }
  void mark_defined(uint32_t rule) { defined_[rule] = true; }
  // Where a rule was first referenced, for "undefined rule" errors.
  void note_use(uint32_t rule, std::string where);

  // Checks and flattens. kInvalidArgument naming the problem.
  Expected<Grammar> finish(const std::string& root);

  size_t n_symbols() const { return n_symbols_; }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> index_;
  std::vector<std::vector<Alt>> alts_;
  std::vector<bool> defined_;
  std::vector<std::string> first_use_;
  std::vector<ByteSet> sets_;
  size_t n_symbols_ = 0;
};

// Rules that can match the empty string.
std::vector<bool> nullable_rules(const Grammar& g);

// Helpers for building sequences.
inline Sym rule_sym(uint32_t r) {
  return Sym{Sym::kRule, r};
}
inline Sym bytes_sym(uint32_t s) {
  return Sym{Sym::kBytes, s};
}

}  // namespace sustain::grammar

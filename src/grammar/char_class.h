// Character classes ([a-z], [^"\\], '.') as sets of code points, compiled to
// the UTF-8 byte sequences they stand for, so the grammar stays over bytes
// (grammar.h says why).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace sustain::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent inclusive ranges of Unicode scalar values
// (no surrogates).
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorts and merges, clips to kMaxCodePoint and removes U+D800..U+DFFF.
CodeRanges normalize(CodeRanges r);
// Every scalar value not in r (r normalized).
CodeRanges complement(const CodeRanges& r);

// One UTF-8 encoding pattern: byte k of the character lies in seq[k].
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;
// Patterns whose union is exactly the UTF-8 encodings of r (r normalized).
std::vector<ByteSeq> utf8_sequences(const CodeRanges& r);

// A symbol matching exactly one character of r: one terminal when every
// character is one byte long, otherwise a new rule named after `base` with
// one alternative per pattern.
Sym class_symbol(GrammarBuilder& b, const CodeRanges& r, const std::string& base);

// Appends the UTF-8 encoding of scalar value c.
void append_utf8(std::string& out, uint32_t c);

}  // namespace sustain::grammar

// Unicode helpers for the tokenizer: strict UTF-8 decoding, the character
// classes the pre-tokenizer regexes use (\p{L}, \p{N}, \p{P}, \p{S}, \p{M},
// \s), NFC normalization, and GPT-2's byte <-> printable-character map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sustain::tokenizer::unicode {

// Category class flags (the first letter of the general category) and the
// White_Space property. Unassigned code points are kControl, as in \p{C}.
enum Flag : uint8_t {
  kNumber = 0x01,
  kLetter = 0x02,
  kPunctuation = 0x04,
  kSymbol = 0x08,
  kMark = 0x10,
  kSeparator = 0x20,
  kControl = 0x40,
  kWhitespace = 0x80,
};

uint8_t flags(uint32_t cp);
inline bool is_letter(uint32_t cp) {
  return flags(cp) & kLetter;
}
inline bool is_number(uint32_t cp) {
  return flags(cp) & kNumber;
}
inline bool is_whitespace(uint32_t cp) {
  return flags(cp) & kWhitespace;
}

// Index of the first byte that does not start a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are
// ill-formed), or npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s);

// Decodes valid UTF-8 (validate first) into code points.
std::vector<uint32_t> decode_utf8(std::string_view s);
void append_utf8(uint32_t cp, std::string& out);
std::string encode_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end);
// Byte length of the UTF-8 sequence a lead byte starts (1 for a stray byte).
size_t utf8_len(uint8_t lead);

// Canonical composition (Unicode NFC) of valid UTF-8.
std::string nfc(std::string_view s);

// GPT-2's byte-level alphabet: each byte maps to one printable code point
// so that byte strings can be stored as text tokens ("Ġ" is the space).
const std::string& byte_to_unicode(uint8_t b);  // UTF-8 of the code point
// The byte a code point stands for, or -1 if it is not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace sustain::tokenizer::unicode

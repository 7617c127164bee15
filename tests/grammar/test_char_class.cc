// Code-point classes compiled to UTF-8 byte patterns: checked against every
// scalar value, so a boundary slip anywhere in the split shows.
#include <gtest/gtest.h>

#include <random>

#include "grammar/char_class.h"

namespace sustain::grammar {
namespace {

bool in(const CodeRanges& r, uint32_t c) {
  for (auto [lo, hi] : r)
    if (c >= lo && c <= hi) return true;
  return false;
}

bool seq_matches(const std::vector<ByteSeq>& seqs, const std::string& bytes) {
  for (const auto& s : seqs) {
    if (s.size() != bytes.size()) continue;
    bool ok = true;
    for (size_t k = 0; k < s.size() && ok; ++k) {
      const auto b = static_cast<uint8_t>(bytes[k]);
      ok = b >= s[k].first && b <= s[k].second;
    }
    if (ok) return true;
  }
  return false;
}

void check_exact(const CodeRanges& r) {
  const auto seqs = utf8_sequences(r);
  for (uint32_t c = 0; c <= kMaxCodePoint; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string b;
    append_utf8(b, c);
    ASSERT_EQ(seq_matches(seqs, b), in(r, c)) << "U+" << std::hex << c;
  }
  // No pattern accepts an encoded surrogate.
  EXPECT_FALSE(seq_matches(seqs, "\xED\xA0\x80"));
  EXPECT_FALSE(seq_matches(seqs, "\xED\xBF\xBF"));
}

TEST(CharClass, EveryScalarValueOfSomeClasses) {
  check_exact(normalize({{0, kMaxCodePoint}}));
  check_exact(normalize({{'a', 'z'}, {0x7F, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000}}));
  check_exact(complement(normalize({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}})));
  std::mt19937 rng(7);
  for (int t = 0; t < 4; ++t) {
    CodeRanges r;
    for (int k = 0; k < 5; ++k) {
      const uint32_t a = rng() % 0x110000, len = rng() % 70000;
      r.push_back({a, std::min<uint32_t>(a + len, kMaxCodePoint)});
    }
    check_exact(normalize(r));
  }
}

TEST(CharClass, NormalizeAndComplement) {
  EXPECT_EQ(normalize({{5, 9}, {1, 3}, {4, 4}, {0xD7FF, 0xE000}}),
            (CodeRanges{{1, 9}, {0xD7FF, 0xD7FF}, {0xE000, 0xE000}}));
  EXPECT_EQ(complement(normalize({{0, 0x40}})),
            (CodeRanges{{0x41, 0xD7FF}, {0xE000, kMaxCodePoint}}));
  EXPECT_TRUE(complement(normalize({{0, kMaxCodePoint}})).empty());
}

}  // namespace
}  // namespace sustain::grammar

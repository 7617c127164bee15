#include "grammar/char_class.h"

#include <algorithm>

namespace sustain::grammar {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int utf8_len(uint32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

void encode(uint32_t c, uint8_t* out) {
  const int n = utf8_len(c);
  if (n == 1) {
    out[0] = static_cast<uint8_t>(c);
    return;
  }
  static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int k = n - 1; k > 0; --k) {
    out[k] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    c >>= 6;
  }
  out[0] = static_cast<uint8_t>(kLead[n] | c);
}

// Splits [lo, hi] until each piece has one encoded length and, at every byte
// position, ranges over full continuation blocks, so the piece's encodings
// are exactly the product of per-byte ranges (the construction RE2 and
// Rust's regex-syntax use).
void split(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
  if (lo > hi) return;
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && max < hi) {
      split(lo, max, out);
      split(max + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  ByteSeq seq;
  for (int k = 0; k < utf8_len(lo); ++k) seq.push_back({a[k], b[k]});
  out.push_back(std::move(seq));
}

}  // namespace

CodeRanges normalize(CodeRanges r) {
  CodeRanges cut;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (lo < kSurrogateLo && hi >= kSurrogateLo) {
      cut.push_back({lo, kSurrogateLo - 1});
      lo = kSurrogateLo;
    }
    if (lo >= kSurrogateLo && lo <= kSurrogateHi) lo = kSurrogateHi + 1;
    if (lo <= hi) cut.push_back({lo, hi});
  }
  std::sort(cut.begin(), cut.end());
  CodeRanges merged;
  for (auto [lo, hi] : cut) {
    // Ranges that touch across the surrogate gap stay apart; that is harmless.
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  return merged;
}

CodeRanges complement(const CodeRanges& r) {
  CodeRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize(std::move(out));
}

std::vector<ByteSeq> utf8_sequences(const CodeRanges& r) {
  std::vector<ByteSeq> out;
  for (auto [lo, hi] : r) split(lo, hi, out);
  return out;
}

Sym class_symbol(GrammarBuilder& b, const CodeRanges& r, const std::string& base) {
  const auto seqs = utf8_sequences(r);
  ByteSet single;
  std::vector<const ByteSeq*> multi;
  for (const ByteSeq& s : seqs) {
    if (s.size() == 1) {
      single.add_range(s[0].first, s[0].second);
    } else {
      multi.push_back(&s);
    }
  }
  if (multi.empty()) return bytes_sym(b.bytes(single));
  const uint32_t rule = b.fresh_rule(base);
  if (!single.empty()) b.add_alt(rule, {bytes_sym(b.bytes(single))});
  for (const ByteSeq* s : multi) {
    GrammarBuilder::Alt alt;
    for (auto [lo, hi] : *s) {
      ByteSet set;
      set.add_range(lo, hi);
      alt.push_back(bytes_sym(b.bytes(set)));
    }
    b.add_alt(rule, std::move(alt));
  }
  return rule_sym(rule);
}

void append_utf8(std::string& out, uint32_t c) {
  uint8_t buf[4];
  encode(c, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(utf8_len(c)));
}

}  // namespace sustain::grammar

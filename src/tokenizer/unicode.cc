#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode_tables.h"

namespace sustain::tokenizer::unicode {
namespace tables = unicode_tables;

namespace {

uint8_t flags_slow(uint32_t cp) {
  const uint32_t* begin = tables::kFlagRangeStart;
  const uint32_t* end = begin + tables::kFlagRangeCount;
  const uint32_t* it = std::upper_bound(begin, end, cp);
  return tables::kFlagRangeValue[(it - begin) - 1];
}

// The BMP is looked up in a flat table: pre-tokenizers query every character.
struct BmpFlags {
  std::array<uint8_t, 0x10000> v;
  BmpFlags() {
    for (uint32_t cp = 0; cp < 0x10000; ++cp) v[cp] = flags_slow(cp);
  }
};

uint8_t ccc(uint32_t cp) {
  if (cp < 0x300) return 0;
  const tables::CccRange* begin = tables::kCcc;
  const tables::CccRange* end = begin + tables::kCccCount;
  auto it = std::upper_bound(begin, end, cp,
                             [](uint32_t x, const tables::CccRange& r) { return x < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const tables::Decomposition* begin = tables::kDecomp;
    const tables::Decomposition* end = begin + tables::kDecompCount;
    auto it = std::lower_bound(begin, end, cp,
                               [](const tables::Decomposition& d, uint32_t x) { return d.cp < x; });
    if (it != end && it->cp == cp) {
      decompose(it->first, out);
      if (it->second != 0) decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of a pair, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const tables::Composition* begin = tables::kCompose;
  const tables::Composition* end = begin + tables::kComposeCount;
  auto it = std::lower_bound(begin, end, std::pair<uint32_t, uint32_t>(a, b),
                             [](const tables::Composition& c, std::pair<uint32_t, uint32_t> x) {
                               return std::pair(c.first, c.second) < x;
                             });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;  // every code point in the alphabet is below 0x144
  ByteMap() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : 256 + n++;
      append_utf8(cp, to_unicode[b]);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

uint8_t flags(uint32_t cp) {
  static const BmpFlags bmp;
  if (cp < 0x10000) return bmp.v[cp];
  if (cp >= 0x110000) return kControl;
  return flags_slow(cp);
}

size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = std::min(utf8_len(p[i]), s.size() - i);
    uint32_t cp = len == 1 ? p[i] : p[i] & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) append_utf8(cps[i], out);
  return out;
}

std::string nfc(std::string_view s) {
  // Below U+0300 nothing decomposes or combines, except the Latin-1
  // letters with accents, which are already composed.
  bool simple = true;
  for (unsigned char c : s) {
    if (c >= 0xCC) {
      simple = false;
      break;
    }
  }
  if (simple) return std::string(s);

  std::vector<uint32_t> d;
  d.reserve(s.size());
  for (uint32_t cp : decode_utf8(s)) decompose(cp, d);

  // Canonical ordering: stable-sort each run of non-starters by class.
  for (size_t i = 0; i < d.size();) {
    if (ccc(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }

  // Canonical composition: a character joins the last starter unless a
  // character between them has class 0 or a class >= its own (blocked).
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;
  int last_class = -1;
  for (uint32_t cp : d) {
    const int cc = ccc(cp);
    if (starter != SIZE_MAX && (last_class < cc || last_class == 0)) {
      if (uint32_t c = compose(out[starter], cp); c != 0) {
        out[starter] = c;
        continue;
      }
    }
    if (cc == 0) starter = out.size();
    last_class = cc;
    out.push_back(cp);
  }
  return encode_utf8(out, 0, out.size());
}

const std::string& byte_to_unicode(uint8_t b) {
  return byte_map().to_unicode[b];
}

int unicode_to_byte(uint32_t cp) {
  return cp < 512 ? byte_map().to_byte[cp] : -1;
}

}  // namespace sustain::tokenizer::unicode

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace sustain::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at s[i], 0 if ill-formed, or
// SIZE_MAX if it is a valid but unfinished prefix (more bytes may come).
size_t sequence_at(std::string_view s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) return 1;
  size_t len;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
  } else {
    return 0;
  }
  const size_t avail = std::min(len, s.size() - i);
  // find_invalid_utf8 checks overlongs and surrogates; on a prefix, check the
  // bytes present against the same second-byte ranges.
  for (size_t k = 1; k < avail; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    if (k == 1) {
      if (c == 0xE0 && b < 0xA0) return 0;
      if (c == 0xED && b > 0x9F) return 0;
      if (c == 0xF0 && b < 0x90) return 0;
      if (c == 0xF4 && b > 0x8F) return 0;
    }
  }
  return avail < len ? SIZE_MAX : len;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  pending_ += t_->token_to_piece(id, special_);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const size_t n = sequence_at(pending_, i);
    if (n == SIZE_MAX) break;  // hold the unfinished character back
    if (n == 0) {
      out += kReplacement;  // a byte that can never start or continue a character
      ++i;
      continue;
    }
    out.append(pending_, i, n);
    i += n;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? "" : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace sustain::tokenizer

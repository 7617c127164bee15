#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <functional>
#include <utility>

#include <fmt/format.h>

#include "tokenizer/unicode.h"

namespace sustain::tokenizer {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunctuation;
using unicode::kWhitespace;

// The text as code points with their class flags. Pieces are lengths in
// code points, in order, covering the text.
struct Text {
  std::vector<uint32_t> cps;
  std::vector<uint8_t> fl;
  bool has(size_t i, uint8_t f) const { return i < cps.size() && (fl[i] & f); }
};
using Pieces = std::vector<size_t>;

// A pattern tried at one position of a piece [pos, end): the length of the
// match, 0 for none. Runs through split_by() like a regex iterator: the
// leftmost match wins and the text between matches becomes pieces too.
using Matcher = std::function<size_t(const Text&, size_t pos, size_t end)>;

Pieces split_by(const Text& t, const Pieces& in, const Matcher& m) {
  Pieces out;
  out.reserve(in.size());
  size_t start = 0;
  for (size_t len : in) {
    const size_t end = start + len;
    size_t gap = start;
    for (size_t pos = start; pos < end;) {
      const size_t n = m(t, pos, end);
      if (n == 0) {
        ++pos;
        continue;
      }
      if (pos > gap) out.push_back(pos - gap);
      out.push_back(n);
      pos += n;
      gap = pos;
    }
    if (end > gap) out.push_back(end - gap);
    start = end;
  }
  return out;
}

// A run of code points satisfying `pred`, starting at pos.
template <typename Pred>
size_t run(const Text& t, size_t pos, size_t end, Pred pred) {
  size_t i = pos;
  while (i < end && pred(t, i)) ++i;
  return i - pos;
}

// \s? followed by a run of `pred` (at least one).
template <typename Pred>
size_t opt_space_run(const Text& t, size_t pos, size_t end, Pred pred) {
  if (t.fl[pos] & kWhitespace && pos + 1 < end && pred(t, pos + 1))
    return 1 + run(t, pos + 1, end, pred);
  return run(t, pos, end, pred);
}

bool is_ascii_digit(uint32_t c) {
  return c >= '0' && c <= '9';
}

// "'s|'t|'re|'ve|'m|'ll|'d" at pos (ASCII case-insensitive when `fold`):
// the length of the contraction, or 0.
size_t contraction(const Text& t, size_t pos, size_t end, bool fold) {
  if (t.cps[pos] != '\'' || pos + 1 >= end) return 0;
  auto lower = [&](size_t i) -> uint32_t {
    const uint32_t c = t.cps[i];
    return fold && c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  const uint32_t a = lower(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= end) return 0;
  const uint32_t b = lower(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// [^\s\p{L}\p{N}]: anything else, including marks, symbols and controls.
bool is_other(const Text& t, size_t i) {
  return !(t.fl[i] & (kWhitespace | kLetter | kNumber));
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
Pieces split_gpt2(const Text& t, const Pieces& in) {
  return split_by(t, in, [](const Text& t, size_t pos, size_t end) -> size_t {
    if (size_t n = contraction(t, pos, end, false)) return n;
    const size_t sp = t.cps[pos] == ' ' && pos + 1 < end ? 1 : 0;
    const size_t p = pos + sp;
    if (p < end) {
      if (t.fl[p] & kLetter)
        return sp + run(t, p, end, [](const Text& t, size_t i) { return bool(t.fl[i] & kLetter); });
      if (t.fl[p] & kNumber)
        return sp + run(t, p, end, [](const Text& t, size_t i) { return bool(t.fl[i] & kNumber); });
      if (is_other(t, p)) return sp + run(t, p, end, is_other);
    }
    const size_t ws =
        run(t, pos, end, [](const Text& t, size_t i) { return bool(t.fl[i] & kWhitespace); });
    // \s+(?!\S): a run followed by a non-space gives its last space to that word.
    if (ws > 1 && pos + ws < end) return ws - 1;
    return ws > 0 ? ws : 1;
  });
}

// Llama 3 (max_digits 3) and Qwen 2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
Pieces split_llama3(const Text& t, const Pieces& in, size_t max_digits) {
  return split_by(t, in, [max_digits](const Text& t, size_t pos, size_t end) -> size_t {
    if (size_t n = contraction(t, pos, end, true)) return n;
    const uint32_t c = t.cps[pos];
    const uint8_t f = t.fl[pos];
    auto letter = [](const Text& t, size_t i) { return bool(t.fl[i] & kLetter); };
    if (c != '\r' && c != '\n' && !(f & kNumber)) {
      if (f & kLetter) return run(t, pos, end, letter);
      if (pos + 1 < end && (t.fl[pos + 1] & kLetter)) return 1 + run(t, pos + 1, end, letter);
    }
    if (f & kNumber) {
      return std::min(max_digits, run(t, pos, end, [](const Text& t, size_t i) {
                        return bool(t.fl[i] & kNumber);
                      }));
    }
    const size_t sp = c == ' ' && pos + 1 < end ? 1 : 0;
    if (pos + sp < end && is_other(t, pos + sp)) {
      size_t i = pos + sp + run(t, pos + sp, end, is_other);
      while (i < end && (t.cps[i] == '\r' || t.cps[i] == '\n')) ++i;
      return i - pos;
    }
    size_t ws = 0, last_newline_end = 0;
    while (pos + ws < end && (t.fl[pos + ws] & kWhitespace)) {
      const uint32_t w = t.cps[pos + ws];
      ++ws;
      if (w == '\r' || w == '\n') last_newline_end = ws;
    }
    if (last_newline_end > 0) return last_newline_end;  // \s*[\r\n]+
    if (ws > 1 && pos + ws < end) return ws - 1;        // \s+(?!\S)
    return ws > 0 ? ws : 1;
  });
}

size_t match_number(const Text& t, size_t pos, size_t) {
  return t.has(pos, kNumber) ? 1 : 0;
}

size_t match_numbers(const Text& t, size_t pos, size_t end) {
  return run(t, pos, end, [](const Text& t, size_t i) { return bool(t.fl[i] & kNumber); });
}

size_t match_three_digits(const Text& t, size_t pos, size_t end) {
  return pos + 3 <= end && is_ascii_digit(t.cps[pos]) && is_ascii_digit(t.cps[pos + 1]) &&
                 is_ascii_digit(t.cps[pos + 2])
             ? 3
             : 0;
}

size_t match_newline(const Text& t, size_t pos, size_t) {
  return t.cps[pos] == '\r' || t.cps[pos] == '\n' ? 1 : 0;
}

// [\p{P}$\+<=>\^~\|]+ (and ` for Falcon): ASCII punctuation and symbols, and
// Unicode punctuation.
Matcher punct_run(bool backquote) {
  return [backquote](const Text& t, size_t pos, size_t end) {
    return run(t, pos, end, [backquote](const Text& t, size_t i) {
      const uint32_t c = t.cps[i];
      if (t.fl[i] & kPunctuation) return true;
      return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' ||
             c == '|' || (backquote && c == '`');
    });
  };
}

// [一-龥ࠀ-一가-퟿]+ as DeepSeek writes it: U+0800..U+9FA5 and Hangul
// U+AC00..U+D7FF. Spaces (U+3000) never match: llama.cpp replaces non-ASCII
// spaces before running this regex.
size_t match_cjk(const Text& t, size_t pos, size_t end) {
  return run(t, pos, end, [](const Text& t, size_t i) {
    const uint32_t c = t.cps[i];
    if (t.fl[i] & kWhitespace) return false;
    return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF);
  });
}

// DeepSeek LLM's explicit letter class (cased letters of many scripts).
constexpr std::pair<uint32_t, uint32_t> kDeepseekLetters[] = {
    {0x00041, 0x0005A}, {0x00061, 0x0007A}, {0x000B5, 0x000B5}, {0x000C0, 0x000D6},
    {0x000D8, 0x000F6}, {0x000F8, 0x001BA}, {0x001BC, 0x001BF}, {0x001C4, 0x00293},
    {0x00295, 0x002AF}, {0x00370, 0x00373}, {0x00376, 0x00377}, {0x0037B, 0x0037D},
    {0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A}, {0x0038C, 0x0038C},
    {0x0038E, 0x003A1}, {0x003A3, 0x003F5}, {0x003F7, 0x00481}, {0x0048A, 0x0052F},
    {0x00531, 0x00556}, {0x010A0, 0x010C5}, {0x013A0, 0x013F5}, {0x013F8, 0x013FD},
    {0x01C90, 0x01CBA}, {0x01CBD, 0x01CBF}, {0x01D00, 0x01D2B}, {0x01D6B, 0x01D77},
    {0x01D79, 0x01D9A}, {0x01E00, 0x01F15}, {0x01F18, 0x01F1D}, {0x01F20, 0x01F45},
    {0x01F48, 0x01F4D}, {0x01F50, 0x01F57}, {0x01F59, 0x01F59}, {0x01F5B, 0x01F5B},
    {0x01F5D, 0x01F5D}, {0x01F5F, 0x01F7D}, {0x01F80, 0x01FB4}, {0x01FB6, 0x01FBC},
    {0x01FBE, 0x01FBE}, {0x01FC2, 0x01FC4}, {0x01FC6, 0x01FCC}, {0x01FD0, 0x01FD3},
    {0x01FD6, 0x01FDB}, {0x01FE0, 0x01FEC}, {0x01FF2, 0x01FF4}, {0x01FF6, 0x01FFC},
    {0x02102, 0x02102}, {0x02107, 0x02107}, {0x0210A, 0x02113}, {0x02115, 0x02115},
    {0x02119, 0x0211D}, {0x02124, 0x02124}, {0x02126, 0x02126}, {0x02128, 0x02128},
    {0x0212A, 0x0212D}, {0x0212F, 0x02134}, {0x02139, 0x02139}, {0x0213C, 0x0213F},
    {0x02145, 0x02149}, {0x0214E, 0x0214E}, {0x02183, 0x02184}, {0x02C00, 0x02C7B},
    {0x02C7E, 0x02CE4}, {0x02CEB, 0x02CEE}, {0x02CF2, 0x02CF3}, {0x0A640, 0x0A66D},
    {0x0A680, 0x0A69B}, {0x0A722, 0x0A76F}, {0x0A771, 0x0A787}, {0x0A78B, 0x0A78E},
    {0x0AB70, 0x0ABBF}, {0x0FB00, 0x0FB06}, {0x0FB13, 0x0FB17}, {0x0FF21, 0x0FF3A},
    {0x0FF41, 0x0FF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

bool in_ranges(uint32_t c, const std::pair<uint32_t, uint32_t>* b,
               const std::pair<uint32_t, uint32_t>* e) {
  auto it = std::upper_bound(b, e, c, [](uint32_t x, const auto& r) { return x < r.first; });
  return it != b && c <= (it - 1)->second;
}

bool deepseek_letter(const Text& t, size_t i) {
  return in_ranges(t.cps[i], std::begin(kDeepseekLetters), std::end(kDeepseekLetters));
}

// [!-/:-~！-／：-～‘-‟　-。] (U+3000 is a space and never matches, as above).
bool deepseek_punct(const Text& t, size_t i) {
  const uint32_t c = t.cps[i];
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) ||
         (c >= 0x3001 && c <= 0x3002);
}

// \s+$: the whitespace run that ends a piece becomes a piece of its own.
Pieces split_trailing_space(const Text& t, const Pieces& in) {
  Pieces out;
  size_t start = 0;
  for (size_t len : in) {
    size_t k = start + len;
    while (k > start && (t.fl[k - 1] & kWhitespace)) --k;
    if (k > start) out.push_back(k - start);
    if (start + len > k) out.push_back(start + len - k);
    start += len;
  }
  return out;
}

Pieces run_steps(PreType type, const Text& t) {
  Pieces p;
  if (!t.cps.empty()) p.push_back(t.cps.size());
  auto letters = [](const Text& t, size_t pos, size_t end) {
    return opt_space_run(t, pos, end,
                         [](const Text& t, size_t i) { return bool(t.fl[i] & kLetter); });
  };
  auto puncts = [](const Text& t, size_t pos, size_t end) {
    return opt_space_run(t, pos, end,
                         [](const Text& t, size_t i) { return bool(t.fl[i] & kPunctuation); });
  };
  switch (type) {
    case PreType::kGpt2:
      return split_gpt2(t, p);
    case PreType::kLlama3:
      return split_llama3(t, p, 3);
    case PreType::kQwen2:
      return split_llama3(t, p, 1);
    case PreType::kStarcoder:
      return split_gpt2(t, split_by(t, p, match_number));
    case PreType::kFalcon:
      p = split_gpt2(t, split_by(t, p, punct_run(true)));
      return split_by(t, p, match_three_digits);
    case PreType::kDefault:
      p = split_gpt2(t, split_by(t, p, punct_run(false)));
      p = split_by(t, p, match_numbers);
      return split_by(t, p, match_three_digits);
    case PreType::kDeepseekCoder:
      p = split_by(t, p, match_newline);
      p = split_by(t, p, letters);
      p = split_by(t, p, puncts);
      p = split_by(t, p, match_cjk);
      return split_by(t, p, match_number);
    case PreType::kDeepseekLlm:
      p = split_by(t, p, match_newline);
      p = split_by(t, p, [](const Text& t, size_t pos, size_t end) {
        return opt_space_run(t, pos, end, deepseek_letter);
      });
      p = split_by(t, p, [](const Text& t, size_t pos, size_t end) {
        return opt_space_run(t, pos, end, deepseek_punct);
      });
      p = split_trailing_space(t, p);
      p = split_by(t, p, match_cjk);
      return split_by(t, p, match_numbers);
  }
  return p;
}

struct PreName {
  const char* name;
  PreConfig cfg;
};

// Names and flags as llama.cpp's llama_vocab::impl::load assigns them.
const PreName kPreNames[] = {
    {"default", {PreType::kDefault}},
    {"gpt-2", {PreType::kGpt2}},
    {"phi-2", {PreType::kGpt2}},
    {"mpt", {PreType::kGpt2}},
    {"olmo", {PreType::kGpt2}},
    {"llama3", {PreType::kLlama3, true, true, true}},
    {"llama-v3", {PreType::kLlama3, true, true, true}},
    {"llama-bpe", {PreType::kLlama3, true, true, true}},
    {"falcon3", {PreType::kLlama3, true, true, true}},
    {"dbrx", {PreType::kLlama3}},
    {"smaug-bpe", {PreType::kLlama3}},
    {"qwen2", {PreType::kQwen2, false, false, false, true}},
    {"deepseek-r1-qwen", {PreType::kQwen2, false, false, false, true}},
    {"stablelm2", {PreType::kQwen2}},
    {"megrez", {PreType::kQwen2}},
    {"starcoder", {PreType::kStarcoder}},
    {"refact", {PreType::kStarcoder}},
    {"codeshell", {PreType::kStarcoder}},
    {"exaone", {PreType::kStarcoder}},
    {"minerva-7b", {PreType::kStarcoder}},
    {"smollm", {PreType::kStarcoder, false, false}},
    {"command-r", {PreType::kStarcoder, false, false}},
    {"falcon", {PreType::kFalcon}},
    {"deepseek-llm", {PreType::kDeepseekLlm, false, false}},
    {"deepseek-coder", {PreType::kDeepseekCoder, false, false}},
};

}  // namespace

std::string supported_pre_names() {
  std::string s;
  for (const auto& p : kPreNames) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

Expected<PreConfig> pre_config(const std::string& name) {
  const std::string key = name.empty() ? "default" : name;
  for (const auto& p : kPreNames) {
    if (key == p.name) return p.cfg;
  }
  return error(Code::kUnsupported,
               "unsupported pre-tokenizer tokenizer.ggml.pre = '{}' (supported: {})", name,
               supported_pre_names());
}

std::vector<std::string> pre_tokenize(PreType type, std::string_view text) {
  Text t;
  t.cps = unicode::decode_utf8(text);
  t.fl.resize(t.cps.size());
  for (size_t i = 0; i < t.cps.size(); ++i) t.fl[i] = unicode::flags(t.cps[i]);
  const Pieces pieces = run_steps(type, t);
  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    words.push_back(unicode::encode_utf8(t.cps, start, start + len));
    start += len;
  }
  return words;
}

}  // namespace sustain::tokenizer

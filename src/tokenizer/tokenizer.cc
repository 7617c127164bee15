// Loading the vocabulary from GGUF metadata, special-token handling, and
// encode/decode. The rules follow llama.cpp's llama-vocab.cpp (commit noted in
// ../shared/ref/README.md) so ids match it; where llama.cpp and the model's
// own Hugging Face tokenizer disagree, the Hugging Face definition wins (see
// the notes at kEogTexts and in encode()).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace sustain::tokenizer {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 '▁'

// Texts llama.cpp recognises as end-of-turn, end-of-message, fill-in-the-
// middle and end-of-generation tokens. Where several exist, the first in
// list order is taken (llama.cpp takes whichever its hash map yields first).
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "<\xEF\xBD\x9C"
                                          "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "<end_of_utterance>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreTexts[] = {"<|fim_prefix|>",
                                             "<fim-prefix>",
                                             "<fim_prefix>",
                                             "<\xEF\xBD\x9C"
                                             "fim\xE2\x96\x81"
                                             "begin\xEF\xBD\x9C>",
                                             "<PRE>",
                                             "\xE2\x96\x81<PRE>",
                                             "<|code_prefix|>",
                                             "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {"<|fim_suffix|>",
                                             "<fim-suffix>",
                                             "<fim_suffix>",
                                             "<\xEF\xBD\x9C"
                                             "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
                                             "<SUF>",
                                             "\xE2\x96\x81<SUF>",
                                             "<|code_suffix|>",
                                             "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {"<|fim_middle|>",
                                             "<fim-middle>",
                                             "<fim_middle>",
                                             "<\xEF\xBD\x9C"
                                             "fim\xE2\x96\x81"
                                             "end\xEF\xBD\x9C>",
                                             "<MID>",
                                             "\xE2\x96\x81<MID>",
                                             "<|code_middle|>",
                                             "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
// End of generation. llama.cpp also forces these to control tokens when the
// vocabulary types them otherwise; sustain does so only for tokens not typed
// normal: Qwen 3's vocabulary holds "</s>" as ordinary text, and its own
// tokenizer treats it as text.
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<\xEF\xBD\x9C"
                                          "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};

uint16_t attr_of_type(int64_t type) {
  switch (type) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return 0;  // undefined: never produced by text, decodes to nothing
  }
}

// Reads an optional token id key; an id outside the vocabulary keeps the default.
Status read_id(const gguf::File& f, const char* key, int32_t n, int32_t& id) {
  if (!f.has(key)) return Status::ok();
  SUSTAIN_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v < static_cast<uint64_t>(n)) id = static_cast<int32_t>(v);
  return Status::ok();
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xXX>" -> XX, or -1.
int byte_of_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos);
  return out;
}

std::string compute_piece(const Tokenizer::Impl& v, int32_t id) {
  const std::string& t = v.text[id];
  const uint16_t a = v.attr[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (a & kAttrByte) {
    const int b = byte_of_token(t);
    return b < 0 ? std::string() : std::string(1, static_cast<char>(b));
  }
  if (!(a & kAttrNormal)) return {};
  if (v.spm) return replace_all(t, kSpmSpace, " ");
  std::string out;
  for (uint32_t cp : unicode::decode_utf8(t)) {
    const int b = unicode::unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      unicode::append_utf8(cp, out);  // not in the byte alphabet: kept as it is
    }
  }
  return out;
}

Status load(const gguf::File& f, Tokenizer::Impl& v) {
  SUSTAIN_ASSIGN_OR_RETURN(v.model, f.get_string("tokenizer.ggml.model"));
  SUSTAIN_ASSIGN_OR_RETURN(v.pre, f.get_string_or("tokenizer.ggml.pre", ""));
  if (v.model == "llama") {
    v.spm = true;
  } else if (v.model == "gpt2") {
    v.spm = false;
    SUSTAIN_ASSIGN_OR_RETURN(v.pre_cfg, pre_config(v.pre));
  } else {
    return error(Code::kUnsupported,
                 "unsupported tokenizer.ggml.model '{}' (supported: llama, gpt2)", v.model);
  }

  SUSTAIN_ASSIGN_OR_RETURN(v.text, f.get_string_array("tokenizer.ggml.tokens"));
  const auto n = static_cast<int32_t>(v.text.size());
  if (v.text.empty() || v.text.size() > (1u << 30))
    return error(Code::kBadFile, "tokenizer.ggml.tokens has {} entries", v.text.size());
  v.score.assign(n, 0.0f);
  if (f.has("tokenizer.ggml.scores")) {
    SUSTAIN_ASSIGN_OR_RETURN(std::vector<float> s, f.get_float_array("tokenizer.ggml.scores"));
    if (s.size() < v.text.size())
      return error(Code::kBadFile, "tokenizer.ggml.scores has {} entries for {} tokens", s.size(),
                   n);
    std::copy_n(s.begin(), n, v.score.begin());
  }
  v.attr.assign(n, kAttrNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    SUSTAIN_ASSIGN_OR_RETURN(std::vector<int64_t> t, f.get_int_array("tokenizer.ggml.token_type"));
    if (t.size() < v.text.size())
      return error(Code::kBadFile, "tokenizer.ggml.token_type has {} entries for {} tokens",
                   t.size(), n);
    for (int32_t i = 0; i < n; ++i) v.attr[i] = attr_of_type(t[i]);
  }
  v.text_to_id.reserve(v.text.size());
  for (int32_t i = 0; i < n; ++i) {
    if (v.text[i].empty()) v.text[i] = fmt::format("[EMPTY_{}]", i);
    if (unicode::find_invalid_utf8(v.text[i]) != std::string_view::npos)
      return error(Code::kBadFile, "token {} in tokenizer.ggml.tokens is not valid UTF-8", i);
    auto [it, fresh] = v.text_to_id.emplace(v.text[i], i);
    if (!fresh)
      return error(Code::kBadFile, "duplicate token '{}' in tokenizer.ggml.tokens: ids {} and {}",
                   v.text[i], it->second, i);
  }

  if (!v.spm) {
    if (!f.has("tokenizer.ggml.merges"))
      return error(Code::kBadFile, "gpt2 tokenizer without tokenizer.ggml.merges");
    SUSTAIN_ASSIGN_OR_RETURN(std::vector<std::string> merges,
                             f.get_string_array("tokenizer.ggml.merges"));
    v.merge_rank.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      // The separator is the first space after the first character.
      const size_t sp = merges[i].find(' ', 1);
      if (sp == std::string::npos) continue;
      v.merge_rank.emplace(merges[i], static_cast<int>(i));
    }
  }

  // Defaults per model type, as llama.cpp has them.
  v.bos = v.spm ? 1 : 11;
  v.eos = v.spm ? 2 : 11;
  v.unk = v.spm ? 0 : -1;
  for (int32_t* id : {&v.bos, &v.eos, &v.unk}) {
    if (*id >= n) *id = -1;
  }
  v.add_space_prefix = v.spm;
  v.add_bos = v.spm || v.pre_cfg.add_bos;
  v.add_eos = false;
  v.clean_spaces = !v.spm && v.pre_cfg.clean_spaces;
  SUSTAIN_ASSIGN_OR_RETURN(v.add_space_prefix,
                           f.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  SUSTAIN_ASSIGN_OR_RETURN(v.nfc, f.get_bool_or("tokenizer.sustain.nfc", !v.spm && v.pre_cfg.nfc));
  SUSTAIN_TRY(read_id(f, "tokenizer.ggml.bos_token_id", n, v.bos));
  SUSTAIN_TRY(read_id(f, "tokenizer.ggml.eos_token_id", n, v.eos));
  SUSTAIN_TRY(read_id(f, "tokenizer.ggml.eot_token_id", n, v.eot));
  SUSTAIN_TRY(read_id(f, "tokenizer.ggml.eom_token_id", n, v.eom));
  SUSTAIN_TRY(read_id(f, "tokenizer.ggml.unknown_token_id", n, v.unk));
  SUSTAIN_TRY(read_id(f, "tokenizer.ggml.padding_token_id", n, v.pad));
  SUSTAIN_ASSIGN_OR_RETURN(v.add_bos, f.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos));
  SUSTAIN_ASSIGN_OR_RETURN(v.add_eos, f.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos));
  if (v.add_bos && v.bos < 0)
    return error(Code::kBadFile, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
  if (v.add_eos && v.eos < 0)
    return error(Code::kBadFile, "tokenizer.ggml.add_eos_token is true but there is no EOS token");

  // Special tokens recognised by their text. A match not typed normal
  // becomes a control token, as llama.cpp does.
  auto detect = [&](auto& texts, int32_t* id) {
    int32_t found = -1;
    for (std::string_view t : texts) {
      const int32_t i = v.find(t);
      if (i < 0 || (v.attr[i] & kAttrNormal)) continue;
      v.attr[i] |= kAttrControl;
      if (found < 0) found = i;
    }
    if (id != nullptr && *id < 0) *id = found;
    return found;
  };
  detect(kEotTexts, &v.eot);
  detect(kEomTexts, &v.eom);
  detect(kFimPreTexts, nullptr);
  detect(kFimSufTexts, nullptr);
  detect(kFimMidTexts, nullptr);
  for (const auto* texts : {&kFimPadTexts, &kFimRepTexts}) {
    if (int32_t i = detect(*texts, nullptr); i >= 0) v.eog.insert(i);
  }
  if (int32_t i = detect(kFimSepTexts, nullptr); i >= 0) v.eog.insert(i);
  for (std::string_view t : kEogTexts) {
    const int32_t i = v.find(t);
    if (i < 0 || (v.attr[i] & kAttrNormal)) continue;
    v.attr[i] |= kAttrControl;
    v.eog.insert(i);
  }
  for (int32_t id : {v.eos, v.eot, v.eom}) {
    if (id >= 0) v.eog.insert(id);
  }

  for (int32_t i = 0; i < n; ++i) {
    if (v.attr[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.specials.push_back(i);
  }
  std::stable_sort(v.specials.begin(), v.specials.end(),
                   [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });

  // Phi-3's tokenizer strips the whitespace after its special tokens;
  // llama.cpp recognises the model by name.
  SUSTAIN_ASSIGN_OR_RETURN(std::string name, f.get_string_or("general.name", ""));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : v.specials) v.attr[id] |= kAttrRstrip;
    if (int32_t i = v.find("</s>"); i >= 0) v.attr[i] |= kAttrRstrip;
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t i = v.find(t); i >= 0) v.attr[i] &= ~kAttrRstrip;
    }
  }

  v.byte_token.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (v.spm) {
      int32_t id = v.find(fmt::format("<0x{:02X}>", b));
      if (id < 0) id = v.find(std::string(1, static_cast<char>(b)));
      v.byte_token[b] = id;
    } else {
      v.byte_token[b] = v.find(unicode::byte_to_unicode(static_cast<uint8_t>(b)));
    }
  }
  v.piece.resize(n);
  for (int32_t i = 0; i < n; ++i) v.piece[i] = compute_piece(v, i);
  return Status::ok();
}

// A run of the input: either plain text [offset, offset + length) or a token.
struct Fragment {
  int32_t token;  // -1 for text
  size_t offset, length;
};

bool is_c_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

// Splits the text fragments on each special token's text, longest tokens
// first. Control and unknown tokens only with parse_special; user-defined
// tokens always (as Hugging Face tokenizers split added tokens first).
std::vector<Fragment> split_specials(const Tokenizer::Impl& v, std::string_view text,
                                     bool parse_special) {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : v.specials) {
    const uint16_t a = v.attr[id];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& s = v.text[id];
    if (text.find(s) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t begin = fr.offset;
      const size_t end = fr.offset + fr.length;
      while (begin < end) {
        const size_t hit = text.substr(0, end).find(s, begin);
        if (hit == std::string_view::npos) break;
        size_t left_end = hit;
        if (a & kAttrLstrip) {
          while (left_end > begin && is_c_space(text[left_end - 1])) --left_end;
        }
        if (left_end > begin) next.push_back({-1, begin, left_end - begin});
        next.push_back({id, 0, 0});
        begin = hit + s.size();
        if (a & kAttrRstrip) {
          while (begin < end && is_c_space(text[begin])) ++begin;
        }
      }
      if (begin < end) next.push_back({-1, begin, end - begin});
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Expected<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  auto impl = std::make_unique<Impl>();
  Status st = load(f, *impl);
  if (!st) return st.with_context(fmt::format("tokenizer in {}", f.path()));
  return Tokenizer(std::move(impl));
}

Expected<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special,
                                                 bool parse_special) const {
  const Impl& v = *impl_;
  if (size_t bad = unicode::find_invalid_utf8(text); bad != std::string_view::npos) {
    return error(Code::kInvalidArgument, "text is not valid UTF-8: bad byte 0x{:02X} at offset {}",
                 static_cast<uint8_t>(text[bad]), bad);
  }
  std::vector<int32_t> out;
  if (add_special && v.add_bos) out.push_back(v.bos);
  // SPM puts a space before text that starts the input or follows a special
  // token, as SentencePiece's add_dummy_prefix does for each piece.
  bool prev_special = true;
  for (const Fragment& fr : split_specials(v, text, parse_special)) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    const std::string_view s = text.substr(fr.offset, fr.length);
    if (v.spm) {
      std::string t = v.add_space_prefix && prev_special ? " " : "";
      t += s;
      v.spm_tokenize(replace_all(std::move(t), " ", kSpmSpace), out);
    } else if (v.nfc) {
      // The Hugging Face tokenizer's NFC normalizer (llama.cpp skips it).
      v.bpe_tokenize(unicode::nfc(s), out);
    } else {
      v.bpe_tokenize(s, out);
    }
    prev_special = false;
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  const Impl& v = *impl_;
  if (!v.valid(id)) return {};
  if (!special && (v.attr[id] & (kAttrControl | kAttrUnknown))) return {};
  return v.piece[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  const Impl& v = *impl_;
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string p = token_to_piece(ids[i], special);
    // SPM's prefix space is not part of the text (only the first token's).
    if (i == 0 && v.add_space_prefix && !p.empty() && p[0] == ' ') p.erase(0, 1);
    text += p;
  }
  if (!v.clean_spaces) return text;

  // clean_up_tokenization_spaces, as llama.cpp does it: " ?" " !" " ." " ,"
  // lose their space, " ' " becomes "'", and " 's" " 'm" " 're" " 've"
  // lose the space before the apostrophe.
  std::string a;
  for (size_t i = 0; i < text.size(); ++i) {
    const char x = text[i];
    if (i > 0 && text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') && !a.empty())
      a.pop_back();
    a.push_back(x);
  }
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (x == '\'' && i > 0 && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b.push_back(x);
      ++i;  // the space after it goes too
      continue;
    }
    b.push_back(x);
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (x == '\'' && i > 0 && b[i - 1] == ' ' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      const char x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
        c.pop_back();
    }
    c.push_back(x);
  }
  return c;
}

int32_t Tokenizer::n_vocab() const {
  return static_cast<int32_t>(impl_->text.size());
}
int32_t Tokenizer::bos() const {
  return impl_->bos;
}
int32_t Tokenizer::eos() const {
  return impl_->eos;
}
int32_t Tokenizer::eot() const {
  return impl_->eot;
}
bool Tokenizer::is_eog(int32_t id) const {
  return impl_->eog.count(id) > 0;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
const std::string& Tokenizer::model() const {
  return impl_->model;
}
const std::string& Tokenizer::pre() const {
  return impl_->pre;
}

}  // namespace sustain::tokenizer

#include "tools/synth_vocab.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

namespace sustain::tools {
namespace {

// Scores are floats holding -(merge order): keep every order exactly representable.
constexpr uint32_t kMaxVocab = 1u << 24;
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 '▁'
constexpr std::string_view kBpeSpace = "\xC4\xA0";      // U+0120 'Ġ', GPT-2's byte 0x20
// Extension letters for the breadth-first fill, most frequent in English first.
constexpr std::string_view kFillLetters = "etaoinsrhldcumfpgwybvkxjqz";

// Words that get four variants each: "w", " w", "W", " W".
constexpr std::string_view kEnglishWords =
    "the of and to a in is it you that he was for on are with as I his they be at one have this "
    "from or had by not word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line "
    "differ turn cause much mean before move right boy old too same tell does set three want air "
    "well also play small end put home read hand port large spell add even land here must big "
    "high such follow act why ask men change went light kind off need house picture try us again "
    "animal point mother world near build self earth father head stand own page should country "
    "found answer school grow study still learn plant cover food sun four between state keep eye "
    "never last let thought city tree cross farm hard start might story saw far sea draw left late "
    "run while press close night real life few north open seem together next white children begin "
    "got walk example ease paper group always music those both mark often letter until mile river "
    "car feet care second book carry took science eat room friend began idea fish mountain stop "
    "once base hear horse cut sure watch color face wood main enough plain girl usual young ready "
    "above ever red list though feel talk bird soon body dog family direct pose leave song measure "
    "door product black short numeral class wind question happen complete ship area half rock "
    "order fire south problem piece told knew pass since top whole king space heard best hour "
    "better true during hundred five remember step early hold west ground interest reach fast "
    "verb sing listen six table travel less morning ten simple several vowel toward war lay "
    "against pattern slow center love person money serve appear road map rain rule govern pull "
    "cold notice voice unit power town fine certain fly fall lead cry dark machine note wait plan "
    "figure star box noun field rest correct able pound done beauty drive stood contain front "
    "teach week final gave green oh quick develop ocean warm free minute strong special mind "
    "behind clear tail produce fact street inch multiply nothing course stay wheel full force "
    "blue object decide surface deep moon island foot system busy test record boat common gold "
    "possible plane dry wonder laugh thousand ago ran check game shape hot miss brought heat snow "
    "bring yes distant fill east paint language among hello brown fox jumps lazy model token data "
    "value input output user assistant answer please thanks sorry today tomorrow yesterday "
    "question information example important different following however because something";

// Code keywords and identifiers: "w" and " w".
constexpr std::string_view kCodeWords =
    "def class return import from self None True False if else elif for while in not and or "
    "print len range int float str list dict tuple set lambda yield async await try except "
    "finally raise with as pass break continue function const let var new this null undefined "
    "typeof console log require module exports export default void char bool auto static struct "
    "enum public private protected virtual override template typename namespace using std vector "
    "string size_t uint32_t int64_t include define ifdef endif pragma once nullptr sizeof "
    "unsigned double long short switch case fn mut impl pub use crate match Some Ok Err println "
    "main args argv argc error err nil func package chan select interface type map make append "
    "http https www com org json xml html div span href src img id name value key index tmp path "
    "file buf ptr get set test assert";

// Punctuation, whitespace runs and other fragments, taken as they are (one per entry).
constexpr std::string_view kFragments[] = {"  ",
                                           "   ",
                                           "    ",
                                           "     ",
                                           "      ",
                                           "       ",
                                           "        ",
                                           "         ",
                                           "          ",
                                           "           ",
                                           "            ",
                                           "             ",
                                           "              ",
                                           "               ",
                                           "                ",
                                           "\n\n",
                                           "\n\n\n",
                                           "\n\n\n\n",
                                           "\t\t",
                                           "\t\t\t",
                                           "\t\t\t\t",
                                           "\r\n",
                                           " \n",
                                           ".\n",
                                           ",\n",
                                           ":\n",
                                           ";\n",
                                           "{\n",
                                           "}\n",
                                           ")\n",
                                           "(\n",
                                           "?\n",
                                           "!\n",
                                           ".\n\n",
                                           " (",
                                           " )",
                                           " =",
                                           " ==",
                                           " !=",
                                           " ->",
                                           "->",
                                           " =>",
                                           "()",
                                           "();",
                                           "):",
                                           ");",
                                           "),",
                                           ").",
                                           " {",
                                           " }",
                                           "{}",
                                           "[]",
                                           " [",
                                           "])",
                                           "],",
                                           " <",
                                           " >",
                                           " <=",
                                           " >=",
                                           " &&",
                                           " ||",
                                           "::",
                                           " +=",
                                           " -=",
                                           "++",
                                           "--",
                                           " +",
                                           " -",
                                           " *",
                                           " /",
                                           " //",
                                           " /*",
                                           " */",
                                           " #",
                                           "##",
                                           "###",
                                           " \"",
                                           "\",",
                                           "\")",
                                           "('",
                                           "')",
                                           " '",
                                           "',",
                                           " `",
                                           "```",
                                           " **",
                                           "**",
                                           " |",
                                           " &",
                                           " %",
                                           " @",
                                           " $",
                                           " ?",
                                           ".\"",
                                           ",\"",
                                           "...",
                                           "..",
                                           " ...",
                                           "'s",
                                           "'t",
                                           "'re",
                                           "'ve",
                                           "'m",
                                           "'ll",
                                           "'d",
                                           "é",
                                           "è",
                                           "à",
                                           "ü",
                                           "ö",
                                           "ä",
                                           "ß",
                                           "ñ",
                                           "ç",
                                           "ï",
                                           "—",
                                           "–",
                                           "’",
                                           "“",
                                           "”",
                                           "…",
                                           "°",
                                           "€",
                                           "£",
                                           " —",
                                           " “",
                                           "’s",
                                           "café",
                                           " café",
                                           "naïve",
                                           "你",
                                           "好",
                                           "的",
                                           "是",
                                           "你好",
                                           "中国",
                                           "日本"};

// Single-character pieces of the SentencePiece vocabulary besides ASCII letters, digits and
// punctuation (which are generated): the non-ASCII characters the fragments above use.
constexpr std::string_view kSpmExtraChars[] = {"é", "è",  "à",  "ü",  "ö",  "ä",  "ß",  "ñ",  "ç",
                                               "ï", "—",  "–",  "’",  "“",  "”",  "…",  "°",  "€",
                                               "£", "你", "好", "的", "是", "中", "国", "日", "本"};

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the other 68 map to
// U+0100 upward in byte order (space → 'Ġ', newline → 'Ċ'). GPT-2 vocabularies (and Llama 3's
// and Qwen's) list the byte tokens printable ones first, which is the order kept here.
struct ByteLevel {
  std::array<std::string, 256> text;  // byte → token string
  std::array<uint8_t, 256> order;     // id order of the byte tokens
};

const ByteLevel& byte_level() {
  static const ByteLevel kTable = [] {
    ByteLevel t;
    auto printable = [](int b) {
      return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    };
    int k = 0, n = 0;
    for (int b = 0; b < 256; ++b) {
      if (!printable(b)) continue;
      t.text[b] = utf8(b);
      t.order[k++] = static_cast<uint8_t>(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) continue;
      t.text[b] = utf8(256 + n++);
      t.order[k++] = static_cast<uint8_t>(b);
    }
    return t;
  }();
  return kTable;
}

// Splits valid UTF-8 into code points.
std::vector<std::string> split_utf8(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = std::min(s.find(' ', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

class Builder {
 public:
  explicit Builder(const SynthVocabSpec& spec) : spec_(spec), bpe_(spec.model == "gpt2") {}

  Expected<SynthVocab> build() {
    SUSTAIN_TRY(place_fixed());
    SUSTAIN_TRY(place_base_tokens());
    add_builtin_words();
    fill();
    if (room()) {
      return error(Code::kInternal, "synth vocab: ran out of tokens to extend at {} of {}",
                   next_slot_, slots_.size());
    }
    if (!bpe_) {
      // Single characters are never the result of a merge, so their scores do not affect
      // tokenization; put them below every merged piece, as SentencePiece ranks rare pieces.
      for (size_t i = 0; i < chars_.size(); ++i) {
        v_.scores[chars_[i]] = -static_cast<float>(n_pieces_ + 1 + i);
      }
    }
    return std::move(v_);
  }

 private:
  Status put_fixed(uint32_t id, std::string text, int32_t type) {
    if (text.empty()) return error(Code::kInvalidArgument, "synth vocab: token {} has no text", id);
    auto [it, inserted] = id_of_.emplace(text, id);
    if (!inserted) {
      return error(Code::kInvalidArgument, "synth vocab: tokens {} and {} are both '{}'",
                   it->second, id, text);
    }
    v_.tokens[id] = std::move(text);
    v_.token_types[id] = type;
    taken_[id] = true;
    return Status::ok();
  }

  // Specials, SentencePiece's <unk>/<s>/</s>, padding; the remaining ids become regular slots.
  Status place_fixed() {
    if (spec_.model != "gpt2" && spec_.model != "llama") {
      return error(Code::kInvalidArgument,
                   "synth vocab: model '{}' is not supported (use \"gpt2\" or \"llama\")",
                   spec_.model);
    }
    if (bpe_ && spec_.pre.empty()) {
      return error(Code::kInvalidArgument, "synth vocab: a gpt2 vocabulary needs `pre`");
    }
    const uint32_t n = spec_.n_vocab;
    if (n == 0 || n > kMaxVocab) {
      return error(Code::kInvalidArgument, "synth vocab: n_vocab {} is not in 1..{}", n, kMaxVocab);
    }
    v_.tokens.assign(n, std::string());
    v_.token_types.assign(n, kTokenNormal);
    if (!bpe_) v_.scores.assign(n, 0.0f);
    taken_.assign(n, false);
    id_of_.reserve(n);
    if (bpe_) rank_.reserve(n);

    for (const SpecialToken& s : spec_.specials) {
      if (s.id >= n) {
        return error(Code::kInvalidArgument, "synth vocab: special '{}' has id {} >= n_vocab {}",
                     s.text, s.id, n);
      }
      if (taken_[s.id]) {
        return error(Code::kInvalidArgument, "synth vocab: two specials have id {}", s.id);
      }
      SUSTAIN_TRY(put_fixed(s.id, s.text, s.control ? kTokenControl : kTokenUserDefined));
    }
    const uint32_t unk = spec_.unk_id.value_or(0);
    const std::pair<const char*, uint32_t> ids[] = {{"bos_id", spec_.bos_id},
                                                    {"eos_id", spec_.eos_id},
                                                    {"eot_id", spec_.eot_id.value_or(0)},
                                                    {"pad_id", spec_.pad_id.value_or(0)},
                                                    {"unk_id", unk}};
    for (const auto& [what, id] : ids) {
      if (id >= n) {
        return error(Code::kInvalidArgument, "synth vocab: {} {} >= n_vocab {}", what, id, n);
      }
    }
    if (!bpe_) {
      // SentencePiece models carry these three even when the spec does not list them.
      const std::pair<uint32_t, const char*> implicit[] = {
          {unk, "<unk>"}, {spec_.bos_id, "<s>"}, {spec_.eos_id, "</s>"}};
      for (const auto& [id, text] : implicit) {
        if (!taken_[id]) SUSTAIN_TRY(put_fixed(id, text, kTokenControl));
      }
      v_.token_types[unk] = kTokenUnknown;
    }

    // Padding: ids above the last special when regular tokens precede the specials.
    uint32_t lo = n, hi = 0;
    for (uint32_t id = 0; id < n; ++id) {
      if (!taken_[id]) continue;
      lo = std::min(lo, id);
      hi = id;
    }
    const uint32_t pad_from = (lo < n && lo > 0) ? hi + 1 : n;
    for (uint32_t id = pad_from; id < n; ++id) {
      SUSTAIN_TRY(put_fixed(id, fmt::format("[PAD{}]", id), kTokenUnused));
      // convert_hf_to_gguf.py gives SentencePiece padding this score.
      if (!bpe_) v_.scores[id] = -1000.0f;
    }
    for (uint32_t id = 0; id < n; ++id) {
      if (!taken_[id]) slots_.push_back(id);
    }
    return Status::ok();
  }

  Status add_base(std::string text, int32_t type) {
    if (id_of_.count(text)) {
      return error(Code::kInvalidArgument, "synth vocab: special token '{}' (id {}) is also a {}",
                   text, id_of_[text], bpe_ ? "byte token" : "single-character piece");
    }
    add_regular(std::move(text), type);
    return Status::ok();
  }

  // Byte tokens, SentencePiece's single characters, and the letters the fill starts from.
  Status place_base_tokens() {
    std::vector<std::string> chars;
    if (!bpe_) {
      chars.emplace_back(kSpmSpace);
      for (char c = 'a'; c <= 'z'; ++c) chars.emplace_back(1, c);
      for (char c = 'A'; c <= 'Z'; ++c) chars.emplace_back(1, c);
      for (char c = '0'; c <= '9'; ++c) chars.emplace_back(1, c);
      for (char c = '!'; c <= '~'; ++c) {
        if (!is_ascii_letter(c) && !(c >= '0' && c <= '9')) chars.emplace_back(1, c);
      }
      for (std::string_view c : kSpmExtraChars) chars.emplace_back(c);
    }
    const size_t need = 256 + chars.size();
    if (slots_.size() < need) {
      return error(Code::kInvalidArgument,
                   "synth vocab: n_vocab {} leaves {} ids for regular tokens; a {} vocabulary "
                   "needs at least {}",
                   spec_.n_vocab, slots_.size(), spec_.model, need);
    }
    if (bpe_) {
      const ByteLevel& bl = byte_level();
      for (uint8_t b : bl.order) SUSTAIN_TRY(add_base(bl.text[b], kTokenNormal));
    } else {
      for (int b = 0; b < 256; ++b) SUSTAIN_TRY(add_base(fmt::format("<0x{:02X}>", b), kTokenByte));
      for (std::string& c : chars) {
        SUSTAIN_TRY(add_base(c, kTokenNormal));
        chars_.push_back(id_of_.at(c));
      }
    }
    for (char c = 'a'; c <= 'z'; ++c) grow_.push_back(id_of_.at(std::string(1, c)));
    return Status::ok();
  }

  bool room() const { return next_slot_ < slots_.size(); }

  uint32_t add_regular(std::string text, int32_t type) {
    const uint32_t id = slots_[next_slot_++];
    id_of_.emplace(text, id);
    v_.tokens[id] = std::move(text);
    v_.token_types[id] = type;
    return id;
  }

  // A token made of letters, optionally after the space marker: what the fill extends.
  bool is_wordish(std::string_view t) const {
    const std::string_view space = bpe_ ? kBpeSpace : kSpmSpace;
    if (t.substr(0, space.size()) == space) t.remove_prefix(space.size());
    return !t.empty() && std::all_of(t.begin(), t.end(), is_ascii_letter);
  }

  // New token a+b: the merge that creates it ranks after all earlier ones (gpt2) or its score
  // is below all earlier pieces (llama), so text that encoded to one token still does.
  void add_merged(const std::string& a, const std::string& b) {
    const uint32_t id = add_regular(a + b, kTokenNormal);
    if (bpe_) {
      std::string merge = a + " " + b;
      rank_.emplace(merge, static_cast<uint32_t>(v_.merges.size()));
      v_.merges.push_back(std::move(merge));
    } else {
      v_.scores[id] = -static_cast<float>(++n_pieces_);
    }
    if (is_wordish(v_.tokens[id])) grow_.push_back(id);
  }

  // Tokenizes symbols with the table so far: gpt2 merges the adjacent pair of lowest rank,
  // SentencePiece (as llama.cpp's SPM tokenizer) the adjacent pair whose concatenation is the
  // highest-scoring piece; leftmost on ties.
  std::vector<std::string> encode(std::vector<std::string> p) const {
    while (p.size() > 1) {
      size_t at = p.size();
      double best = 0;
      for (size_t i = 0; i + 1 < p.size(); ++i) {
        double key;
        if (bpe_) {
          auto it = rank_.find(p[i] + " " + p[i + 1]);
          if (it == rank_.end()) continue;
          key = -static_cast<double>(it->second);
        } else {
          auto it = id_of_.find(p[i] + p[i + 1]);
          if (it == id_of_.end() || v_.token_types[it->second] != kTokenNormal) continue;
          key = v_.scores[it->second];
        }
        if (at == p.size() || key > best) {
          at = i;
          best = key;
        }
      }
      if (at == p.size()) break;
      p[at] += p[at + 1];
      p.erase(p.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    return p;
  }

  // Adds merges until `text` encodes to a single token. Gives up (keeping what it added) when
  // the vocabulary is full or every adjacent pair's concatenation is already taken: each
  // token is then created by exactly one merge.
  void add_word(std::string_view text) {
    std::vector<std::string> symbols;
    if (bpe_) {
      for (char c : text) symbols.push_back(byte_level().text[static_cast<uint8_t>(c)]);
    } else {
      for (std::string& c : split_utf8(text)) {
        if (c == " ") c = kSpmSpace;
        auto it = id_of_.find(c);
        // Newlines and tabs are byte-fallback tokens in SentencePiece: not part of any piece.
        if (it == id_of_.end() || v_.token_types[it->second] != kTokenNormal) return;
        symbols.push_back(std::move(c));
      }
    }
    while (room()) {
      std::vector<std::string> p = encode(symbols);
      if (p.size() <= 1) return;
      size_t at = p.size();
      for (size_t i = 0; i + 1 < p.size(); ++i) {
        if (!id_of_.count(p[i] + p[i + 1])) {
          at = i;
          break;
        }
      }
      if (at == p.size()) return;
      add_merged(p[at], p[at + 1]);
    }
  }

  void add_builtin_words() {
    for (std::string_view f : kFragments) {
      if (room()) add_word(f);
    }
    auto add_spaced = [this](std::string_view w) {
      if (!room()) return;
      std::string t(1, ' ');
      t.append(w);
      add_word(t);
    };
    for (std::string_view w : split_words(kEnglishWords)) {
      std::string cap(w);
      cap[0] = static_cast<char>(cap[0] >= 'a' && cap[0] <= 'z' ? cap[0] - 'a' + 'A' : cap[0]);
      add_spaced(w);
      if (room()) add_word(w);
      add_spaced(cap);
      if (room()) add_word(cap);
    }
    for (std::string_view w : split_words(kCodeWords)) {
      add_spaced(w);
      if (room()) add_word(w);
    }
    // Llama 3's pre-tokenizer splits digits in groups of 1-3, so those groups are tokens there;
    // SentencePiece vocabularies (Llama 2, Mistral) split digits one by one.
    if (bpe_) {
      for (int i = 0; i < 100 && room(); ++i) add_word(fmt::format("{:02}", i));
      for (int i = 0; i < 1000 && room(); ++i) add_word(fmt::format("{:03}", i));
    }
  }

  // Breadth-first: extend word-like tokens, in creation order, by frequent letters.
  void fill() {
    for (size_t q = 0; room() && q < grow_.size(); ++q) {
      const std::string base = v_.tokens[grow_[q]];  // a copy: add_merged may move the vector
      for (char c : kFillLetters) {
        if (!room()) break;
        const std::string letter(1, c);
        if (!id_of_.count(base + letter)) add_merged(base, letter);
      }
    }
  }

  const SynthVocabSpec& spec_;
  const bool bpe_;
  SynthVocab v_;
  std::vector<bool> taken_;  // ids holding a special, SentencePiece's fixed tokens or padding
  std::unordered_map<std::string, uint32_t> id_of_;
  std::vector<uint32_t> slots_;  // ids for regular tokens, ascending
  size_t next_slot_ = 0;
  std::unordered_map<std::string, uint32_t> rank_;  // gpt2: "A B" → merge rank
  uint32_t n_pieces_ = 0;                           // llama: merged pieces so far
  std::vector<uint32_t> chars_;                     // llama: single-character pieces
  std::vector<uint32_t> grow_;                      // fill queue
};

}  // namespace

Expected<SynthVocab> build_synth_vocab(const SynthVocabSpec& spec) {
  return Builder(spec).build();
}

Status write_synth_vocab(gguf::Writer& w, const SynthVocabSpec& spec) {
  SUSTAIN_ASSIGN_OR_RETURN(SynthVocab v, build_synth_vocab(spec));
  const bool bpe = spec.model == "gpt2";
  w.set_str("tokenizer.ggml.model", spec.model);
  if (!spec.pre.empty()) w.set_str("tokenizer.ggml.pre", spec.pre);
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(v.tokens));
  if (!bpe) w.set("tokenizer.ggml.scores", gguf::Value::f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(v.token_types));
  if (bpe) w.set("tokenizer.ggml.merges", gguf::Value::str_array(v.merges));
  w.set_u32("tokenizer.ggml.bos_token_id", spec.bos_id);
  w.set_u32("tokenizer.ggml.eos_token_id", spec.eos_id);
  if (spec.eot_id) w.set_u32("tokenizer.ggml.eot_token_id", *spec.eot_id);
  if (spec.pad_id) w.set_u32("tokenizer.ggml.padding_token_id", *spec.pad_id);
  if (spec.unk_id || !bpe) w.set_u32("tokenizer.ggml.unknown_token_id", spec.unk_id.value_or(0));
  w.set_bool("tokenizer.ggml.add_bos_token", spec.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", spec.add_eos);
  if (!spec.chat_template.empty()) w.set_str("tokenizer.chat_template", spec.chat_template);
  return Status::ok();
}

}  // namespace sustain::tools

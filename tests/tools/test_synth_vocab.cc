// Synthetic vocabularies: written to a vocab-only GGUF, read back, and checked
// for the invariants a BPE / SentencePiece tokenizer relies on. A small BPE
// encoder and a small SentencePiece encoder below (test-only) show that the
// tables really tokenize common words into single tokens.
#include "tools/synth_vocab.h"

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tools/chat_templates.h"
#include "tools/presets.h"

namespace sustain::tools {
namespace {

const std::string kSpmSpace = "\xE2\x96\x81";  // '▁'

// ---- specs modelled on the real vocabularies ------------------------------------------------

// Llama 3.1 / 3.2 (tokenizer.json of meta-llama/Llama-3.1-8B-Instruct): 128000 regular
// tokens, then 256 specials, most of them reserved.
SynthVocabSpec llama3_spec() {
  SynthVocabSpec s;
  s.model = "gpt2";
  s.pre = "llama-bpe";
  s.n_vocab = 128256;
  const char* named[] = {"<|begin_of_text|>",
                         "<|end_of_text|>",
                         "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>",
                         "<|finetune_right_pad_id|>",
                         "<|reserved_special_token_2|>",
                         "<|start_header_id|>",
                         "<|end_header_id|>",
                         "<|eom_id|>",
                         "<|eot_id|>",
                         "<|python_tag|>"};
  uint32_t id = 128000;
  for (const char* t : named) s.specials.push_back({id++, t});
  for (int r = 3; id < 128256; ++r) {
    s.specials.push_back({id++, fmt::format("<|reserved_special_token_{}|>", r)});
  }
  s.bos_id = 128000;
  s.eos_id = 128009;
  s.eot_id = 128009;
  s.add_bos = true;
  s.chat_template = std::string(kChatTemplateLlama31);
  return s;
}

// Qwen 2.5 (0.5B-3B): 151643 regular tokens, 22 specials, padding from 151665 to 151935.
SynthVocabSpec qwen25_spec() {
  SynthVocabSpec s;
  s.model = "gpt2";
  s.pre = "qwen2";
  s.n_vocab = 151936;
  const std::pair<const char*, bool> specials[] = {
      {"<|endoftext|>", true},        {"<|im_start|>", true},       {"<|im_end|>", true},
      {"<|object_ref_start|>", true}, {"<|object_ref_end|>", true}, {"<|box_start|>", true},
      {"<|box_end|>", true},          {"<|quad_start|>", true},     {"<|quad_end|>", true},
      {"<|vision_start|>", true},     {"<|vision_end|>", true},     {"<|vision_pad|>", true},
      {"<|image_pad|>", true},        {"<|video_pad|>", true},      {"<tool_call>", false},
      {"</tool_call>", false},        {"<|fim_prefix|>", true},     {"<|fim_middle|>", true},
      {"<|fim_suffix|>", true},       {"<|fim_pad|>", true},        {"<|repo_name|>", true},
      {"<|file_sep|>", true}};
  uint32_t id = 151643;
  for (const auto& [t, control] : specials) s.specials.push_back({id++, t, control});
  s.bos_id = 151643;
  s.eos_id = 151645;
  s.eot_id = 151645;
  s.pad_id = 151643;
  s.add_bos = false;
  s.chat_template = std::string(kChatTemplateQwen25);
  return s;
}

// SmolLM2: 17 specials at 0..16, then regular tokens up to 49151.
SynthVocabSpec smollm2_spec() {
  SynthVocabSpec s;
  s.model = "gpt2";
  s.pre = "smollm";
  s.n_vocab = 49152;
  const char* names[] = {
      "<|endoftext|>",    "<|im_start|>",    "<|im_end|>",     "<repo_name>",    "<reponame>",
      "<file_sep>",       "<filename>",      "<gh_stars>",     "<issue_start>",  "<issue_comment>",
      "<issue_closed>",   "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
      "<jupyter_script>", "<empty_output>"};
  uint32_t id = 0;
  for (const char* t : names) s.specials.push_back({id++, t});
  s.bos_id = 1;
  s.eos_id = 2;
  s.pad_id = 2;
  s.unk_id = 0;
  return s;
}

// Mistral 7B v0.3: SentencePiece, <unk> <s> </s>, then 768 control tokens at 3..770.
SynthVocabSpec mistral_v03_spec() {
  SynthVocabSpec s;
  s.model = "llama";
  s.n_vocab = 32768;
  const char* named[] = {
      "[INST]",         "[/INST]",        "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
      "[TOOL_RESULTS]", "[/TOOL_RESULTS]"};
  uint32_t id = 3;
  for (const char* t : named) s.specials.push_back({id++, t});
  for (; id < 771; ++id) s.specials.push_back({id, fmt::format("[control_{}]", id - 2)});
  s.bos_id = 1;
  s.eos_id = 2;
  s.unk_id = 0;
  s.add_bos = true;
  return s;
}

// ---- reading back -----------------------------------------------------------------------------

struct ReadVocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<float> scores;
  std::vector<std::string> merges;
  std::unordered_map<std::string, uint32_t> id_of;
};

ReadVocab write_and_read(const SynthVocabSpec& spec, const std::string& name) {
  gguf::Writer w;
  Status st = write_synth_vocab(w, spec);
  EXPECT_TRUE(st.is_ok()) << st.message();
  const std::string path = test::tmp_path(name + ".gguf");
  st = w.write(path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  ReadVocab r;
  if (!f) return r;
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), spec.model);
  if (!spec.pre.empty()) {
    EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), spec.pre);
  }
  EXPECT_EQ(*f->get_uint("tokenizer.ggml.bos_token_id"), spec.bos_id);
  EXPECT_EQ(*f->get_uint("tokenizer.ggml.eos_token_id"), spec.eos_id);
  EXPECT_EQ(f->has("tokenizer.ggml.eot_token_id"), spec.eot_id.has_value());
  if (spec.eot_id) {
    EXPECT_EQ(*f->get_uint("tokenizer.ggml.eot_token_id"), *spec.eot_id);
  }
  if (spec.pad_id) {
    EXPECT_EQ(*f->get_uint("tokenizer.ggml.padding_token_id"), *spec.pad_id);
  }
  if (spec.unk_id) {
    EXPECT_EQ(*f->get_uint("tokenizer.ggml.unknown_token_id"), *spec.unk_id);
  }
  EXPECT_EQ(*f->get_bool("tokenizer.ggml.add_bos_token"), spec.add_bos);
  EXPECT_EQ(*f->get_bool("tokenizer.ggml.add_eos_token"), spec.add_eos);
  EXPECT_EQ(*f->get_string_or("tokenizer.chat_template", ""), spec.chat_template);
  // llama.cpp reads token_type as an int32 array and scores as a float32 array, in place.
  const gguf::Value* tt = f->find("tokenizer.ggml.token_type");
  EXPECT_TRUE(tt && std::get<gguf::Array>(tt->v).elem_type == gguf::ValueType::kInt32);

  r.tokens = *f->get_string_array("tokenizer.ggml.tokens");
  r.types = *f->get_int_array("tokenizer.ggml.token_type");
  if (spec.model == "llama") {
    r.scores = *f->get_float_array("tokenizer.ggml.scores");
    EXPECT_FALSE(f->has("tokenizer.ggml.merges"));
  } else {
    r.merges = *f->get_string_array("tokenizer.ggml.merges");
    EXPECT_FALSE(f->has("tokenizer.ggml.scores"));
  }
  for (uint32_t i = 0; i < r.tokens.size(); ++i) r.id_of.emplace(r.tokens[i], i);
  return r;
}

// Invariants shared by both models.
void check_common(const SynthVocabSpec& spec, const ReadVocab& r) {
  ASSERT_EQ(r.tokens.size(), spec.n_vocab);
  ASSERT_EQ(r.types.size(), spec.n_vocab);
  EXPECT_EQ(r.id_of.size(), r.tokens.size()) << "duplicate token strings";
  for (uint32_t i = 0; i < r.tokens.size(); ++i) {
    ASSERT_FALSE(r.tokens[i].empty()) << "token " << i;
    ASSERT_GE(r.types[i], kTokenNormal) << "token " << i;
    ASSERT_LE(r.types[i], kTokenByte) << "token " << i;
  }
  for (const SpecialToken& s : spec.specials) {
    ASSERT_EQ(r.tokens[s.id], s.text);
    if (s.id != spec.unk_id.value_or(spec.model == "llama" ? 0 : UINT32_MAX)) {
      EXPECT_EQ(r.types[s.id], s.control ? kTokenControl : kTokenUserDefined) << s.text;
    }
  }
}

// Number of code points in UTF-8 text.
size_t n_chars(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// GPT-2's byte-to-unicode mapping, written out independently of the library: bytes
// '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68, in order, become
// U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
std::string byte_level(const std::string& raw) {
  auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b != 0xAD); };
  std::string out;
  for (unsigned char c : raw) {
    int cp = c;
    if (!printable(c)) {
      cp = 256;
      for (int b = 0; b < c; ++b) cp += !printable(b);
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// ---- a readable BPE encoder (GPT-2 style, one pre-tokenized word at a time) ------------------

class BpeEncoder {
 public:
  explicit BpeEncoder(const ReadVocab& r) : r_(r) {
    for (uint32_t i = 0; i < r.merges.size(); ++i) rank_.emplace(r.merges[i], i);
  }
  // `word` is already in GPT-2's byte-level alphabet (space = 'Ġ').
  std::vector<std::string> encode(const std::string& word) const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < word.size();) {  // split into code points (= byte tokens)
      size_t n = 1;
      while (i + n < word.size() && (static_cast<unsigned char>(word[i + n]) & 0xC0) == 0x80) ++n;
      parts.push_back(word.substr(i, n));
      i += n;
    }
    // Repeatedly merge the adjacent pair with the lowest rank.
    for (;;) {
      size_t best = parts.size();
      uint32_t best_rank = UINT32_MAX;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = rank_.find(parts[i] + " " + parts[i + 1]);
        if (it != rank_.end() && it->second < best_rank) {
          best = i;
          best_rank = it->second;
        }
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + best + 1);
    }
    return parts;
  }

 private:
  const ReadVocab& r_;
  std::unordered_map<std::string, uint32_t> rank_;
};

// ---- a readable SentencePiece encoder (llama.cpp's SPM algorithm, no byte fallback) --------

std::vector<std::string> spm_encode(const ReadVocab& r, const std::string& text) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
    parts.push_back(text.substr(i, n));
    i += n;
  }
  // Repeatedly merge the adjacent pair whose concatenation is the highest-scoring piece.
  for (;;) {
    size_t best = parts.size();
    float best_score = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = r.id_of.find(parts[i] + parts[i + 1]);
      if (it == r.id_of.end() || r.types[it->second] != kTokenNormal) continue;
      if (best == parts.size() || r.scores[it->second] > best_score) {
        best = i;
        best_score = r.scores[it->second];
      }
    }
    if (best == parts.size()) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  return parts;
}

// ---- BPE checks -------------------------------------------------------------------------------

// Sets *n_pad to the number of padding tokens found.
void check_bpe(const SynthVocabSpec& spec, const ReadVocab& r, uint32_t* n_pad) {
  std::set<uint32_t> special_ids;
  for (const SpecialToken& s : spec.specials) special_ids.insert(s.id);

  // The 256 byte tokens: the first 256 non-special ids, GPT-2's alphabet.
  std::vector<uint32_t> regular;
  *n_pad = 0;
  for (uint32_t i = 0; i < r.tokens.size(); ++i) {
    if (special_ids.count(i)) continue;
    if (r.types[i] == kTokenUnused) {
      EXPECT_EQ(r.tokens[i], fmt::format("[PAD{}]", i));
      ++*n_pad;
      continue;
    }
    EXPECT_EQ(r.types[i], kTokenNormal) << "token " << i;
    regular.push_back(i);
  }
  EXPECT_GE(regular.size(), 256u);
  std::set<std::string> bytes;
  for (size_t k = 0; k < 256 && k < regular.size(); ++k) {
    EXPECT_EQ(n_chars(r.tokens[regular[k]]), 1u) << r.tokens[regular[k]];
    bytes.insert(r.tokens[regular[k]]);
  }
  EXPECT_EQ(bytes.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_TRUE(bytes.count(byte_level(std::string(1, char(b))))) << b;
  EXPECT_EQ(r.tokens[regular[0]], "!");  // GPT-2 order: printable bytes first

  // Merges: parts and result exist, the result is newer than its parts and made by one merge.
  std::unordered_set<std::string> results;
  for (const std::string& m : r.merges) {
    const size_t sp = m.find(' ', 1);  // how llama.cpp splits a merge
    ASSERT_NE(sp, std::string::npos) << m;
    ASSERT_EQ(m.find(' ', sp + 1), std::string::npos) << m;
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1), ab = a + b;
    auto ia = r.id_of.find(a), ib = r.id_of.find(b), iab = r.id_of.find(ab);
    ASSERT_TRUE(ia != r.id_of.end() && ib != r.id_of.end() && iab != r.id_of.end()) << m;
    EXPECT_GT(iab->second, ia->second) << m;
    EXPECT_GT(iab->second, ib->second) << m;
    EXPECT_EQ(r.types[ia->second], kTokenNormal) << m;
    EXPECT_EQ(r.types[ib->second], kTokenNormal) << m;
    EXPECT_EQ(r.types[iab->second], kTokenNormal) << m;
    EXPECT_TRUE(results.insert(ab).second) << "two merges make " << ab;
  }
  // ... and every regular token beyond the bytes is made by a merge.
  EXPECT_EQ(r.merges.size(), regular.size() - 256);

  // The table tokenizes: built-in words are single tokens; anything round-trips.
  ASSERT_EQ(byte_level(" \n"), "\xC4\xA0\xC4\x8A");  // 'Ġ', 'Ċ'
  BpeEncoder enc(r);
  for (const char* w :
       {" the", "the", " Hello", " world", "Hello", " quick", " brown", " fox", " function",
        " return", "    ", "\n\n", "123", "45", "();", "caf\xC3\xA9", "\xE4\xBD\xA0\xE5\xA5\xBD"}) {
    auto t = enc.encode(byte_level(w));
    EXPECT_EQ(t.size(), 1u) << w << " -> " << t.size() << " tokens";
  }
  for (const char* w : {" xyzzyq", "Qwq\xC3\xA9!", "\xF0\x9F\x98\x80 \x01\xFF"}) {
    std::string joined;
    for (const std::string& t : enc.encode(byte_level(w))) {
      EXPECT_TRUE(r.id_of.count(t)) << t;
      joined += t;
    }
    EXPECT_EQ(joined, byte_level(w));
  }
}

// ---- SentencePiece checks --------------------------------------------------------------------

// `words`: whether the vocabulary is large enough to hold the built-in words.
void check_spm(const SynthVocabSpec& spec, const ReadVocab& r, bool words) {
  ASSERT_EQ(r.scores.size(), spec.n_vocab);
  EXPECT_EQ(r.tokens[0], "<unk>");
  EXPECT_EQ(r.types[0], kTokenUnknown);
  EXPECT_EQ(r.tokens[1], "<s>");
  EXPECT_EQ(r.types[1], kTokenControl);
  EXPECT_EQ(r.tokens[2], "</s>");
  EXPECT_EQ(r.types[2], kTokenControl);
  for (int b = 0; b < 256; ++b) {
    auto it = r.id_of.find(fmt::format("<0x{:02X}>", b));
    ASSERT_NE(it, r.id_of.end()) << b;
    EXPECT_EQ(r.types[it->second], kTokenByte);
  }
  std::vector<std::string> chars = {kSpmSpace};
  for (char c = '!'; c <= '~'; ++c) chars.emplace_back(1, c);
  for (const std::string& c : chars) {
    auto it = r.id_of.find(c);
    ASSERT_NE(it, r.id_of.end()) << c;
    EXPECT_EQ(r.types[it->second], kTokenNormal) << c;
  }
  // Every longer piece is reachable: some split into two pieces that are older (smaller id)
  // and merged earlier (higher score).
  for (uint32_t i = 0; i < r.tokens.size(); ++i) {
    if (r.types[i] != kTokenNormal || n_chars(r.tokens[i]) < 2) continue;
    const std::string& t = r.tokens[i];
    bool reachable = false;
    for (size_t cut = 1; cut < t.size() && !reachable; ++cut) {
      if ((static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) continue;
      auto a = r.id_of.find(t.substr(0, cut)), b = r.id_of.find(t.substr(cut));
      reachable = a != r.id_of.end() && b != r.id_of.end() && a->second < i && b->second < i &&
                  r.types[a->second] == kTokenNormal && r.types[b->second] == kTokenNormal &&
                  (n_chars(a->first) == 1 || r.scores[a->second] > r.scores[i]) &&
                  (n_chars(b->first) == 1 || r.scores[b->second] > r.scores[i]);
    }
    ASSERT_TRUE(reachable) << "piece " << i << " '" << t << "'";
  }
  if (!words) return;
  // The scores tokenize: built-in words are single pieces.
  for (const std::string& w : {kSpmSpace + "the", kSpmSpace + "Hello", kSpmSpace + "world",
                               std::string("the"), kSpmSpace + "function"}) {
    EXPECT_EQ(spm_encode(r, w).size(), 1u) << w;
  }
  auto t = spm_encode(r, kSpmSpace + "Hello" + kSpmSpace + "world");
  EXPECT_EQ(t, (std::vector<std::string>{kSpmSpace + "Hello", kSpmSpace + "world"}));
}

// ---- tests ------------------------------------------------------------------------------------

TEST(SynthVocab, Llama3) {
  const SynthVocabSpec spec = llama3_spec();
  ReadVocab r = write_and_read(spec, "synth_vocab_llama3");
  check_common(spec, r);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(r.tokens[128000], "<|begin_of_text|>");
  EXPECT_EQ(r.tokens[128006], "<|start_header_id|>");
  EXPECT_EQ(r.tokens[128007], "<|end_header_id|>");
  EXPECT_EQ(r.tokens[128009], "<|eot_id|>");
  EXPECT_EQ(r.tokens[128255], "<|reserved_special_token_247|>");
  uint32_t n_pad = 1;
  check_bpe(spec, r, &n_pad);
  EXPECT_EQ(n_pad, 0u);
  // Llama 3 groups digits by up to three.
  EXPECT_TRUE(r.id_of.count("999"));
}

TEST(SynthVocab, Qwen25PadsAboveTheSpecials) {
  const SynthVocabSpec spec = qwen25_spec();
  ReadVocab r = write_and_read(spec, "synth_vocab_qwen25");
  check_common(spec, r);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(r.tokens[151643], "<|endoftext|>");
  EXPECT_EQ(r.tokens[151645], "<|im_end|>");
  EXPECT_EQ(r.types[151657], kTokenUserDefined);  // <tool_call>
  EXPECT_EQ(r.tokens[151664], "<|file_sep|>");
  EXPECT_EQ(r.tokens[151665], "[PAD151665]");
  EXPECT_EQ(r.tokens[151935], "[PAD151935]");
  EXPECT_EQ(r.types[151935], kTokenUnused);
  EXPECT_EQ(r.types[151642], kTokenNormal);
  uint32_t n_pad = 0;
  check_bpe(spec, r, &n_pad);
  EXPECT_EQ(n_pad, 151936u - 151665u);
}

TEST(SynthVocab, SmolLM2SpecialsFirst) {
  const SynthVocabSpec spec = smollm2_spec();
  ReadVocab r = write_and_read(spec, "synth_vocab_smollm2");
  check_common(spec, r);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(r.tokens[0], "<|endoftext|>");
  EXPECT_EQ(r.tokens[16], "<empty_output>");
  EXPECT_EQ(r.tokens[17], "!");  // byte tokens follow the specials
  EXPECT_EQ(r.types[49151], kTokenNormal);
  uint32_t n_pad = 1;
  check_bpe(spec, r, &n_pad);
  EXPECT_EQ(n_pad, 0u);
}

TEST(SynthVocab, MistralV03SentencePiece) {
  const SynthVocabSpec spec = mistral_v03_spec();
  ReadVocab r = write_and_read(spec, "synth_vocab_mistral");
  check_common(spec, r);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(r.tokens[3], "[INST]");
  EXPECT_EQ(r.tokens[4], "[/INST]");
  EXPECT_EQ(r.tokens[770], "[control_768]");
  EXPECT_EQ(r.tokens[771], "<0x00>");  // byte tokens right after the control tokens
  EXPECT_EQ(r.tokens[1026], "<0xFF>");
  EXPECT_EQ(r.types[32767], kTokenNormal);
  check_spm(spec, r, /*words=*/true);
}

TEST(SynthVocab, TinySentencePieceWithoutSpecials) {
  SynthVocabSpec spec;
  spec.model = "llama";
  spec.n_vocab = 512;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  ReadVocab r = write_and_read(spec, "synth_vocab_tiny_spm");
  check_common(spec, r);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(r.tokens[3], "<0x00>");
  check_spm(spec, r, /*words=*/false);
}

TEST(SynthVocab, DeterministicAndFast) {
  const SynthVocabSpec spec = qwen25_spec();
  const auto t0 = std::chrono::steady_clock::now();
  auto a = build_synth_vocab(spec);
  const auto t1 = std::chrono::steady_clock::now();
  auto b = build_synth_vocab(spec);
  ASSERT_TRUE(a.has_value()) << a.status().message();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->merges, b->merges);
  EXPECT_EQ(a->token_types, b->token_types);
  std::printf("151936-token vocabulary built in %.3f s\n",
              std::chrono::duration<double>(t1 - t0).count());
}

TEST(SynthVocab, RejectsBadSpecs) {
  auto bad = [](auto edit) {
    SynthVocabSpec s = smollm2_spec();
    edit(s);
    auto v = build_synth_vocab(s);
    return !v.has_value() && v.status().code() == Code::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.model = "wordpiece"; }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.pre.clear(); }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.n_vocab = 0; }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.specials.push_back({49152, "<x>"}); }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.specials.push_back({16, "<again>"}); }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.specials.push_back({100, "<|im_end|>"}); }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.specials.push_back({100, "a"}); }));  // a byte token
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.eos_id = 60000; }));
  EXPECT_TRUE(bad([](SynthVocabSpec& s) { s.n_vocab = 200; }));  // no room for the byte tokens
  EXPECT_FALSE(bad([](SynthVocabSpec& s) {}));
}

// Every `sustain synth` preset must have a vocabulary that builds.
TEST(SynthVocab, EveryPresetBuilds) {
  for (const Preset& p : presets()) {
    auto v = build_synth_vocab(p.vocab);
    EXPECT_TRUE(v.has_value()) << p.name << ": " << v.status().message();
    if (v) {
      EXPECT_EQ(v->tokens.size(), p.arch.n_vocab) << p.name;
    }
  }
}

TEST(SynthVocab, ChatTemplatesMatchTheReferenceFiles) {
  SUSTAIN_REQUIRE_REF();
  const std::pair<std::string_view, const char*> cases[] = {
      {kChatTemplateLlama31, "meta-llama-Llama-3.1-8B-Instruct.jinja"},
      {kChatTemplateLlama32, "meta-llama-Llama-3.2-3B-Instruct.jinja"},
      {kChatTemplateQwen25, "Qwen-Qwen2.5-7B-Instruct.jinja"},
      {kChatTemplateQwen3, "Qwen-Qwen3-0.6B.jinja"}};
  for (const auto& [embedded, file] : cases) {
    std::ifstream in(test::ref_path(std::string("templates/") + file), std::ios::binary);
    ASSERT_TRUE(in) << file;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(embedded, ss.str()) << file;
  }
}

}  // namespace
}  // namespace sustain::tools

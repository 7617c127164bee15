// Tokenizer unit tests that need no reference data: vocabularies built here,
// invalid input, streaming decode.
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace sustain {
namespace {

using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;

// A small byte-level BPE vocabulary: the 256 byte characters, a few merges
// and two special tokens.
Tokenizer make_bpe(const std::string& pre = "gpt-2", bool nfc = false) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(tokenizer::unicode::byte_to_unicode(b));
  std::vector<std::string> merges = {"h e", "l l",   "he ll",  "hell o", "Ġ w",
                                     "o r", "Ġw or", "Ġwor l", "Ġworl d"};
  for (const auto& m : merges) {
    const size_t sp = m.find(' ');
    tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  tokens.push_back("<|endoftext|>");
  tokens.push_back("<|im_end|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types[types.size() - 2] = 3;
  types[types.size() - 1] = 3;
  gguf::Writer w;
  w.set_str("tokenizer.ggml.model", "gpt2");
  w.set_str("tokenizer.ggml.pre", pre);
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array(merges));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 2));
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokens.size() - 2));
  if (nfc) w.set_bool("tokenizer.sustain.nfc", true);
  const std::string path = test::tmp_path("tok_bpe_" + pre + (nfc ? "_nfc" : "") + ".gguf");
  EXPECT_TRUE(w.write(path).is_ok());
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  auto t = Tokenizer::from_gguf(*f);
  EXPECT_TRUE(t.has_value()) << t.status().message();
  return std::move(t).value();
}

TEST(Tokenizer, BpeMergesAndSpecials) {
  Tokenizer t = make_bpe();
  auto ids = t.encode("hello world<|endoftext|>", false, true);
  ASSERT_TRUE(ids.has_value());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ(t.token_to_piece((*ids)[0]), "hello");
  EXPECT_EQ(t.token_to_piece((*ids)[1]), " world");
  EXPECT_EQ((*ids)[2], t.eos());
  EXPECT_TRUE(t.is_eog(t.eos()));
  EXPECT_TRUE(t.is_eog(t.n_vocab() - 1));  // <|im_end|>, recognised by its text
  EXPECT_EQ(t.eot(), t.n_vocab() - 1);
  // Without parse_special the special token's text is ordinary text.
  auto plain = t.encode("<|endoftext|>", false, false);
  ASSERT_TRUE(plain.has_value());
  EXPECT_GT(plain->size(), 1u);
  EXPECT_EQ(t.decode(*plain), "<|endoftext|>");
  EXPECT_EQ(t.token_to_piece(t.eos(), false), "");
}

TEST(Tokenizer, InvalidUtf8IsAnErrorWithOffset) {
  Tokenizer t = make_bpe();
  for (const auto& [text, offset] :
       std::vector<std::pair<std::string, size_t>>{{"ab\xff", 2},
                                                   {"\xc3", 0},              // truncated
                                                   {"x\xc0\xaf", 1},         // overlong '/'
                                                   {"ok \xed\xa0\x80", 3},   // surrogate U+D800
                                                   {"\xf4\x90\x80\x80", 0},  // above U+10FFFF
                                                   {"\xe2\x82", 0}}) {       // truncated 3-byte
    auto ids = t.encode(text, false, false);
    ASSERT_FALSE(ids.has_value()) << test::tmp_path("");
    EXPECT_NE(ids.status().message().find("offset " + std::to_string(offset)), std::string::npos)
        << ids.status().message();
  }
}

TEST(Tokenizer, UnknownPreTokenizerIsAnErrorListingSupported) {
  gguf::Writer w;
  w.set_str("tokenizer.ggml.model", "gpt2");
  w.set_str("tokenizer.ggml.pre", "no-such-pre");
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array({"a", "b", "ab"}));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array({"a b"}));
  const std::string path = test::tmp_path("tok_badpre.gguf");
  ASSERT_TRUE(w.write(path).is_ok());
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.has_value());
  auto t = Tokenizer::from_gguf(*f);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("no-such-pre"), std::string::npos);
  EXPECT_NE(t.status().message().find("llama-bpe"), std::string::npos);
  EXPECT_NE(t.status().message().find("qwen2"), std::string::npos);
}

TEST(Tokenizer, StreamDecoderNeverSplitsACharacter) {
  Tokenizer t = make_bpe();
  // "é" (C3 A9) and "🦙" (F0 9F A6 99) are two and four byte tokens here,
  // one token per byte since no merge joins them.
  auto ids = t.encode("h\xc3\xa9 \xf0\x9f\xa6\x99!", false, false);
  ASSERT_TRUE(ids.has_value());
  StreamDecoder d(t);
  std::vector<std::string> outs;
  std::string all;
  for (int32_t id : *ids) {
    std::string s = d.push(id);
    EXPECT_EQ(tokenizer::unicode::find_invalid_utf8(s), std::string_view::npos)
        << "emitted a partial character";
    outs.push_back(s);
    all += s;
  }
  all += d.flush();
  EXPECT_EQ(all, "h\xc3\xa9 \xf0\x9f\xa6\x99!");
  // The first byte of é produces nothing; the second completes it.
  ASSERT_GE(outs.size(), 3u);
  EXPECT_EQ(outs[1], "");
  EXPECT_EQ(outs[2], "\xc3\xa9");
}

TEST(Tokenizer, StreamDecoderFlushesAnUnfinishedCharacter) {
  Tokenizer t = make_bpe();
  StreamDecoder d(t);
  auto ids = t.encode("\xf0\x9f\xa6\x99", false, false);
  ASSERT_TRUE(ids.has_value());
  ASSERT_EQ(ids->size(), 4u);
  EXPECT_EQ(d.push((*ids)[0]), "");
  EXPECT_EQ(d.push((*ids)[1]), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, NfcWhenTheVocabularySaysSo) {
  Tokenizer plain = make_bpe("qwen2", false);
  Tokenizer nfc = make_bpe("qwen2", true);
  // "e" + U+0301 composes to U+00E9.
  auto a = nfc.encode("e\xcc\x81", false, false);
  auto b = nfc.encode("\xc3\xa9", false, false);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(tokenizer::unicode::nfc("e\xcc\x81"), "\xc3\xa9");
  EXPECT_EQ(tokenizer::unicode::nfc("\xe1\x84\x80\xe1\x85\xa1"), "\xea\xb0\x80");  // Hangul L+V
}

TEST(Tokenizer, PreTokenizerSplits) {
  using tokenizer::pre_tokenize;
  using tokenizer::PreType;
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(PreType::kGpt2, "Hello world's  123 !!"),
            (V{"Hello", " world", "'s", " ", " 123", " !!"}));
  EXPECT_EQ(pre_tokenize(PreType::kLlama3, "12345 ab\n\n  x"),
            (V{"123", "45", " ab", "\n\n", " ", " x"}));
  EXPECT_EQ(pre_tokenize(PreType::kQwen2, "x12 'LL"), (V{"x", "1", "2", " '", "LL"}));
  EXPECT_EQ(pre_tokenize(PreType::kLlama3, "I'LL"), (V{"I", "'LL"}));
}

}  // namespace
}  // namespace sustain

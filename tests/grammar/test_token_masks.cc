// Token masks from the sorted-vocabulary walk against a brute force (each
// token tried on its own matcher), on random grammars, random vocabularies
// with split UTF-8 and byte tokens, and at every step of random walks; the
// cache; end-of-generation tokens; and the sampling constraint built on it.
#include <gtest/gtest.h>

#include <random>

#include "grammar/constraint.h"
#include "grammar/schema.h"
#include "grammar/token_masks.h"
#include "grammar_test_util.h"
#include "sampling/sampler.h"

namespace sustain::grammar {
namespace {

using test::gbnf;

std::vector<std::string> random_vocab(std::mt19937& rng, int n) {
  const std::vector<std::string> atoms = {
      "{", "}",    "[",    "]", ",",        ":",        "\"", " ", "\n",   "a",
      "b", "ab",   "1",    "2", "0",        "-",        ".",  "e", "true", "null",
      "é", "\xC3", "\xA9", "😀", "\xF0\x9F", "\x98\x80", "\\", "n", "u",    "x"};
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));  // byte tokens
  while (static_cast<int>(v.size()) < n) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < len; ++k) t += atoms[rng() % atoms.size()];
    v.push_back(t);
  }
  v.push_back("");  // a control token: never allowed
  return v;
}

// Brute force: token t is allowed iff the matcher after `history` takes it.
TokenMask brute(const std::shared_ptr<const Grammar>& g, const std::string& history,
                const TokenVocab& v) {
  TokenMask out((static_cast<size_t>(v.n_vocab()) + 31) / 32, 0);
  bool any = false;
  Matcher base(g);
  EXPECT_TRUE(base.advance(history));
  for (int32_t id = 0; id < v.n_vocab(); ++id) {
    if (v.piece(id).empty()) continue;
    Matcher m(g);
    m.advance(history);
    if (m.advance(v.piece(id))) {
      out[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
      any = true;
    }
  }
  if (base.state().can_end || !any)
    for (int32_t id : v.eog()) out[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  return out;
}

void random_walks(const std::string& grammar_text, uint32_t seed) {
  auto g = gbnf(grammar_text);
  ASSERT_TRUE(g);
  std::mt19937 rng(seed);
  auto pieces = random_vocab(rng, 600);
  const int32_t eog = static_cast<int32_t>(pieces.size() - 1);
  auto vocab = std::make_shared<const TokenVocab>(pieces, std::vector<int32_t>{eog});
  for (int walk = 0; walk < 6; ++walk) {
    Matcher m(g);
    TokenMasker masker(vocab);
    std::string history;
    for (int step = 0; step < 40; ++step) {
      const TokenMask mask = masker.mask(m);
      ASSERT_EQ(mask, brute(g, history, *vocab)) << "after '" << history << "'";
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->n_vocab(); ++id)
        if (mask_has(mask, id) && id != eog) allowed.push_back(id);
      if (allowed.empty()) break;
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.advance(vocab->piece(t)));
      history += vocab->piece(t);
    }
  }
}

TEST(TokenMasks, MatchBruteForceOnJson) {
  random_walks(json_value_gbnf(), 1);
}

TEST(TokenMasks, MatchBruteForceOnUtf8Grammar) {
  random_walks(R"(root ::= ( "é" | "😀" | [a-b]+ | "\"" [^"]* "\"" )* "}")", 2);
}

TEST(TokenMasks, MatchBruteForceOnNumbers) {
  random_walks(R"(root ::= "[" ( "-"? [0-9]{1,3} ( "," "-"? [0-9]{1,3} )* )? "]")", 3);
}

TEST(TokenMasks, EndOfGenerationOnlyAtTheEnd) {
  auto g = gbnf(R"(root ::= "ab" "c"?)");
  auto vocab = std::make_shared<const TokenVocab>(
      std::vector<std::string>{"a", "b", "c", "ab", "abc", "<eos>"}, std::vector<int32_t>{5});
  Matcher m(g);
  TokenMasker masker(vocab);
  auto allowed = [&] {
    std::vector<int32_t> out;
    const TokenMask& mask = masker.mask(m);
    for (int32_t id = 0; id < vocab->n_vocab(); ++id)
      if (mask_has(mask, id)) out.push_back(id);
    return out;
  };
  EXPECT_EQ(allowed(), (std::vector<int32_t>{0, 3, 4}));
  ASSERT_TRUE(m.advance("ab"));
  EXPECT_EQ(allowed(), (std::vector<int32_t>{2, 5}));
  ASSERT_TRUE(m.advance("c"));
  EXPECT_EQ(allowed(), (std::vector<int32_t>{5}));
  // A state seen before is a cache hit, not a new walk.
  Matcher again(g);
  const auto hits = masker.stats().cache_hits, computed = masker.stats().computed;
  masker.mask(again);
  masker.mask(again);
  EXPECT_EQ(masker.stats().cache_hits, hits + 2);
  EXPECT_EQ(masker.stats().computed, computed);
}

TEST(TokenMasks, WalkReadsKnownTransitionsFromTheTable) {
  // Inside a string every plain character leads back to the same state, so
  // a vocabulary of many long plain tokens needs only a few matcher steps:
  // one per distinct (state, byte), not one per byte walked.
  auto g = gbnf(json_value_gbnf());
  std::vector<std::string> pieces;
  for (int i = 0; i < 2000; ++i) pieces.push_back("w" + std::to_string(i * 7919) + "xyz");
  pieces.push_back("\"");
  auto vocab = std::make_shared<const TokenVocab>(pieces, std::vector<int32_t>{});
  Matcher m(g);
  ASSERT_TRUE(m.advance("\"abc"));
  TokenMasker masker(vocab);
  const TokenMask& mask = masker.mask(m);
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) EXPECT_TRUE(mask_has(mask, id)) << id;
  EXPECT_GT(masker.stats().transitions, 10000u);
  EXPECT_LT(masker.stats().steps, 40u);
}

TEST(TokenMasks, SharedAcrossMatchersByStateContent) {
  // Two matchers reach the same states by different paths (so with
  // different node ids); the second finds the first's masks by content, and
  // they are the masks the brute force gives.
  auto g = gbnf(R"(root ::= "{" item* "}"
item ::= [ab] | "\"" [^"]* "\"" | "[" item* "]")");
  std::mt19937 rng(9);
  auto vocab =
      std::make_shared<const TokenVocab>(random_vocab(rng, 400), std::vector<int32_t>{399});
  auto shared = std::make_shared<SharedMasks>();
  Matcher a(g), b(g);
  TokenMasker ma(vocab, shared), mb(vocab, shared);
  ASSERT_TRUE(a.advance("{ab\"x"));
  ASSERT_TRUE(b.advance("{[[a]\"q\"]b"));  // other states first: other ids
  ASSERT_TRUE(b.advance("\"z"));
  EXPECT_NE(a.state().tops, b.state().tops);
  const TokenMask first = ma.mask(a);
  EXPECT_EQ(ma.stats().computed, 1u);
  const TokenMask second = mb.mask(b);
  EXPECT_EQ(mb.stats().shared_hits, 1u);
  EXPECT_EQ(mb.stats().computed, 0u);
  EXPECT_EQ(first, second);
  EXPECT_EQ(second, brute(g, "{[[a]\"q\"]b\"z", *vocab));
  // A different state is not confused with it.
  ASSERT_TRUE(b.advance("\""));
  EXPECT_EQ(mb.mask(b), brute(g, "{[[a]\"q\"]b\"z\"", *vocab));
  EXPECT_EQ(mb.stats().computed, 1u);
}

TEST(GrammarConstraint, StartableAndSampling) {
  auto vocab = std::make_shared<const TokenVocab>(
      std::vector<std::string>{"x", "{", "}", "\"a\"", ":", "1", "<eos>", " "},
      std::vector<int32_t>{6});
  auto obj = std::make_shared<const Grammar>(*parse_gbnf(json_object_gbnf()));
  GrammarConstraint ok(obj, vocab);
  EXPECT_TRUE(ok.check_startable().is_ok());
  GrammarConstraint none(gbnf(R"(root ::= "y")"), vocab);
  EXPECT_NE(none.check_startable().message().find("no token"), std::string::npos);
  GrammarConstraint nothing(gbnf(R"(root ::= [^\x00-\U0010FFFF])"), vocab);
  EXPECT_NE(nothing.check_startable().message().find("no token"), std::string::npos);
  GrammarConstraint empty(gbnf(R"(root ::= "")"), vocab);
  EXPECT_TRUE(empty.check_startable().is_ok());

  // The sampler never draws a token the grammar refuses, whatever the
  // logits say: "x" has by far the highest logit here.
  for (float temp : {0.0f, 1.0f}) {
    sampling::SamplerConfig cfg;
    cfg.temperature = temp;
    cfg.top_k = 0;
    cfg.top_p = 1.0f;
    cfg.min_p = 0.0f;
    cfg.seed = 5;
    cfg.constraint = std::make_shared<GrammarConstraint>(obj, vocab);
    sampling::Sampler s(cfg);
    std::vector<float> logits = {50.0f, 0.0f, 0.0f, 1.0f, 0.5f, 0.3f, 0.0f, 0.2f};
    std::string text;
    bool ended = false;
    for (int i = 0; i < 50 && !ended; ++i) {
      const int32_t t = s.sample(logits.data(), static_cast<int32_t>(logits.size()));
      ended = t == 6;
      if (!ended) text += vocab->piece(t);
    }
    if (temp == 0.0f) {
      EXPECT_TRUE(ended);
    }
    // Ended: a whole object; cut off at 50 tokens: the start of one.
    EXPECT_TRUE(ended ? test::accepts(obj, text) : test::prefix_ok(obj, text)) << text;
  }
}

}  // namespace
}  // namespace sustain::grammar

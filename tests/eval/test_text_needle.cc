// Text needle cases (eval/text_needle.h): the generator with a byte-level
// tokenizer (so every token is one byte of the prompt and positions can be
// checked in the text), with real vocabularies from ../shared/ref, the greedy
// answer against llama.cpp's greedy tokens, and `sustain eval needle
// --haystack` through the real binary.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"
#include "eval/runner.h"
#include "eval/text_needle.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace sustain::eval {
namespace {

constexpr int32_t kBos = 1;

// One token per byte (id = byte + 3), so token i of a prompt is byte i − 1
// of its text (after BOS).
Expected<std::vector<int32_t>> byte_tokens(std::string_view s) {
  std::vector<int32_t> out;
  for (unsigned char ch : s) out.push_back(int32_t{ch} + 3);
  return out;
}

std::string byte_text(const std::vector<int32_t>& ids, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to; ++i)
    if (ids[i] >= 3) s += static_cast<char>(ids[i] - 3);
  return s;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

const char* kStory =
    "The morning was cold and the lake was still. A heron stood in the reeds, watching the water! "
    "Nobody in the village had seen it arrive. Was it lost, or had it come back to stay? The "
    "children argued about it all week.\n\nBy Friday the heron was gone, and the lake was 2.5 "
    "degrees warmer.";

Haystack story() {
  auto h = split_haystack(kStory, "story.txt");
  EXPECT_TRUE(h.has_value()) << h.status().message();
  return std::move(h).value();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TextNeedle, HaystackSplitsAtSentenceEnds) {
  auto h = split_haystack("It is 3.5 m  tall!\nIs it? \"Yes.\" (Sure.) The end", "h.txt");
  ASSERT_TRUE(h.has_value()) << h.status().message();
  const std::vector<std::string> want = {"It is 3.5 m tall!", "Is it?", "\"Yes.\"", "(Sure.)",
                                         "The end"};
  EXPECT_EQ(h->sentences, want);
  EXPECT_EQ(story().sentences.size(), 6u);
}

TEST(TextNeedle, BadHaystacksAreNamedErrors) {
  auto empty = split_haystack("", "empty.txt");
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.status().message().find("empty.txt"), std::string::npos);
  EXPECT_NE(empty.status().message().find("no text"), std::string::npos);
  auto blank = split_haystack(" \n\t\r\n", "blank.txt");
  ASSERT_FALSE(blank.has_value());
  EXPECT_NE(blank.status().message().find("blank.txt has no text"), std::string::npos)
      << blank.status().message();
  auto no_end = split_haystack("words and words and words, 3.5 and e.g.x but no end", "run.txt");
  ASSERT_FALSE(no_end.has_value());
  EXPECT_NE(no_end.status().message().find("run.txt has no sentence end"), std::string::npos)
      << no_end.status().message();
  auto bad = split_haystack("Fine. Then \xff broken.", "bad.txt");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("bad.txt is not valid UTF-8: byte 0xFF at offset 11"),
            std::string::npos)
      << bad.status().message();
  // A truncated multi-byte character and an overlong encoding.
  EXPECT_FALSE(split_haystack("Cut \xe2\x82", "cut.txt").has_value());
  EXPECT_FALSE(split_haystack("Over \xc0\xaf long.", "over.txt").has_value());
  EXPECT_TRUE(split_haystack("Caf\xc3\xa9 \xe2\x82\xac 5.", "ok.txt").has_value());
}

TEST(TextNeedle, ExactlyOneNeedleAtTheDepthWithTheDistractors) {
  TextNeedleSpec spec;
  spec.ctx = {700, 1500, 4000};
  spec.depths = {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0};
  spec.trials = 4;
  spec.distractors = 3;
  spec.seed = 11;
  spec.bos = kBos;
  const Haystack hay = story();
  auto cases = generate_text_needle_cases(spec, hay, byte_tokens);
  ASSERT_TRUE(cases.has_value()) << cases.status().message();
  ASSERT_EQ(cases->size(), 3u * 7u * 4u);
  std::set<std::string> values_seen;
  for (const TextNeedleCase& t : *cases) {
    const NeedleCase& c = t.c;
    SCOPED_TRACE(c.tag);
    ASSERT_EQ(static_cast<int64_t>(c.ids.size()), c.ctx);
    EXPECT_EQ(c.ids.front(), kBos);
    EXPECT_EQ(c.tag, fmt::format("{}:{}:{}", c.ctx, c.depth, c.needle_pos));
    const std::string prompt = byte_text(c.ids, 1, c.ids.size());
    const std::string body =
        byte_text(c.ids, static_cast<size_t>(t.body_begin), static_cast<size_t>(t.body_end));
    const std::string needle = byte_text(c.ids, static_cast<size_t>(c.needle_pos),
                                         static_cast<size_t>(c.needle_pos + t.needle_len));
    // The needle: one sentence holding the key and the 7-digit value.
    ASSERT_EQ(t.value.size(), 7u);
    EXPECT_TRUE(std::all_of(t.value.begin(), t.value.end(), ::isdigit));
    EXPECT_EQ(t.value.find(' '), std::string::npos);
    EXPECT_NE(needle.find(t.key), std::string::npos) << needle;
    EXPECT_NE(needle.find(t.value), std::string::npos) << needle;
    EXPECT_EQ(needle.front(), ' ');
    EXPECT_EQ(needle.back(), '.');
    // Exactly once in the whole prompt (value) and in the body (key); the
    // question names the key and ends with the answer prefix, not the value.
    EXPECT_EQ(count(prompt, t.value), 1u);
    EXPECT_EQ(count(body, t.key), 1u);
    EXPECT_GE(count(prompt.substr(static_cast<size_t>(t.body_end - 1)), t.key), 1u);
    EXPECT_EQ(count(kStory, t.value), 0u);
    EXPECT_TRUE(prompt.ends_with(" is") || prompt.ends_with(" number"))
        << prompt.substr(prompt.size() - 40);
    // The requested distractors: other keys, other values, each once, each a whole sentence.
    ASSERT_EQ(t.distractor_keys.size(), 3u);
    ASSERT_EQ(t.distractor_values.size(), 3u);
    ASSERT_EQ(t.distractor_pos.size(), 3u);
    std::set<std::string> keys = {t.key}, vals = {t.value};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NE(t.distractor_keys[i], t.key);
      keys.insert(t.distractor_keys[i]);
      vals.insert(t.distractor_values[i]);
      EXPECT_EQ(count(prompt, t.distractor_values[i]), 1u);
      EXPECT_EQ(count(prompt, t.distractor_keys[i]), 1u);
      const std::string d = byte_text(c.ids, static_cast<size_t>(t.distractor_pos[i]),
                                      static_cast<size_t>(t.distractor_pos[i] + t.needle_len + 8));
      EXPECT_NE(d.find(t.distractor_keys[i]), std::string::npos) << d;
    }
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(vals.size(), 4u);
    values_seen.insert(t.value);
    // Depth: the needle starts at a sentence boundary within one sentence of
    // depth × (body − needle) tokens into the body.
    const double target = c.depth * double(t.body_end - t.body_begin - t.needle_len);
    EXPECT_LE(std::abs(double(c.needle_pos - t.body_begin) - target), double(t.max_unit_len))
        << "needle at " << c.needle_pos << ", body " << t.body_begin << ".." << t.body_end;
    const char before = static_cast<char>(c.ids[static_cast<size_t>(c.needle_pos - 1)] - 3);
    EXPECT_NE(std::string(".!?\"')").find(before), std::string::npos)
        << "'" << before << "' before the needle";
    EXPECT_GT(t.max_unit_len, 0);
    EXPECT_LT(t.max_unit_len, 120);  // the story's longest sentence or a distractor
  }
  EXPECT_GT(values_seen.size(), cases->size() * 9 / 10);  // values are random
  // Deterministic in the seed; another seed gives other cases.
  auto again = generate_text_needle_cases(spec, hay, byte_tokens);
  ASSERT_TRUE(again.has_value());
  for (size_t i = 0; i < cases->size(); ++i) EXPECT_EQ((*again)[i].c.ids, (*cases)[i].c.ids) << i;
  spec.seed = 12;
  auto other = generate_text_needle_cases(spec, hay, byte_tokens);
  ASSERT_TRUE(other.has_value());
  EXPECT_NE((*other)[5].c.ids, (*cases)[5].c.ids);
  EXPECT_NE((*other)[5].value, (*cases)[5].value);
}

TEST(TextNeedle, PhrasingsRotateOverTrials) {
  TextNeedleSpec spec;
  spec.ctx = {600};
  spec.depths = {0.3, 0.6};
  spec.trials = 5;
  spec.phrasings = 2;
  auto two = generate_text_needle_cases(spec, story(), byte_tokens);
  ASSERT_TRUE(two.has_value()) << two.status().message();
  ASSERT_EQ(two->size(), 10u);
  for (size_t i = 0; i < two->size(); ++i) EXPECT_EQ((*two)[i].phrasing, int(i % 5) % 2) << i;
  // Every built-in phrasing is used, and each has its own words.
  spec.phrasings = 0;
  spec.trials = text_needle_phrasing_count();
  ASSERT_GE(text_needle_phrasing_count(), 3);
  auto all = generate_text_needle_cases(spec, story(), byte_tokens);
  ASSERT_TRUE(all.has_value());
  std::set<std::string> intros, questions;
  for (const auto& t : *all) {
    intros.insert(byte_text(t.c.ids, 1, static_cast<size_t>(t.body_begin)));
    questions.insert(byte_text(t.c.ids, static_cast<size_t>(t.body_end), t.c.ids.size()));
  }
  EXPECT_EQ(intros.size(), size_t(text_needle_phrasing_count()));
  EXPECT_GE(questions.size(), size_t(text_needle_phrasing_count()));
}

TEST(TextNeedle, BadSpecsAreNamedErrors) {
  const Haystack hay = story();
  TextNeedleSpec spec;
  spec.ctx = {120};
  spec.depths = {0.5};
  auto small = generate_text_needle_cases(spec, hay, byte_tokens);
  ASSERT_FALSE(small.has_value());
  EXPECT_NE(small.status().message().find("context 120 is too small"), std::string::npos)
      << small.status().message();
  spec.ctx = {2000};
  spec.depths = {1.5};
  auto depth = generate_text_needle_cases(spec, hay, byte_tokens);
  ASSERT_FALSE(depth.has_value());
  EXPECT_NE(depth.status().message().find("depth 1.5"), std::string::npos);
  spec.depths = {0.5};
  spec.phrasings = 99;
  auto phr = generate_text_needle_cases(spec, hay, byte_tokens);
  ASSERT_FALSE(phr.has_value());
  EXPECT_NE(phr.status().message().find("--phrasings 99"), std::string::npos);
  spec.phrasings = 0;
  spec.distractors = 100000;
  EXPECT_FALSE(generate_text_needle_cases(spec, hay, byte_tokens).has_value());
  spec.distractors = 0;
  spec.trials = 0;
  EXPECT_FALSE(generate_text_needle_cases(spec, hay, byte_tokens).has_value());
  spec.trials = 1;
  spec.ctx = {0};
  EXPECT_FALSE(generate_text_needle_cases(spec, hay, byte_tokens).has_value());
  // A tokenizer error reaches the caller with what was being tokenized.
  spec.ctx = {2000};
  const PieceTokenizer failing = [](std::string_view s) -> Expected<std::vector<int32_t>> {
    if (s.find("heron") != std::string_view::npos)
      return error(Code::kInvalidArgument, "cannot tokenize");
    return byte_tokens(s);
  };
  auto tok_err = generate_text_needle_cases(spec, hay, failing);
  ASSERT_FALSE(tok_err.has_value());
  EXPECT_NE(tok_err.status().message().find("story.txt: tokenizing sentence"), std::string::npos)
      << tok_err.status().message();
  EXPECT_NE(tok_err.status().message().find("cannot tokenize"), std::string::npos);
}

tokenizer::Tokenizer ref_tokenizer(const std::string& rel) {
  auto f = gguf::File::open(test::ref_path(rel));
  EXPECT_TRUE(f.has_value()) << f.status().message();
  auto t = tokenizer::Tokenizer::from_gguf(*f);
  EXPECT_TRUE(t.has_value()) << t.status().message();
  return std::move(t).value();
}

// Pieces tokenized apart read back as the text they were cut from, for an
// SPM vocabulary that adds a space before the input, one that does not
// (llama-spm sets add_space_prefix per its metadata) and byte-level BPE.
TEST(TextNeedle, PieceTokenizerContinuesText) {
  SUSTAIN_REQUIRE_REF();
  for (const char* rel : {"models/aidreams260K-f32.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                          "vocab/ggml-vocab-gpt-2.gguf"}) {
    SCOPED_TRACE(rel);
    const tokenizer::Tokenizer tok = ref_tokenizer(rel);
    const PieceTokenizer pt = piece_tokenizer(tok);
    auto a = pt("Some numbers are hidden.");
    auto b = pt(" The code for quiet-harbor is 1234567.");
    ASSERT_TRUE(a.has_value() && b.has_value());
    std::vector<int32_t> ids = *a;
    ids.insert(ids.end(), b->begin(), b->end());
    EXPECT_EQ(tok.decode(ids, false),
              "Some numbers are hidden. The code for quiet-harbor is 1234567.");
    if (tok.model() == "gpt2") {  // word pre-tokenization: pieces are exact
      auto whole = tok.encode("Some numbers are hidden. The code for quiet-harbor is 1234567.",
                              false, false);
      ASSERT_TRUE(whole.has_value());
      EXPECT_EQ(*whole, ids);
    }
  }
}

TEST(TextNeedle, RealTokenizerCasesHaveTheNeedleOnceAndExactLength) {
  SUSTAIN_REQUIRE_REF();
  const tokenizer::Tokenizer tok = ref_tokenizer("models/aidreams260K-f32.gguf");
  auto hay = split_haystack(read_text(test::ref_path("prompts/p3_long.txt")), "p3_long.txt");
  ASSERT_TRUE(hay.has_value()) << hay.status().message();
  TextNeedleSpec spec;
  spec.ctx = {700, 2048};
  spec.depths = {0.0, 0.5, 1.0};
  spec.trials = 4;
  spec.distractors = 2;
  spec.bos = tok.bos();
  auto cases = generate_text_needle_cases(spec, *hay, piece_tokenizer(tok));
  ASSERT_TRUE(cases.has_value()) << cases.status().message();
  ASSERT_EQ(cases->size(), 24u);
  for (const auto& t : *cases) {
    SCOPED_TRACE(t.c.tag);
    ASSERT_EQ(static_cast<int64_t>(t.c.ids.size()), t.c.ctx);
    EXPECT_EQ(t.c.ids[0], tok.bos());
    const std::string prompt = tok.decode(t.c.ids, false);
    EXPECT_EQ(count(prompt, t.value), 1u);
    const std::vector<int32_t> nid(t.c.ids.begin() + t.c.needle_pos,
                                   t.c.ids.begin() + t.c.needle_pos + t.needle_len);
    const std::string needle = tok.decode(nid, false);
    EXPECT_NE(needle.find(t.key), std::string::npos) << needle;
    EXPECT_NE(needle.find(t.value), std::string::npos) << needle;
    const double target = t.c.depth * double(t.body_end - t.body_begin - t.needle_len);
    EXPECT_LE(std::abs(double(t.c.needle_pos - t.body_begin) - target), double(t.max_unit_len));
  }
}

// The greedy loop against llama.cpp's 32 greedy tokens for a prompt.
TEST(TextNeedle, GreedyAnswerMatchesLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  const auto ref = nlohmann::json::parse(
      read_text(test::ref_path("logits/aidreams260K-f32.p2_medium.kvf16.json")));
  auto parse_ids = [](const nlohmann::json& v) {
    return v.is_string() ? nlohmann::json::parse(v.get<std::string>()).get<std::vector<int32_t>>()
                         : v.get<std::vector<int32_t>>();
  };
  const std::vector<int32_t> prompt = parse_ids(ref["token_ids"]);
  const nlohmann::json greedy_json = ref["greedy"].is_string()
                                         ? nlohmann::json::parse(ref["greedy"].get<std::string>())
                                         : ref["greedy"];
  const std::vector<int32_t> greedy = greedy_json["ids"].get<std::vector<int32_t>>();
  ASSERT_GE(greedy.size(), 12u);
  const tokenizer::Tokenizer tok = ref_tokenizer("models/aidreams260K-f32.gguf");
  RunnerOptions o;
  o.model = test::ref_path("models/aidreams260K-f32.gguf");
  o.ctx = static_cast<int64_t>(prompt.size()) + 16;
  auto runner = ModelRunner::open(o);
  ASSERT_TRUE(runner.has_value()) << runner.status().message();
  TextNeedleCase c;
  c.c.ids = prompt;
  c.c.ctx = static_cast<int64_t>(prompt.size());
  // A value absent from the output: all 12 tokens are generated.
  c.value = "0000000";
  auto miss = answer_text_needle(**runner, tok, c, 12);
  ASSERT_TRUE(miss.has_value()) << miss.status().message();
  EXPECT_FALSE(miss->correct);
  EXPECT_EQ(miss->tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + 12));
  EXPECT_EQ(miss->text, tok.decode(miss->tokens, false));
  // The text of the first 5 greedy tokens: found, and generation stops there.
  c.value = tok.decode(std::vector<int32_t>(greedy.begin(), greedy.begin() + 5), false);
  auto hit = answer_text_needle(**runner, tok, c, 12);
  ASSERT_TRUE(hit.has_value()) << hit.status().message();
  EXPECT_TRUE(hit->correct) << hit->text;
  EXPECT_LE(hit->tokens.size(), 5u);
  EXPECT_EQ(answer_text_needle(**runner, tok, c, 0).has_value(), false);
}

}  // namespace
}  // namespace sustain::eval

namespace sustain::test {
namespace {

std::string write_haystack(const std::string& name, const std::string& text) {
  const std::string p = tmp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

TEST(TextNeedleCli, RunsOnATinyModelAndPrintsTheTable) {
  SUSTAIN_REQUIRE_REF();
  const std::string m = ref_path("models/aidreams260K-f32.gguf");
  const std::string hay = ref_path("prompts/p3_long.txt");
  const std::string cases = tmp_path("text-cases.jsonl");
  const std::string html = tmp_path("text-needle.html");
  const CliResult r = run_cli("eval needle -m " + m + " --haystack " + hay +
                              " --ctx 512,768 --depths 0.25,0.75 --trials 3 --distractors 1 -t 2 "
                              "--json --per-case --write-cases " +
                              cases + " --html " + html);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["total"], 2 * 2 * 3);
  EXPECT_GE(j["correct"].get<int>(), 0);
  ASSERT_EQ(j["cells"].size(), 4u);
  for (const auto& c : j["cells"]) EXPECT_EQ(c["total"], 3);
  ASSERT_EQ(j["configs"].size(), 1u);
  const auto& per = j["configs"][0]["cases"];
  ASSERT_EQ(per.size(), 12u);
  int correct = 0;
  for (const auto& c : per) {
    const std::string value = c["value"], generated = c["generated"];
    EXPECT_EQ(value.size(), 7u);
    EXPECT_EQ(c["correct"].get<bool>(), generated.find(value) != std::string::npos) << generated;
    correct += c["correct"].get<bool>();
  }
  EXPECT_EQ(j["correct"], correct);
  // The written cases: one JSON object per line, the same tags.
  std::ifstream in(cases);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    const auto c = nlohmann::json::parse(line);
    EXPECT_EQ(c["tag"], per[n]["tag"]);
    EXPECT_NE(c["prompt"].get<std::string>().find(c["value"].get<std::string>()),
              std::string::npos);
    ++n;
  }
  EXPECT_EQ(n, 12u);
  std::ifstream h(html);
  std::stringstream hs;
  hs << h.rdbuf();
  EXPECT_NE(hs.str().find("<table>"), std::string::npos);
}

TEST(TextNeedleCli, BadFlagsAreNamedErrors) {
  SUSTAIN_REQUIRE_REF();
  const std::string m = ref_path("models/aidreams260K-f32.gguf");
  const CliResult missing =
      run_cli("eval needle -m " + m + " --haystack " + tmp_path("no-such.txt"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no-such.txt"), std::string::npos) << missing.err;
  const std::string hay = write_haystack("hay-ok.txt", "One. Two. Three.");
  const CliResult both = run_cli("eval needle -m " + m + " --haystack " + hay + " --cases " +
                                 ref_path("needle/main_L1024.txt"));
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("exclude each other"), std::string::npos) << both.err;
  const CliResult pairs =
      run_cli("eval needle -m " + m + " --haystack " + hay + " --distractor-pairs 3");
  EXPECT_NE(pairs.exit_code, 0);
  EXPECT_NE(pairs.err.find("--distractor-pairs applies to token-id cases"), std::string::npos)
      << pairs.err;
  const CliResult no_hay = run_cli("eval needle -m " + m + " --distractors 3");
  EXPECT_NE(no_hay.exit_code, 0);
  EXPECT_NE(no_hay.err.find("--distractors applies to text cases"), std::string::npos)
      << no_hay.err;
  const std::string flat = write_haystack("hay-flat.txt", "no sentence ends here at all");
  const CliResult no_end = run_cli("eval needle -m " + m + " --haystack " + flat);
  EXPECT_NE(no_end.exit_code, 0);
  EXPECT_NE(no_end.err.find("no sentence end"), std::string::npos) << no_end.err;
  const std::string bad = write_haystack("hay-bad.txt", "Bad \xfe byte.");
  const CliResult utf = run_cli("eval needle -m " + m + " --haystack " + bad);
  EXPECT_NE(utf.exit_code, 0);
  EXPECT_NE(utf.err.find("not valid UTF-8"), std::string::npos) << utf.err;
  const CliResult small =
      run_cli("eval needle -m " + m + " --haystack " + hay + " --ctx 64 --depths 0.5");
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(small.err.find("context 64 is too small"), std::string::npos) << small.err;
}

}  // namespace
}  // namespace sustain::test

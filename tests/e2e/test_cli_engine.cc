// End to end: `sustain run`, `logits` and `tokenize` as a user runs them,
// on the reference models, including every kind of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "e2e/cli_runner.h"
#include "test_util.h"

namespace sustain::test {
namespace {

using nlohmann::json;

const std::string kAidreams = "models/aidreams260K-f32.gguf";

TEST(CliTokenize, MatchesLlamaCppIds) {
  SUSTAIN_REQUIRE_REF();
  // llama.cpp's ids for this prompt (BOS added), from the logits sidecar.
  std::ifstream js(ref_path("logits/aidreams260K-f32.p1_short.kvf16.json"));
  const json ref = json::parse(js);
  const std::string prompt = ref.at("prompt").get<std::string>();
  auto r = run_cli("tokenize -m " + ref_path(kAidreams) + " -p '" + prompt + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), ref.at("token_ids"));
  r = run_cli("tokenize --no-bos -m " + ref_path(kAidreams) + " -p '" + prompt + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto ids = json::parse(r.out);
  ASSERT_EQ(ids.size() + 1, ref.at("token_ids").size());
  r = run_cli("tokenize --pieces -m " + ref_path(kAidreams) + " -p 'Once upon'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out)[1].contains("piece"));
}

TEST(CliTokenize, InvalidUtf8IsAnError) {
  SUSTAIN_REQUIRE_REF();
  const std::string bad = tmp_path("bad_utf8.txt");
  std::ofstream(bad, std::ios::binary) << "abc\xff\xfe def";
  auto r = run_cli("tokenize -m " + ref_path(kAidreams) + " -f " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("UTF-8"), std::string::npos) << r.err;
}

TEST(CliLogits, MatchesLlamaCppAndWritesSidecar) {
  SUSTAIN_REQUIRE_REF();
  std::ifstream js(ref_path("logits/aidreams260K-f32.p2_medium.kvf16.json"));
  const json ref = json::parse(js);
  const std::string prompt_file = ref_path("prompts/p2_medium.txt");
  const std::string out = tmp_path("aid.f32");
  auto r = run_cli("logits -m " + ref_path(kAidreams) + " -f " + prompt_file + " -o " + out + " -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream side(out + ".json");
  const json j = json::parse(side);
  ASSERT_EQ(j.at("token_ids"), ref.at("token_ids"));
  const int64_t V = j.at("n_vocab").get<int64_t>();
  const auto n = j.at("n_tokens").get<int64_t>();
  std::vector<float> ours(static_cast<size_t>(n * V));
  std::ifstream bin(out, std::ios::binary);
  bin.read(reinterpret_cast<char*>(ours.data()), static_cast<std::streamsize>(ours.size() * 4));
  ASSERT_TRUE(bin.good());
  // Argmax of every position equals llama.cpp's (a trained model: few near-ties).
  const auto want = ref.at("argmax_per_position").get<std::vector<int64_t>>();
  int same = 0;
  for (int64_t p = 0; p < n; ++p) {
    const float* row = ours.data() + p * V;
    same += (std::max_element(row, row + V) - row) == want[static_cast<size_t>(p)];
  }
  EXPECT_EQ(same, n);
}

TEST(CliRun, GreedyTextMatchesLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  std::ifstream js(ref_path("logits/aidreams260K-f32.p1_short.kvf16.json"));
  const json ref = json::parse(js);
  const std::string want = ref.at("greedy").at("text").get<std::string>();
  auto r = run_cli("run -m " + ref_path(kAidreams) + " -f " + ref_path("prompts/p1_short.txt") +
                   " -n 32 --temp 0 --ignore-eos -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(want.substr(0, 40)), std::string::npos) << r.out << "\nwant: " << want;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

// `run --spec`: the same greedy text with prompt lookup, with a draft model
// and without, for the three shared prompts; the stderr line counts drafts.
TEST(CliRun, SpeculativeGreedyTextIsUnchanged) {
  SUSTAIN_REQUIRE_REF();
  const std::string draft = ref_path("models/aidreams260K-Q4_K_M.gguf");
  for (const char* prompt : {"p1_short.txt", "p2_medium.txt", "p3_long.txt"}) {
    SCOPED_TRACE(prompt);
    const std::string base = "run -m " + ref_path(kAidreams) + " -f " +
                             ref_path(std::string("prompts/") + prompt) + " -n 64 --temp 0 --ignore-eos -t 2";
    auto plain = run_cli(base);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    auto ngram = run_cli(base + " --spec ngram");
    ASSERT_EQ(ngram.exit_code, 0) << ngram.err;
    EXPECT_EQ(ngram.out, plain.out);
    EXPECT_NE(ngram.err.find("spec ngram:"), std::string::npos) << ngram.err;
    auto d = run_cli(base + " --spec draft --draft-model " + draft + " --draft-max 8");
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(d.out, plain.out);
    EXPECT_NE(d.err.find("spec draft:"), std::string::npos) << d.err;
    EXPECT_EQ(d.err.find(" 0 drafted"), std::string::npos) << d.err;
  }
}

// `run --batch-invariant` is taken, alone and with --spec, and changes
// nothing a user reads on the trained model: the same greedy text with and
// without it (its bit-for-bit property: tests/engine/test_batch_invariant.cc).
TEST(CliRun, BatchInvariantGreedyTextIsUnchanged) {
  SUSTAIN_REQUIRE_REF();
  const std::string base = "run -m " + ref_path(kAidreams) + " -f " +
                           ref_path("prompts/p3_long.txt") + " -n 48 --temp 0 --ignore-eos -t 2";
  auto plain = run_cli(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto inv = run_cli(base + " --batch-invariant");
  ASSERT_EQ(inv.exit_code, 0) << inv.err;
  EXPECT_EQ(inv.out, plain.out);
  auto spec = run_cli(base + " --batch-invariant --spec ngram");
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("spec ngram:"), std::string::npos) << spec.err;
}

// Repacked weights (the default) on the trained Q8_0 model: llama.cpp's
// greedy text, the text the rows (--no-repack) give, and a stderr note
// saying what was repacked; with --repack on a CPU without AVX-512 VNNI, why
// nothing was (by default such a CPU says nothing). Also under
// --batch-invariant; --repack with --no-repack is refused by name.
TEST(CliRun, RepackGreedyTextMatchesLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  std::ifstream js(ref_path("logits/aidreams260K-Q8_0.p3_long_llama2c.kvf16.json"));
  ASSERT_TRUE(js.good());
  // llama.cpp's text spells the control tokens (</s><s>), which run does not print.
  std::string want = json::parse(js).at("greedy").at("text").get<std::string>();
  for (const std::string tag : {"</s>", "<s>"})
    for (size_t at; (at = want.find(tag)) != std::string::npos;) want.erase(at, tag.size());
  const std::string base = "run -m " + ref_path("models/aidreams260K-Q8_0.gguf") + " -f " +
                           ref_path("prompts/p3_long_llama2c.txt") +
                           " -n 32 --temp 0 --ignore-eos -t 2";
  auto rows = run_cli(base + " --no-repack");
  ASSERT_EQ(rows.exit_code, 0) << rows.err;
  EXPECT_EQ(rows.err.find("repack"), std::string::npos) << rows.err;
  auto rep = run_cli(base + " --repack");
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(rep.out, rows.out);
  EXPECT_NE(rep.out.find(want.substr(0, 40)), std::string::npos) << rep.out << "\nwant: " << want;
  const bool repacked = rep.err.find("into 16-row tiles") != std::string::npos;
  const bool refused =
      rep.err.find("nothing repacked: this CPU has no AVX-512 VNNI") != std::string::npos;
  EXPECT_TRUE(repacked || refused) << rep.err;
  auto def = run_cli(base);
  ASSERT_EQ(def.exit_code, 0) << def.err;
  EXPECT_EQ(def.out, rows.out);
  EXPECT_EQ(def.err.find("into 16-row tiles") != std::string::npos, repacked) << def.err;
  EXPECT_EQ(def.err.find("nothing repacked"), std::string::npos) << def.err;
  auto inv = run_cli(base + " --batch-invariant");
  ASSERT_EQ(inv.exit_code, 0) << inv.err;
  EXPECT_EQ(inv.out, rows.out);
  auto both = run_cli(base + " --repack --no-repack");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("--repack excludes --no-repack"), std::string::npos) << both.err;
}

// `run --spec mtp` on the qwen35 model with an MTP block: the same greedy
// text as without, and drafts were made and verified.
TEST(CliRun, MtpGreedyTextIsUnchanged) {
  SUSTAIN_REQUIRE_REF();
  const std::string base = "run -m " + ref_path("models/tiny-qwen35-f32.gguf") + " -f " +
                           ref_path("prompts/p2_medium.txt") + " -n 48 --temp 0 --ignore-eos -t 2";
  auto plain = run_cli(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto mtp = run_cli(base + " --spec mtp");
  ASSERT_EQ(mtp.exit_code, 0) << mtp.err;
  EXPECT_EQ(mtp.out, plain.out);
  EXPECT_NE(mtp.err.find("spec mtp:"), std::string::npos) << mtp.err;
  EXPECT_EQ(mtp.err.find(" 0 drafted"), std::string::npos) << mtp.err;
}

TEST(CliRun, SpeculativeFlagsAreChecked) {
  SUSTAIN_REQUIRE_REF();
  const std::string m = "run -m " + ref_path(kAidreams) + " -p hi -n 4 -t 2";
  struct Case {
    const char* flags;
    const char* says;
  } cases[] = {
      {"--spec ngram --draft-max 0", "--draft-max"},
      {"--spec ngram --draft-max 40", "--draft-max"},
      {"--spec lookahead", "unknown proposer"},
      {"--spec draft", "--draft-model"},
      {"--spec draft -md /nonexistent/draft.gguf", "/nonexistent/draft.gguf"},
      {"--spec mtp", "no MTP/NextN block"},
      {"--spec ngram --draft-p-min 2", "--draft-p-min"},
      {"--spec mtp --spec-mtp-depth 0", "--spec-mtp-depth"},
      {"--spec oracle:1.5", "oracle:1.5"},
      {"--spec oracle", "oracle:0.8"},
      {"--spec ngram --spec-gate maybe", "--spec-gate"},
      {"--spec ngram --spec-ngram-pool-mb -1", "--spec-ngram-pool-mb"},
  };
  for (const auto& c : cases) {
    auto r = run_cli(m + " " + c.flags);
    EXPECT_NE(r.exit_code, 0) << c.flags;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flags << ": " << r.err;
  }
  // A draft model of another vocabulary: both files' sizes named.
  auto r = run_cli(m + " --spec draft -md " + ref_path("models/tiny-qwen3-Q4_K_M.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("vocabulary"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tiny-qwen3-Q4_K_M.gguf"), std::string::npos) << r.err;
}

TEST(CliRun, SeededSamplingIsDeterministic) {
  SUSTAIN_REQUIRE_REF();
  const std::string cmd = "run -m " + ref_path(kAidreams) +
                          " -p 'Once upon a time' -n 24 --temp 0.9 --top-k 20 --seed 7 -t 2";
  auto a = run_cli(cmd), b = run_cli(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  auto c = run_cli("run -m " + ref_path(kAidreams) +
                   " -p 'Once upon a time' -n 24 --temp 0.9 --top-k 20 --seed 8 -t 2");
  EXPECT_NE(a.out, c.out);
}

TEST(CliRun, BadInputGivesClearErrors) {
  SUSTAIN_REQUIRE_REF();
  const std::string m = " -m " + ref_path(kAidreams);
  // Prompt longer than the context: both numbers in the message.
  auto r = run_cli("run" + m + " -c 8 -p 'Once upon a time there was a little girl named Lily'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("context of 8 tokens"), std::string::npos) << r.err;
  // Empty prompt.
  r = run_cli("run" + m + " -p ''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;
  r = run_cli("logits" + m + " --no-bos -p '' -o " + tmp_path("x.f32"));
  EXPECT_NE(r.exit_code, 0);
  // Flags out of range.
  for (const char* flag : {"-t 0", "-c 0", "-n -5", "-b 0"}) {
    r = run_cli("run" + m + " -p hi " + flag);
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.err.find("error"), std::string::npos) << flag << ": " << r.err;
  }
  for (const char* flag : {"--temp -1", "--top-p 1.5", "--min-p 2", "--temp nan"}) {
    r = run_cli("run" + m + " -p hi " + flag);
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_NE(r.err.find("error"), std::string::npos) << flag << ": " << r.err;
  }
  // A KV budget below the context: the bytes needed and the largest context.
  // aidreams260K: 4 layers x 4 KV heads x (16 + 16) x 2 bytes = 1024 bytes
  // per token of f16 K and V; 100K holds 100 tokens = 3 pages of 32 = 96.
  r = run_cli("run" + m + " -p hi -c 512 --kv-budget 100K");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs 524288 bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("largest context that fits is 96 tokens"), std::string::npos) << r.err;
  r = run_cli("run" + m + " -p hi -n 2 -c 96 --kv-budget 100K");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("run" + m + " -p hi --kv-budget 12parsecs");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--kv-budget"), std::string::npos) << r.err;
  r = run_cli("run" + m + " -p hi -ctk q9_9");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("q9_9"), std::string::npos) << r.err;
  // -p and -f together, a missing prompt file, a missing model.
  r = run_cli("run" + m + " -p hi -f /nonexistent.txt");
  EXPECT_NE(r.exit_code, 0);
  r = run_cli("run" + m + " -f /nonexistent.txt");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent.txt"), std::string::npos) << r.err;
  r = run_cli("run -m /nonexistent.gguf -p hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
  // A context beyond the flag's range (2^24 tokens).
  r = run_cli("run" + m + " -p hi -c 16777217");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("ctx-size"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sustain::test

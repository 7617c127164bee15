// `sustain info` on vision projector (mmproj) files: the reference's tiny
// Gemma 3 projector, and a broken copy whose problem is named.
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

}  // namespace
}  // namespace sustain::test

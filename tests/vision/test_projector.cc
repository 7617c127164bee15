// Reading projector files: the reference's two tiny Gemma 3 projectors, and a
// synthetic one broken in each way the loader must name.
#include <gtest/gtest.h>

#include "synth_mmproj.h"
#include "vision/projector.h"
#include "vision_test_util.h"

namespace sustain::vision {
namespace {

TEST(VisionProjector, ReadsTinyGemma3) {
  SUSTAIN_REQUIRE_REF();
  auto p = Projector::open(test::vision_ref("models/mmproj-tinygemma3.gguf"));
  ASSERT_TRUE(p) << p.status().message();
  const VisionHparams& hp = p->hparams();
  EXPECT_EQ(hp.projector_type, "gemma3");
  EXPECT_EQ(hp.image_size, 32u);
  EXPECT_EQ(hp.patch_size, 2u);
  EXPECT_EQ(hp.n_embd, 128u);
  EXPECT_EQ(hp.n_ff, 512u);
  EXPECT_EQ(hp.n_layer, 4u);
  EXPECT_EQ(hp.n_head, 4u);
  EXPECT_EQ(hp.n_patches(), 256u);
  EXPECT_FLOAT_EQ(hp.eps, 1e-6f);
  EXPECT_EQ(hp.image_mean[1], 0.5f);
  EXPECT_EQ(p->n_tokens(), 256);
  EXPECT_EQ(p->out_dim(), 128);
  EXPECT_GT(p->tensor_bytes(), 900000u);

  auto p4 = Projector::open(test::vision_ref("models/mmproj-tinygemma3-pool4.gguf"));
  ASSERT_TRUE(p4) << p4.status().message();
  EXPECT_EQ(p4->n_tokens(), 16);
}

TEST(VisionProjector, SynthesizedFileLoads) {
  auto m = test::tiny_mmproj_spec();
  auto p = Projector::open(test::write_mmproj(m, "mmproj_ok.gguf"));
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->n_tokens(), 4);  // 4x4 patches pooled 2x2
  EXPECT_EQ(p->out_dim(), 24);
}

void expect_refused(const test::SynthMmproj& m, const std::string& name,
                    const std::vector<std::string>& needles) {
  auto p = Projector::open(test::write_mmproj(m, name));
  ASSERT_FALSE(p) << name << " loaded";
  for (const auto& n : needles)
    EXPECT_NE(p.status().message().find(n), std::string::npos) << p.status().message();
}

TEST(VisionProjector, BadTensorShapeIsNamed) {
  auto m = test::tiny_mmproj_spec();
  m.tensors["v.blk.0.attn_k.weight"].shape = {32, 16};
  m.tensors["v.blk.0.attn_k.weight"].data.resize(32 * 16);
  expect_refused(m, "mmproj_bad_shape.gguf",
                 {"v.blk.0.attn_k.weight", "[32, 16]", "expected [32, 32]"});
}

TEST(VisionProjector, MissingTensorIsNamed) {
  auto m = test::tiny_mmproj_spec();
  m.tensors.erase("v.post_ln.bias");
  expect_refused(m, "mmproj_missing.gguf", {"v.post_ln.bias", "missing"});
  auto m2 = test::tiny_mmproj_spec();
  m2.tensors.erase("mm.input_projection.weight");
  expect_refused(m2, "mmproj_missing_proj.gguf", {"mm.input_projection.weight", "missing"});
}

TEST(VisionProjector, UnknownTensorIsRefused) {
  auto m = test::tiny_mmproj_spec();
  m.tensors["v.pre_ln.weight"] = {{32}, std::vector<float>(32, 1.0f)};
  expect_refused(m, "mmproj_extra.gguf", {"v.pre_ln.weight", "does not implement"});
}

TEST(VisionProjector, BadMetadataIsNamed) {
  auto m = test::tiny_mmproj_spec();
  m.kv["clip.projector_type"] = gguf::Value::str("qwen2vl_merger");
  expect_refused(m, "mmproj_type.gguf", {"qwen2vl_merger", "not implemented", "gemma3"});

  m = test::tiny_mmproj_spec();
  m.kv["clip.vision.projector.scale_factor"] = gguf::Value::u32(3);
  expect_refused(m, "mmproj_scale.gguf", {"scale_factor", "3"});

  m = test::tiny_mmproj_spec();
  m.kv["clip.vision.patch_size"] = gguf::Value::u32(3);
  expect_refused(m, "mmproj_patch.gguf", {"not a multiple of the patch size"});

  m = test::tiny_mmproj_spec();
  m.kv["clip.vision.image_size"] = gguf::Value::u32(1u << 30);
  expect_refused(m, "mmproj_huge.gguf", {"clip.vision.image_size", "1073741824"});

  m = test::tiny_mmproj_spec();
  m.kv.erase("clip.vision.block_count");
  expect_refused(m, "mmproj_nolayers.gguf", {"clip.vision.block_count"});

  m = test::tiny_mmproj_spec();
  m.kv["general.architecture"] = gguf::Value::str("gemma3");
  expect_refused(m, "mmproj_arch.gguf", {"not a vision projector"});

  m = test::tiny_mmproj_spec();
  m.kv["clip.vision.image_std"] = gguf::Value::f32_array({0.5f, 0.0f, 0.5f});
  expect_refused(m, "mmproj_std.gguf", {"image_std"});
}

TEST(VisionProjector, TextModelIsNotAProjector) {
  SUSTAIN_REQUIRE_REF();
  auto p = Projector::open(test::vision_ref("models/tiny-gemma3-vlm-f32.gguf"));
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("not a vision projector"), std::string::npos);
}

}  // namespace
}  // namespace sustain::vision

// A projector given by its shape (vision/shape.h), what `plan --vision`
// counts: checked against real files (the tensors an mmproj of the same
// shape holds, and the encode buffers Projector computes from the file) and,
// for the named Gemma 3 shape, against a parameter count done by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "test_util.h"
#include "vision/projector.h"
#include "vision/shape.h"

namespace sustain::test {
namespace {

class ShapeVsFile : public ::testing::TestWithParam<const char*> {};

TEST_P(ShapeVsFile, TensorsAndEncodeBuffersAreTheFilesOwn) {
  SUSTAIN_REQUIRE_REF();
  auto p = vision::Projector::open(ref_path(std::string("vision/models/") + GetParam()));
  ASSERT_TRUE(p.has_value()) << p.status().message();
  vision::ProjectorShape s;
  s.hp = p->hparams();
  s.out_dim = p->out_dim();
  s.pool = static_cast<int>(std::lround(
      std::sqrt(double(s.hp.n_patches()) / double(p->n_tokens()))));
  s.matrix_type = QType::Q8_0;  // the files' block matrices
  EXPECT_EQ(s.n_tokens(), p->n_tokens());

  std::map<std::string, const gguf::TensorInfo*> file;
  for (const gguf::TensorInfo& t : p->file().tensors()) file[t.name] = &t;
  const auto mine = vision::projector_tensors(s);
  EXPECT_EQ(mine.size(), file.size());
  for (const vision::ShapeTensor& t : mine) {
    SCOPED_TRACE(t.name);
    auto it = file.find(t.name);
    ASSERT_NE(it, file.end()) << "not in the file";
    EXPECT_EQ(t.shape, it->second->shape);
    // The files keep embeddings in F32 where a published one has F16; the
    // block matrices and every 1-D tensor are in the same format.
    if (t.type == it->second->type) {
      EXPECT_EQ(t.bytes, it->second->n_bytes);
    }
    if (t.name.find(".attn_") != std::string::npos || t.name.find(".ffn_") != std::string::npos) {
      EXPECT_EQ(t.type, it->second->type);
    }
  }
  EXPECT_EQ(vision::encode_scratch_bytes(s), p->encode_scratch_bytes());
}

INSTANTIATE_TEST_SUITE_P(Ref, ShapeVsFile,
                         ::testing::Values("mmproj-tinygemma3.gguf", "mmproj-tinygemma3-pool4.gguf"));

// SigLIP-So400m at 896 px, counted by hand: 27 blocks of four 1152² attention
// matrices and two 1152×4304 FFN matrices with their biases and two
// LayerNorms; the 14×14 patch kernel, 4096 position embeddings, the post-LN,
// the soft-embedding norm and the projection to the text width.
TEST(ProjectorShape, Gemma3IsSiglipSo400mAt896Pixels) {
  const int64_t d = 1152, ff = 4304, text = 5376;
  auto s = vision::projector_shape("gemma3", text, QType::F16);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  EXPECT_EQ(s->n_tokens(), 256);
  EXPECT_EQ(s->hp.n_patches(), 4096u);
  const int64_t block2d = 4 * d * d + 2 * d * ff, block1d = 4 * d + ff + d + 4 * d;
  const int64_t two_d = 27 * block2d + d * 3 * 14 * 14 + 4096 * d + d * text;
  const int64_t one_d = 27 * block1d + d + 2 * d + d;
  int64_t got2 = 0, got1 = 0;
  uint64_t bytes = 0;
  const auto t = vision::projector_tensors(*s);
  for (const auto& x : t) {
    int64_t n = 1;
    for (int64_t e : x.shape) n *= e;
    (x.shape.size() > 1 ? got2 : got1) += n;
    bytes += x.bytes;
  }
  EXPECT_EQ(got2, two_d);
  EXPECT_EQ(got1, one_d);
  EXPECT_EQ(t.size(), 27u * 16 + 7);
  EXPECT_EQ(bytes, uint64_t(two_d) * 2 + uint64_t(one_d) * 4);  // F16 matrices, F32 vectors
  // 0.43 B parameters, as the published encoder has.
  EXPECT_NEAR(double(two_d + one_d) / 1e9, 0.42, 0.01);

  // Q8_0: the 1152-wide matrices in 34-byte blocks of 32; FFN down (rows of
  // 4304, not a multiple of 32) and the embeddings stay F16.
  auto q = vision::projector_shape("gemma3", text, QType::Q8_0);
  ASSERT_TRUE(q.has_value());
  for (const auto& x : vision::projector_tensors(*q)) {
    if (x.name == "v.blk.0.attn_q.weight") {
      EXPECT_EQ(x.bytes, uint64_t(d) * d / 32 * 34);
    }
    if (x.name == "v.blk.0.ffn_down.weight" || x.name == "v.position_embd.weight") {
      EXPECT_EQ(x.type, QType::F16) << x.name;
    }
  }
  // One head's 4096×4096 scores alone are 64 MiB; the buffers of one image
  // are some hundreds of MiB, below a GiB.
  const uint64_t enc = vision::encode_scratch_bytes(*s);
  EXPECT_GT(enc, uint64_t{4096} * 4096 * 4 + uint64_t{4096} * ff * 4);
  EXPECT_LT(enc, uint64_t{1} << 30);
}

TEST(ProjectorShape, BadNamesAndFormatsAreRefused) {
  auto a = vision::projector_shape("siglip", 2560, QType::F16);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.status().message().find("gemma3"), std::string::npos) << a.status().message();
  auto b = vision::projector_shape("gemma3", 2560, QType::Q4_K);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.status().message().find("Q4_K"), std::string::npos) << b.status().message();
  EXPECT_FALSE(vision::projector_shape("gemma3", 0, QType::F16).has_value());
}

}  // namespace
}  // namespace sustain::test

// Resize, letterbox and normalisation: hand-computed cases, then the
// reference's pixels bit for bit.
#include <cstring>

#include <gtest/gtest.h>

#include "vision/preprocess.h"
#include "vision/projector.h"
#include "vision_test_util.h"

namespace sustain::vision {
namespace {

Image grey(int w, int h, const std::vector<uint8_t>& v) {
  Image img;
  img.width = w;
  img.height = h;
  for (uint8_t x : v) img.rgb.insert(img.rgb.end(), {x, x, x});
  return img;
}

TEST(VisionPreprocess, LetterboxGeometry) {
  // The README's two examples (16x24 is one of the kept-back images).
  Letterbox g = letterbox_geometry(50, 20, 32);
  EXPECT_EQ(g.resized_w, 32);
  EXPECT_EQ(g.resized_h, 13);
  EXPECT_EQ(g.offset_x, 0);
  EXPECT_EQ(g.offset_y, 9);
  g = letterbox_geometry(16, 24, 32);
  EXPECT_EQ(g.resized_w, 22);
  EXPECT_EQ(g.resized_h, 32);
  EXPECT_EQ(g.offset_x, 5);
  EXPECT_EQ(g.offset_y, 0);
  g = letterbox_geometry(32, 32, 32);
  EXPECT_EQ(g.resized_w, 32);
  EXPECT_EQ(g.offset_x, 0);
  // Real Gemma 3: a 1920x1080 screenshot fills the width.
  g = letterbox_geometry(1920, 1080, 896);
  EXPECT_EQ(g.resized_w, 896);
  EXPECT_EQ(g.resized_h, 504);
  EXPECT_EQ(g.offset_y, 196);
}

TEST(VisionPreprocess, BilinearByHand) {
  // 2x2 → 3x3, align-corners: ratio 1/2, so the new middle samples fall
  // halfway between source pixels.
  const Image src = grey(2, 2, {0, 100, 200, 50});
  const Image r = resize_bilinear(src, 3, 3);
  const uint8_t want[9] = {0,   50,  100,  // row 0: lerp(0, 100)
                           100, 87,  75,   // row 1: 87.5 truncates to 87
                           200, 125, 50};  // row 2: lerp(200, 50)
  for (int i = 0; i < 9; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(r.rgb[i * 3 + c], want[i]) << "pixel " << i;
  // Downscaling 3 → 2 takes the two ends, no filtering between.
  const Image d = resize_bilinear(grey(3, 1, {10, 250, 30}), 2, 1);
  EXPECT_EQ(d.rgb[0], 10);
  EXPECT_EQ(d.rgb[3], 30);
}

TEST(VisionPreprocess, LetterboxAndNormaliseByHand) {
  // 4x2 into 4x4: scale 1, no resampling, pasted at row 1 on black.
  const Image src = grey(4, 2, {255, 0, 51, 255, 0, 255, 255, 102});
  const std::vector<float> px = preprocess(src, 4, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f});
  ASSERT_EQ(px.size(), 3u * 16);
  const float v51 = (51.0f / 255.0f - 0.5f) / 0.5f, v102 = (102.0f / 255.0f - 0.5f) / 0.5f;
  const float want[16] = {-1, -1, -1,  -1,    //
                          1,  -1, v51, 1,     //
                          -1, 1,  1,   v102,  //
                          -1, -1, -1,  -1};
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 16; ++i) EXPECT_EQ(px[c * 16 + i], want[i]) << "c " << c << " i " << i;
  // Planar channel order R, G, B with per-channel mean and std.
  Image rgb;
  rgb.width = rgb.height = 1;
  rgb.rgb = {255, 0, 51};
  const auto p1 = to_planar_normalized(rgb, {0.0f, 0.5f, 0.2f}, {1.0f, 0.25f, 2.0f});
  EXPECT_EQ(p1[0], 1.0f);
  EXPECT_EQ(p1[1], -2.0f);
  EXPECT_EQ(p1[2], (51.0f / 255.0f - 0.2f) / 2.0f);
}

TEST(VisionPreprocess, ReferencePixelsBitExact) {
  SUSTAIN_REQUIRE_REF();
  for (const char* proj : {"mmproj-tinygemma3", "mmproj-tinygemma3-pool4"}) {
    auto p = Projector::open(test::vision_ref(std::string("models/") + proj + ".gguf"));
    ASSERT_TRUE(p) << p.status().message();
    const auto& hp = p->hparams();
    for (const char* stem : {"solid32", "gradient32", "wide50x20"}) {
      auto img = load_image(test::vision_ref(std::string("images/") + stem + ".png"));
      ASSERT_TRUE(img) << img.status().message();
      const auto got =
          preprocess(*img, static_cast<int>(hp.image_size), hp.image_mean, hp.image_std);
      const auto ref = test::read_f32(
          test::vision_ref(std::string("vision/") + proj + "." + stem + ".pixels.f32"));
      ASSERT_EQ(got.size(), ref.size()) << stem;
      size_t differing = 0;
      for (size_t i = 0; i < ref.size(); ++i) differing += std::memcmp(&got[i], &ref[i], 4) != 0;
      EXPECT_EQ(differing, 0u) << proj << "." << stem;
    }
  }
}

}  // namespace
}  // namespace sustain::vision

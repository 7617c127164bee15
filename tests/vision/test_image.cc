// Decoding: the reference PNGs give their raw RGB; synthetic PNG/JPEG bytes
// decode; every kind of bad input is refused with an error naming it.
#include <cstring>

#include <gtest/gtest.h>
#include <stb_image_write.h>

#include "vision/image.h"
#include "vision_test_util.h"

namespace sustain::vision {
namespace {

void append(void* ctx, void* data, int size) {
  auto* v = static_cast<std::vector<uint8_t>*>(ctx);
  v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

std::vector<uint8_t> png_bytes(int w, int h, int comp, const std::vector<uint8_t>& px) {
  std::vector<uint8_t> out;
  EXPECT_NE(stbi_write_png_to_func(append, &out, w, h, comp, px.data(), w * comp), 0);
  return out;
}

std::vector<uint8_t> jpeg_bytes(int w, int h, const std::vector<uint8_t>& rgb) {
  std::vector<uint8_t> out;
  EXPECT_NE(stbi_write_jpg_to_func(append, &out, w, h, 3, rgb.data(), 100), 0);
  return out;
}

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xffffffffu;
}

std::vector<uint8_t> pattern(int w, int h, int comp) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * comp);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 + 11);
  return px;
}

TEST(VisionImage, ReferencePngsDecodeToTheirRawRgb) {
  SUSTAIN_REQUIRE_REF();
  for (const char* stem : {"solid32", "gradient32", "wide50x20"}) {
    auto img = load_image(test::vision_ref(std::string("images/") + stem + ".png"));
    ASSERT_TRUE(img) << img.status().message();
    const auto raw = test::read_bytes(test::vision_ref(std::string("images/") + stem + ".rgb"));
    EXPECT_EQ(img->rgb, raw) << stem;
    EXPECT_EQ(static_cast<size_t>(img->width) * img->height * 3, raw.size());
  }
  auto wide = load_image(test::vision_ref("images/wide50x20.png"));
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->width, 50);
  EXPECT_EQ(wide->height, 20);
}

TEST(VisionImage, PngWithAlphaDropsIt) {
  const auto rgba = pattern(5, 3, 4);
  auto img = decode_image(png_bytes(5, 3, 4, rgba).data(), png_bytes(5, 3, 4, rgba).size(), "t");
  ASSERT_TRUE(img) << img.status().message();
  ASSERT_EQ(img->width, 5);
  ASSERT_EQ(img->height, 3);
  for (int i = 0; i < 15; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(img->rgb[i * 3 + c], rgba[i * 4 + c]);
}

TEST(VisionImage, GreyPngIsReplicated) {
  const auto g = pattern(4, 4, 1);
  const auto bytes = png_bytes(4, 4, 1, g);
  auto img = decode_image(bytes.data(), bytes.size(), "grey");
  ASSERT_TRUE(img) << img.status().message();
  for (int i = 0; i < 16; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(img->rgb[i * 3 + c], g[i]);
}

TEST(VisionImage, JpegDecodes) {
  std::vector<uint8_t> rgb(16 * 8 * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) rgb[i] = 200, rgb[i + 1] = 40, rgb[i + 2] = 90;
  const auto bytes = jpeg_bytes(16, 8, rgb);
  auto img = decode_image(bytes.data(), bytes.size(), "solid.jpg");
  ASSERT_TRUE(img) << img.status().message();
  ASSERT_EQ(img->width, 16);
  ASSERT_EQ(img->height, 8);
  for (size_t i = 0; i < rgb.size(); ++i) EXPECT_NEAR(img->rgb[i], rgb[i], 3) << i;
}

void expect_error(const std::vector<uint8_t>& b, const std::string& needle,
                  const DecodeLimits& lim = {}) {
  auto img = decode_image(b.data(), b.size(), "part 3", lim);
  ASSERT_FALSE(img) << "decoded although " << needle;
  EXPECT_NE(img.status().message().find("part 3"), std::string::npos) << img.status().message();
  EXPECT_NE(img.status().message().find(needle), std::string::npos) << img.status().message();
}

TEST(VisionImage, NotAnImage) {
  const std::string text = "{\"not\": \"an image\"}";
  expect_error(std::vector<uint8_t>(text.begin(), text.end()), "not an image");
  expect_error({}, "not an image");
  // A GIF: a real image, but not a format this build accepts.
  const std::string gif = "GIF89a\x01\x00\x01\x00\x00\x00\x00;";
  expect_error(std::vector<uint8_t>(gif.begin(), gif.end()), "not an image");
}

TEST(VisionImage, TruncatedPng) {
  auto b = png_bytes(8, 8, 3, pattern(8, 8, 3));
  for (size_t keep : {b.size() - 1, b.size() - 12, b.size() / 2, size_t{20}, size_t{9}}) {
    std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<long>(keep));
    expect_error(t, "truncated PNG");
  }
}

TEST(VisionImage, CorruptPngBytes) {
  auto b = png_bytes(8, 8, 3, pattern(8, 8, 3));
  // A flipped bit in the middle of the compressed pixels: stb_image alone
  // would decode wrong pixels without noticing; the chunk CRC catches it.
  auto c = b;
  c[c.size() / 2] ^= 0x10;
  expect_error(c, "corrupt PNG");
  // A valid CRC over a nonsense header: the decoder's own check names it.
  auto h = b;
  h[16] = 0x7f;                            // IHDR width's top byte: two billion pixels wide
  const uint32_t crc = crc32(&h[12], 17);  // chunk type + 13 bytes of IHDR data
  for (int i = 0; i < 4; ++i) h[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  expect_error(h, "corrupt PNG header");
}

TEST(VisionImage, TruncatedJpeg) {
  std::vector<uint8_t> rgb = pattern(32, 32, 3);
  auto b = jpeg_bytes(32, 32, rgb);
  ASSERT_TRUE(decode_image(b.data(), b.size(), "whole"));
  std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<long>(b.size() * 2 / 3));
  expect_error(t, "truncated JPEG");
  std::vector<uint8_t> head(b.begin(), b.begin() + 100);
  expect_error(head, "JPEG");
}

// A Huffman table of 257 codes: stb_image 2.27 would build it into its
// 257-byte array and write past it; the segment walk refuses it first.
TEST(VisionImage, OversizeHuffmanTableIsRefused) {
  const auto good = jpeg_bytes(8, 8, pattern(8, 8, 3));
  ASSERT_TRUE(decode_image(good.data(), good.size(), "whole"));
  std::vector<uint8_t> dht = {0xff, 0xc4, 0x01, 0x14, 0x00};  // length 2 + 17 + 257 = 276
  std::vector<uint8_t> counts(16, 0);
  counts[14] = 2;
  counts[15] = 255;
  dht.insert(dht.end(), counts.begin(), counts.end());
  for (int i = 0; i < 257; ++i) dht.push_back(static_cast<uint8_t>(i));
  std::vector<uint8_t> b(good.begin(), good.begin() + 2);  // SOI
  b.insert(b.end(), dht.begin(), dht.end());
  b.insert(b.end(), good.begin() + 2, good.end());
  expect_error(b, "257 codes (at most 256)");
  // The same table inside a comment segment is only bytes, not a table.
  std::vector<uint8_t> com = {0xff, 0xfe, 0x01, 0x18};  // length 2 + 278
  com.insert(com.end(), dht.begin(), dht.end());
  std::vector<uint8_t> c(good.begin(), good.begin() + 2);
  c.insert(c.end(), com.begin(), com.end());
  c.insert(c.end(), good.begin() + 2, good.end());
  EXPECT_TRUE(decode_image(c.data(), c.size(), "comment"));
}

// A scan that decodes with a table no DHT defined: stb_image 2.27 would
// read its tables as whatever its fresh allocation held (the fuzzer found
// symbol ids of 845 that way), so the segment walk refuses it, naming the
// table. The same file with the scan pointed back at defined tables decodes.
TEST(VisionImage, ScanWithAnUndefinedHuffmanTableIsRefused) {
  const auto good = jpeg_bytes(8, 8, pattern(8, 8, 3));
  size_t sos = 0;
  for (size_t i = 2; i + 1 < good.size(); ++i)
    if (good[i] == 0xff && good[i + 1] == 0xda) {
      sos = i;
      break;
    }
  ASSERT_GT(sos, 0u);
  ASSERT_EQ(good[sos + 4], 3);  // three components: Y, Cb, Cr
  const size_t cr_tables = sos + 4 + 1 + 2 * 2 + 1;
  std::vector<uint8_t> dc = good;
  dc[cr_tables] = static_cast<uint8_t>(0x20 | (good[cr_tables] & 15));
  expect_error(dc, "DC Huffman table 2, which no DHT segment before it defines");
  std::vector<uint8_t> ac = good;
  ac[cr_tables] = static_cast<uint8_t>((good[cr_tables] & 0xf0) | 3);
  expect_error(ac, "AC Huffman table 3, which no DHT segment before it defines");
  std::vector<uint8_t> both_y = good;
  both_y[cr_tables] = 0x00;  // Cr decoded with the luma tables: defined, so decodes
  EXPECT_TRUE(decode_image(both_y.data(), both_y.size(), "luma tables"));
  std::vector<uint8_t> cut = good;
  cut[sos + 4] = 40;  // 40 components do not fit the 12-byte header
  expect_error(cut, "scan header at offset");
}

TEST(VisionImage, JpegSegmentsAreWalked) {
  const auto good = jpeg_bytes(8, 8, pattern(8, 8, 3));
  // A segment whose length runs past the end of the file.
  std::vector<uint8_t> b(good.begin(), good.begin() + 2);
  for (uint8_t x : {0xff, 0xe1, 0xff, 0xf0, 0x00}) b.push_back(x);
  expect_error(b, "truncated JPEG");
  // Junk where the next marker belongs.
  std::vector<uint8_t> j(good.begin(), good.begin() + 2);
  for (uint8_t x : {0xff, 0xfe, 0x00, 0x02, 0x42}) j.push_back(x);  // empty comment, then junk
  j.insert(j.end(), good.begin() + 2, good.end());
  expect_error(j, "where a marker belongs");
  // Bytes after the end-of-image marker are not read.
  std::vector<uint8_t> t = good;
  for (int i = 0; i < 7; ++i) t.push_back(0x55);
  EXPECT_TRUE(decode_image(t.data(), t.size(), "trailer"));
}

TEST(VisionImage, OverThePixelLimit) {
  auto b = png_bytes(40, 30, 3, pattern(40, 30, 3));
  DecodeLimits lim;
  lim.max_pixels = 40 * 30 - 1;
  expect_error(b, "40x30 = 1200 pixels, over the limit of 1199", lim);
  lim.max_pixels = 40 * 30;
  EXPECT_TRUE(decode_image(b.data(), b.size(), "at the limit", lim));
  DecodeLimits bytes_lim;
  bytes_lim.max_file_bytes = b.size() - 1;
  expect_error(b, "over the limit", bytes_lim);
}

TEST(VisionImage, MissingFileIsNamed) {
  auto img = load_image("/nonexistent/dir/picture.png");
  ASSERT_FALSE(img);
  EXPECT_NE(img.status().message().find("picture.png"), std::string::npos);
}

}  // namespace
}  // namespace sustain::vision

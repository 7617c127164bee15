// libFuzzer target for image decoding: arbitrary bytes through the container
// checks and stb_image. Whatever decodes must be a consistent image within
// the limits, and every refusal must be a decode error (never another code),
// and the letterbox of any decoded size must stay on the canvas.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "vision/image.h"
#include "vision/preprocess.h"

using namespace sustain;

namespace {

void require(bool cond, const char* what) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_image: property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vision::DecodeLimits lim;
  lim.max_pixels = 1u << 20;  // keeps each run fast; the check itself is what is tested
  auto img = vision::decode_image(data, size, "fuzz", lim);
  if (!img) {
    const Code c = img.status().code();
    require(c == Code::kBadFile || c == Code::kInvalidArgument, "unexpected error code");
    return 0;
  }
  require(img->width > 0 && img->height > 0, "empty image decoded");
  require(static_cast<uint64_t>(img->width) * img->height <= lim.max_pixels, "over the limit");
  require(img->rgb.size() == static_cast<size_t>(img->width) * img->height * 3, "size mismatch");
  const auto px = vision::preprocess(*img, 16, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f});
  require(px.size() == 3u * 16 * 16, "preprocessed size");
  for (float v : px) require(v >= -1.0f && v <= 1.0f, "normalised value out of range");
  return 0;
}

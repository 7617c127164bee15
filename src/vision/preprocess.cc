// Bit-exact with the reference: every step is float32 arithmetic in the
// order the reference does it, with no fused multiply-add (this file must not
// be contracted: see the -ffp-contract=off in CMakeLists.txt).
#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>

namespace sustain::vision {

Letterbox letterbox_geometry(int w, int h, int target) {
  Letterbox g;
  if (w == target && h == target) {
    g.resized_w = w;
    g.resized_h = h;
    return g;
  }
  const float scale = std::min(static_cast<float>(target) / static_cast<float>(w),
                               static_cast<float>(target) / static_cast<float>(h));
  g.resized_w = std::min(static_cast<int>(std::ceil(static_cast<float>(w) * scale)), target);
  g.resized_h = std::min(static_cast<int>(std::ceil(static_cast<float>(h) * scale)), target);
  g.resized_w = std::max(g.resized_w, 1);
  g.resized_h = std::max(g.resized_h, 1);
  g.offset_x = (target - g.resized_w) / 2;
  g.offset_y = (target - g.resized_h) / 2;
  return g;
}

namespace {
float lerp(float a, float b, float t) {
  return a + (b - a) * t;
}
}  // namespace

Image resize_bilinear(const Image& src, int dst_w, int dst_h) {
  Image out;
  out.width = dst_w;
  out.height = dst_h;
  out.rgb.resize(static_cast<size_t>(dst_w) * dst_h * 3);
  // A one-pixel-wide destination samples the first source column (the
  // align-corners ratio would divide by zero).
  const float rx =
      dst_w > 1 ? static_cast<float>(src.width - 1) / static_cast<float>(dst_w - 1) : 0.0f;
  const float ry =
      dst_h > 1 ? static_cast<float>(src.height - 1) / static_cast<float>(dst_h - 1) : 0.0f;
  for (int y = 0; y < dst_h; ++y) {
    const float py = static_cast<float>(y) * ry;
    const int y0 = static_cast<int>(py);
    const int y1 = std::min(y0 + 1, src.height - 1);
    const float dy = py - static_cast<float>(y0);
    for (int x = 0; x < dst_w; ++x) {
      const float px = static_cast<float>(x) * rx;
      const int x0 = static_cast<int>(px);
      const int x1 = std::min(x0 + 1, src.width - 1);
      const float dx = px - static_cast<float>(x0);
      for (int c = 0; c < 3; ++c) {
        const float top = lerp(src.at(x0, y0, c), src.at(x1, y0, c), dx);
        const float bottom = lerp(src.at(x0, y1, c), src.at(x1, y1, c), dx);
        out.rgb[(static_cast<size_t>(y) * dst_w + x) * 3 + c] =
            static_cast<uint8_t>(lerp(top, bottom, dy));
      }
    }
  }
  return out;
}

Image letterbox(const Image& src, int target) {
  const Letterbox g = letterbox_geometry(src.width, src.height, target);
  if (src.width == target && src.height == target) return src;
  const Image r = resize_bilinear(src, g.resized_w, g.resized_h);
  Image canvas;
  canvas.width = target;
  canvas.height = target;
  canvas.rgb.assign(static_cast<size_t>(target) * target * 3, 0);
  for (int y = 0; y < r.height; ++y)
    std::copy_n(&r.rgb[static_cast<size_t>(y) * r.width * 3], static_cast<size_t>(r.width) * 3,
                &canvas.rgb[(static_cast<size_t>(y + g.offset_y) * target + g.offset_x) * 3]);
  return canvas;
}

std::vector<float> to_planar_normalized(const Image& img, const std::array<float, 3>& mean,
                                        const std::array<float, 3>& std) {
  const size_t plane = static_cast<size_t>(img.width) * img.height;
  std::vector<float> out(plane * 3);
  for (size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) {
      const float v = static_cast<float>(img.rgb[i * 3 + c]) / 255.0f;
      out[c * plane + i] = (v - mean[c]) / std[c];
    }
  return out;
}

std::vector<float> preprocess(const Image& img, int target, const std::array<float, 3>& mean,
                              const std::array<float, 3>& std) {
  return to_planar_normalized(letterbox(img, target), mean, std);
}

}  // namespace sustain::vision

// Image → encoder input, exactly as llama.cpp's fixed-size preprocessor for
// Gemma 3 does it (facts in ../shared/ref/vision/README.md): an aspect-keeping
// bilinear resize that fits the image inside S×S, pasted centred on a black
// S×S canvas (PAD_CEIL letterbox), then (u8/255 − mean) / std per channel into
// a planar float tensor [3][S][S].
#pragma once

#include <array>
#include <vector>

#include "vision/image.h"

namespace sustain::vision {

// Where a w×h image lands on the S×S canvas.
struct Letterbox {
  int resized_w = 0, resized_h = 0;  // size after the resize
  int offset_x = 0, offset_y = 0;    // top-left corner on the canvas
};
// scale = min(S/w, S/h) in float32; new size = min(ceil(side·scale), S);
// offset = (S − new) / 2 in integers. An S×S image is left as it is.
Letterbox letterbox_geometry(int w, int h, int target);

// Bilinear resize with align-corners mapping (source = dst · (src−1)/(dst−1)),
// two lerps in x and one in y in float32, truncated to uint8. No antialiasing.
Image resize_bilinear(const Image& src, int dst_w, int dst_h);

// The resized image pasted on a black target×target canvas.
Image letterbox(const Image& src, int target);

// (v/255 − mean[c]) / std[c] in float32, planar: out[c][y][x].
std::vector<float> to_planar_normalized(const Image& img, const std::array<float, 3>& mean,
                                        const std::array<float, 3>& std);

// letterbox + to_planar_normalized: the encoder input of a target-sized projector.
std::vector<float> preprocess(const Image& img, int target, const std::array<float, 3>& mean,
                              const std::array<float, 3>& std);

}  // namespace sustain::vision

// Decoded images: 8-bit RGB, row-major, interleaved (RGBRGB...).
//
// Decoding accepts PNG and JPEG only (told apart by their signatures; other
// formats the decoder library knows are refused, to keep what untrusted bytes
// can reach small). Every failure names what is wrong: not an image, a
// truncated or corrupt file, or a pixel count over the caller's limit, which is
// checked from the header before any pixel memory is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace sustain::vision {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3 bytes

  uint8_t at(int x, int y, int c) const {
    return rgb[(static_cast<size_t>(y) * width + x) * 3 + c];
  }
};

struct DecodeLimits {
  // 8192 x 4096: far above what any projector takes (Gemma 3: 896 x 896), and
  // about 100 MiB of RGB at most.
  uint64_t max_pixels = 8192ull * 4096ull;
  uint64_t max_file_bytes = 256ull << 20;  // encoded bytes
};

enum class ImageFormat { kPng, kJpeg };
const char* image_format_name(ImageFormat f);

// Decodes PNG or JPEG bytes to RGB (alpha dropped, grey replicated, 16-bit
// samples reduced to 8), as the reference (stb_image forced to 3 channels)
// does. `what` names the input in errors (a path, "image part 2", ...).
Expected<Image> decode_image(const uint8_t* data, size_t size, const std::string& what,
                             const DecodeLimits& limits = {});

// Reads and decodes a file.
Expected<Image> load_image(const std::string& path, const DecodeLimits& limits = {});

}  // namespace sustain::vision

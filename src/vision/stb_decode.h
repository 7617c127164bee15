// stb_image, built here from Debian's header (libstb-dev) rather than linked
// from its shared library, so that a file which trips one of stb_image's
// internal assertions is a decode error instead of an abort of the whole
// process (the Debian library is built with assert() on), and so that every
// byte stb_image allocates for one decode is accounted and released even
// when it gives up half-way. Only the PNG and JPEG decoders are compiled in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sustain::vision::stb {

struct Info {
  int width = 0;
  int height = 0;
  int channels = 0;
};

// Header only: false (and `reason`) when the header does not parse.
bool info(const uint8_t* data, int len, Info* out, std::string* reason);

// Decodes to 3-channel 8-bit RGB into `rgb` (width * height * 3 bytes).
// Allocations past `max_bytes` in all fail inside stb_image, which then
// refuses the file. False with `reason` on any failure, a tripped internal
// check included; nothing stays allocated either way.
bool load_rgb(const uint8_t* data, int len, uint64_t max_bytes, Info* out,
              std::vector<uint8_t>* rgb, std::string* reason);

}  // namespace sustain::vision::stb

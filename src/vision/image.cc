// Image decoding through stb_image (Debian's libstb), the decoder the
// reference uses, so decoded pixels, JPEG's IDCT and chroma upsampling
// included, are the reference's. stb_image trusts a file's structure more
// than we do: it skips PNG chunk CRCs and reads past the end of a JPEG as
// zeros. So the container is checked here first (PNG chunks and CRCs, a JPEG
// end-of-image marker after its last scan), and the pixel count is checked
// from the header before stb_image allocates anything.
#include "vision/image.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include <stb_image.h>

namespace sustain::vision {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// CRC-32 (ISO 3309, the one PNG uses), table built once at compile time.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::string chunk_name(const uint8_t* p) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += (p[i] >= 0x20 && p[i] < 0x7f) ? static_cast<char>(p[i]) : '?';
  return s;
}

// Walks the chunk list: every chunk inside the file with a matching CRC,
// IHDR first, IEND last.
Status check_png(const uint8_t* d, size_t n, const std::string& what) {
  size_t off = 8;
  bool first = true;
  while (true) {
    if (n - off < 12)
      return error(Code::kBadFile, "{}: truncated PNG: {} bytes, cut off before the IEND chunk",
                   what, n);
    const uint32_t len = be32(d + off);
    const std::string name = chunk_name(d + off + 4);
    if (len > n - off - 12)
      return error(Code::kBadFile,
                   "{}: truncated PNG: chunk {} at offset {} needs {} bytes, the file ends {} "
                   "bytes later",
                   what, name, off, uint64_t{len} + 12, n - off);
    if (first && name != "IHDR")
      return error(Code::kBadFile, "{}: corrupt PNG: the first chunk is {}, not IHDR", what, name);
    first = false;
    const uint32_t want = be32(d + off + 8 + len);
    if (crc32(d + off + 4, size_t{len} + 4) != want)
      return error(Code::kBadFile, "{}: corrupt PNG: chunk {} at offset {} fails its CRC", what,
                   name, off);
    off += size_t{len} + 12;
    if (name == "IEND") return Status::ok();
  }
}

// Entropy-coded data never holds 0xFF 0xD9 (a data 0xFF is stuffed as FF 00),
// so an end-of-image marker after the last start-of-scan means the last scan
// is complete. An EXIF thumbnail's markers come before the main image's scans.
Status check_jpeg(const uint8_t* d, size_t n, const std::string& what) {
  size_t last_sos = 0, last_eoi = 0;
  bool sos = false, eoi = false;
  for (size_t i = 2; i + 1 < n; ++i) {
    if (d[i] != 0xff) continue;
    if (d[i + 1] == 0xda) sos = true, last_sos = i;
    if (d[i + 1] == 0xd9) eoi = true, last_eoi = i;
  }
  if (!sos) return error(Code::kBadFile, "{}: truncated or corrupt JPEG: no image scan", what);
  if (!eoi || last_eoi < last_sos)
    return error(Code::kBadFile,
                 "{}: truncated JPEG: the last scan (offset {}) has no end-of-image marker after "
                 "it ({} bytes in all)",
                 what, last_sos, n);
  return Status::ok();
}

struct StbFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};

}  // namespace

const char* image_format_name(ImageFormat f) {
  return f == ImageFormat::kPng ? "PNG" : "JPEG";
}

Expected<Image> decode_image(const uint8_t* data, size_t size, const std::string& what,
                             const DecodeLimits& limits) {
  if (size > limits.max_file_bytes || size > static_cast<size_t>(INT32_MAX))
    return error(Code::kInvalidArgument, "{}: {} bytes, over the limit of {} bytes", what, size,
                 limits.max_file_bytes);
  ImageFormat fmt;
  if (size >= 8 && std::memcmp(data, kPngSignature, 8) == 0) {
    fmt = ImageFormat::kPng;
    SUSTAIN_TRY(check_png(data, size, what));
  } else if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
    fmt = ImageFormat::kJpeg;
    SUSTAIN_TRY(check_jpeg(data, size, what));
  } else {
    return error(Code::kBadFile, "{}: not an image: {} bytes without a PNG or JPEG signature", what,
                 size);
  }
  const int len = static_cast<int>(size);

  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(data, len, &w, &h, &comp))
    return error(Code::kBadFile, "{}: corrupt {} header ({})", what, image_format_name(fmt),
                 stbi_failure_reason());
  if (w <= 0 || h <= 0)
    return error(Code::kBadFile, "{}: {} says it is {}x{} pixels", what, image_format_name(fmt), w,
                 h);
  const uint64_t pixels = static_cast<uint64_t>(w) * static_cast<uint64_t>(h);
  if (pixels > limits.max_pixels)
    return error(Code::kInvalidArgument,
                 "{}: image is {}x{} = {} pixels, over the limit of {} pixels", what, w, h, pixels,
                 limits.max_pixels);

  int w2 = 0, h2 = 0, comp2 = 0;
  std::unique_ptr<unsigned char, StbFree> px(
      stbi_load_from_memory(data, len, &w2, &h2, &comp2, /*req_comp=*/3));
  if (!px)
    return error(Code::kBadFile, "{}: corrupt {} data ({})", what, image_format_name(fmt),
                 stbi_failure_reason());
  if (w2 != w || h2 != h)
    return error(Code::kBadFile, "{}: corrupt {}: header says {}x{}, data decodes as {}x{}", what,
                 image_format_name(fmt), w, h, w2, h2);
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.assign(px.get(), px.get() + pixels * 3);
  return img;
}

Expected<Image> load_image(const std::string& path, const DecodeLimits& limits) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return error(Code::kIo, "{}: cannot open", path);
  const auto end = in.tellg();
  if (end < 0) return error(Code::kIo, "{}: cannot tell its size", path);
  if (static_cast<uint64_t>(end) > limits.max_file_bytes)
    return error(Code::kInvalidArgument, "{}: {} bytes, over the limit of {} bytes", path,
                 static_cast<uint64_t>(end), limits.max_file_bytes);
  in.seekg(0);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) return error(Code::kIo, "{}: read failed", path);
  return decode_image(bytes.data(), bytes.size(), path, limits);
}

}  // namespace sustain::vision

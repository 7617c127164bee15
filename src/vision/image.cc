// Image decoding through stb_image (Debian's libstb), the decoder the
// reference uses, so decoded pixels, JPEG's IDCT and chroma upsampling
// included, are the reference's. stb_image trusts a file's structure more
// than we do: it skips PNG chunk CRCs, reads past the end of a JPEG as
// zeros, and (2.27) builds a Huffman table of any size into a fixed array. So
// the container is checked here first (PNG chunks and CRCs; JPEG segments
// from SOI to EOI, Huffman tables included, and that a scan decodes only
// with tables defined before it), and the pixel count is checked
// from the header before stb_image allocates anything. stb_image itself is
// compiled in stb_decode.cc, where its assertions are errors.
#include "vision/image.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "vision/stb_decode.h"

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

uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}

// One DHT segment's tables: class 0 or 1, id 0 to 3, and at most 256 codes
// each (a table over 256 writes past stb_image 2.27's arrays). Marks each
// table it defines in `defined[class][id]`.
Status check_dht(const uint8_t* p, size_t n, size_t off, const std::string& what,
                 bool (&defined)[2][4]) {
  while (n > 0) {
    if (n < 17)
      return error(Code::kBadFile, "{}: corrupt JPEG: Huffman table at offset {} is cut off", what,
                   off);
    const int tc = p[0] >> 4, th = p[0] & 15;
    if (tc > 1 || th > 3)
      return error(Code::kBadFile,
                   "{}: corrupt JPEG: Huffman table at offset {} has class {} and id {} (at most "
                   "1 and 3)",
                   what, off, tc, th);
    size_t codes = 0;
    for (int i = 1; i <= 16; ++i) codes += p[i];
    if (codes > 256)
      return error(Code::kBadFile,
                   "{}: corrupt JPEG: Huffman table at offset {} has {} codes (at most 256)", what,
                   off, codes);
    if (n - 17 < codes)
      return error(Code::kBadFile, "{}: corrupt JPEG: Huffman table at offset {} is cut off", what,
                   off);
    defined[tc][th] = true;
    p += 17 + codes;
    off += 17 + codes;
    n -= 17 + codes;
  }
  return Status::ok();
}

bool is_rst(uint8_t m) {
  return m >= 0xd0 && m <= 0xd7;
}

// A scan header (SOS) names, per component, the Huffman tables its data is
// decoded with. stb_image 2.27 does not check that a DHT defined them and
// would decode with whatever its freshly allocated tables hold, so every
// table the scan will read must have been defined before it: the DC table
// for a first DC pass (Ss = 0, Ah = 0; a baseline scan is one), the AC table
// for a scan with AC coefficients (Se > 0). A DC refinement pass reads no
// table. `p` and `n` are the segment after its length.
Status check_sos(const uint8_t* p, size_t n, size_t off, const std::string& what,
                 const bool (&defined)[2][4]) {
  if (n < 1 || n < 1 + 2 * size_t{p[0]} + 3)
    return error(Code::kBadFile, "{}: corrupt JPEG: scan header at offset {} is cut off", what,
                 off);
  const size_t comps = p[0];
  const uint8_t ss = p[1 + 2 * comps], se = p[2 + 2 * comps], ah = p[3 + 2 * comps] >> 4;
  for (size_t c = 0; c < comps; ++c) {
    const int td = p[2 + 2 * c] >> 4, ta = p[2 + 2 * c] & 15;
    const bool need_dc = ss == 0 && ah == 0, need_ac = se > 0;
    if (need_dc && (td > 3 || !defined[0][td]))
      return error(Code::kBadFile,
                   "{}: corrupt JPEG: the scan at offset {} decodes with DC Huffman table {}, "
                   "which no DHT segment before it defines",
                   what, off, td);
    if (need_ac && (ta > 3 || !defined[1][ta]))
      return error(Code::kBadFile,
                   "{}: corrupt JPEG: the scan at offset {} decodes with AC Huffman table {}, "
                   "which no DHT segment before it defines",
                   what, off, ta);
  }
  return Status::ok();
}

// Walks the segments from SOI to EOI the way a decoder reads them: each
// marker segment by its length, each scan's entropy-coded data up to the next
// marker (in it, 0xFF is only ever followed by a stuffed 0x00 or a restart
// marker). So a truncated file is one that ends before EOI, and every Huffman
// table the decoder will build is checked here first.
Status check_jpeg(const uint8_t* d, size_t n, const std::string& what) {
  size_t i = 2;  // past SOI
  bool scan = false;
  bool defined[2][4] = {};  // Huffman tables defined so far: [DC, AC][id]
  while (true) {
    if (i >= n)
      return error(Code::kBadFile, "{}: truncated JPEG: {} bytes, cut off before the end-of-image "
                   "marker", what, n);
    if (d[i] != 0xff)
      return error(Code::kBadFile, "{}: corrupt JPEG: byte {:#04x} at offset {} where a marker "
                   "belongs", what, d[i], i);
    const size_t at = i;
    while (i < n && d[i] == 0xff) ++i;  // fill bytes
    if (i >= n) continue;
    const uint8_t m = d[i++];
    if (m == 0xd9) {
      if (!scan) return error(Code::kBadFile, "{}: corrupt JPEG: no image scan", what);
      return Status::ok();
    }
    if (m == 0x01 || is_rst(m)) continue;  // markers without a length
    if (m == 0x00 || m == 0xd8)
      return error(Code::kBadFile, "{}: corrupt JPEG: marker {:#04x} at offset {}", what, m, at);
    if (n - i < 2)
      return error(Code::kBadFile, "{}: truncated JPEG: {} bytes, cut off in the segment at "
                   "offset {}", what, n, at);
    const size_t len = be16(d + i);
    if (len < 2)
      return error(Code::kBadFile, "{}: corrupt JPEG: segment at offset {} has length {}", what,
                   at, len);
    if (len > n - i)
      return error(Code::kBadFile, "{}: truncated JPEG: the segment at offset {} needs {} bytes, "
                   "the file ends {} bytes later", what, at, len, n - i);
    if (m == 0xc4) SUSTAIN_TRY(check_dht(d + i + 2, len - 2, i + 2, what, defined));
    if (m == 0xda) SUSTAIN_TRY(check_sos(d + i + 2, len - 2, at, what, defined));
    i += len;
    if (m == 0xda) {
      scan = true;
      while (true) {
        if (i + 1 >= n)
          return error(Code::kBadFile,
                       "{}: truncated JPEG: the scan at offset {} has no end-of-image marker "
                       "after it ({} bytes in all)", what, at, n);
        if (d[i] == 0xff && d[i + 1] != 0x00 && !is_rst(d[i + 1])) break;
        i += (d[i] == 0xff) ? 2 : 1;
      }
    }
  }
}

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

  stb::Info hdr;
  std::string reason;
  if (!stb::info(data, len, &hdr, &reason))
    return error(Code::kBadFile, "{}: corrupt {} header ({})", what, image_format_name(fmt),
                 reason);
  const int w = hdr.width, h = hdr.height;
  if (w <= 0 || h <= 0)
    return error(Code::kBadFile, "{}: {} says it is {}x{} pixels", what, image_format_name(fmt), w,
                 h);
  const uint64_t pixels = static_cast<uint64_t>(w) * static_cast<uint64_t>(h);
  if (pixels > limits.max_pixels)
    return error(Code::kInvalidArgument,
                 "{}: image is {}x{} = {} pixels, over the limit of {} pixels", what, w, h, pixels,
                 limits.max_pixels);

  // What a decode may allocate in all: the largest case (16-bit RGBA PNG)
  // holds the inflated rows, a 16-bit and an 8-bit copy and the RGB result.
  const uint64_t budget = pixels * 32 + (64ull << 20);
  Image img;
  stb::Info got;
  if (!stb::load_rgb(data, len, budget, &got, &img.rgb, &reason))
    return error(Code::kBadFile, "{}: corrupt {} data ({})", what, image_format_name(fmt),
                 reason);
  if (got.width != w || got.height != h)
    return error(Code::kBadFile, "{}: corrupt {}: header says {}x{}, data decodes as {}x{}", what,
                 image_format_name(fmt), w, h, got.width, got.height);
  img.width = w;
  img.height = h;
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

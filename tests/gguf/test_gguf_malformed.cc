// Malformed GGUF input: every file is built byte by byte here, and each must
// be rejected with Code::kBadFile and a message that names the problem. Runs
// under ASan+UBSan in the sanitize stage, so an over-read or overflow that a
// check misses fails loudly.
#include <cstring>
#include <limits>
#include <string_view>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "test_util.h"

namespace sustain::gguf {
namespace {

constexpr uint32_t kTypeU8 = 0, kTypeU32 = 4, kTypeBool = 7, kTypeString = 8, kTypeArray = 9,
                   kTypeU64 = 10;
constexpr uint32_t kF32 = 0, kQ4_0 = 2;
constexpr uint64_t kHuge = 1ull << 63;

// Little-endian byte builder for hand-made GGUF files.
class Bytes {
 public:
  template <typename T>
  Bytes& put(T x) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));
    b_.insert(b_.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t x) { return put(x); }
  Bytes& u32(uint32_t x) { return put(x); }
  Bytes& u64(uint64_t x) { return put(x); }
  Bytes& raw(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  Bytes& zeros(size_t n) {
    b_.insert(b_.end(), n, 0);
    return *this;
  }
  Bytes& pad(size_t align) { return zeros((align - b_.size() % align) % align); }

  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t x) { return str(key).u32(kTypeU32).u32(x); }
  Bytes& kv_str(std::string_view key, std::string_view s) {
    return str(key).u32(kTypeString).str(s);
  }
  Bytes& tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }

  const std::vector<uint8_t>& bytes() const { return b_; }
  size_t size() const { return b_.size(); }

 private:
  std::vector<uint8_t> b_;
};

// Parses from an exactly-sized heap copy, so ASan sees any read past the end.
Expected<File> parse_bytes(const std::vector<uint8_t>& bytes, const ReadOptions& opt = {}) {
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes);
  auto mapping =
      MappedFile::from_memory(copy->empty() ? nullptr : copy->data(), copy->size(), "bad.gguf");
  // Keep the buffer alive as long as the mapping: alias the mapping's control block.
  struct Holder {
    std::shared_ptr<std::vector<uint8_t>> buf;
    std::shared_ptr<MappedFile> map;
  };
  auto holder = std::make_shared<Holder>(Holder{copy, mapping});
  return File::parse(std::shared_ptr<MappedFile>(holder, holder->map.get()), opt);
}

#define expect_bad(...)           \
  do {                            \
    SCOPED_TRACE("expect_bad");   \
    expect_bad_impl(__VA_ARGS__); \
  } while (0)

void expect_bad_impl(const Bytes& b, std::initializer_list<std::string_view> words,
                     const ReadOptions& opt = {}) {
  auto f = parse_bytes(b.bytes(), opt);
  ASSERT_FALSE(f.has_value()) << "parse unexpectedly succeeded";
  EXPECT_EQ(f.status().code(), Code::kBadFile) << f.status().message();
  const std::string& msg = f.status().message();
  EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << "message must start with the path: " << msg;
  for (auto w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << "missing `" << w << "` in: " << msg;
}

// A valid file with one F32 tensor of 8 elements (32 bytes), for mutation.
Bytes one_tensor_file(uint64_t offset = 0, uint64_t data_bytes = 32) {
  Bytes b;
  b.header(1, 1).kv_str("general.architecture", "x").tensor("w", {8}, kF32, offset).pad(32);
  b.zeros(data_bytes);
  return b;
}

TEST(GgufMalformed, SanityTheBaseFilesParse) {
  auto f = parse_bytes(one_tensor_file().bytes());
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->tensors()[0].n_bytes, 32u);
  Bytes b;
  b.header(0, 0, 2);
  auto g = parse_bytes(b.bytes());
  ASSERT_TRUE(g.has_value()) << g.status().message();
  EXPECT_EQ(g->version(), 2u);
}

TEST(GgufMalformed, HeaderAndVersion) {
  expect_bad(Bytes(), {"empty file"});
  expect_bad(Bytes().raw("GGU"), {"too short"});
  expect_bad(Bytes().raw("GGUX").u32(3).u64(0).u64(0), {"bad magic", "not a GGUF file"});
  expect_bad(Bytes().raw("GGUF").u32(1).u32(0).u32(0), {"unsupported version 1"});
  expect_bad(Bytes().header(0, 0, 4), {"unsupported version 4"});
  expect_bad(Bytes().header(0, 0, 0), {"unsupported version 0"});
  // A big-endian v3 file: the version field reads 0x03000000 on a little-endian host.
  expect_bad(Bytes().raw("GGUF").u32(0x03000000u).u64(0).u64(0), {"big-endian"});
  expect_bad(Bytes().raw("FUGG").u32(0x03000000u), {"big-endian"});
  expect_bad(Bytes().raw("GGUF").u32(3).u64(0), {"truncated", "metadata count"});
}

TEST(GgufMalformed, HugeCountsAreBoundedBeforeAllocating) {
  expect_bad(Bytes().header(0, kHuge), {"metadata count 9223372036854775808", "limit"});
  expect_bad(Bytes().header(kHuge, 0), {"tensor count 9223372036854775808", "limit"});
  // With the caps lifted, the remaining-bytes bound still catches them (and a
  // count whose product with the record size wraps).
  ReadOptions no_caps;
  no_caps.max_kv = no_caps.max_tensors = std::numeric_limits<uint64_t>::max();
  expect_bad(Bytes().header(0, kHuge), {"more than the", "bytes left"}, no_caps);
  expect_bad(Bytes().header(kHuge, 0), {"more than the", "bytes left"}, no_caps);
  expect_bad(Bytes().header(~0ull, ~0ull), {"more than the"}, no_caps);
  expect_bad(Bytes().header(0, 1000).kv_u32("a", 1), {"1000 metadata entries"});
}

TEST(GgufMalformed, StringLengths) {
  // (Each file is long enough to pass the header's records-vs-bytes bound.)
  expect_bad(Bytes().header(0, 1).u64(1ull << 40).raw("key").zeros(16),
             {"metadata key #0", "bytes long"});
  expect_bad(Bytes().header(0, 1).u64(~0ull).raw("key").zeros(16), {"metadata key #0", "limit"});
  expect_bad(Bytes().header(0, 1).u64(30).raw("abcdefghijklmnop"),
             {"30 bytes long but only 16 bytes remain"});
  expect_bad(Bytes().header(0, 1).str("k").u32(kTypeString).u64(1ull << 32).raw("v"),
             {"key `k`", "bytes long"});
  ReadOptions small;
  small.max_string_bytes = 4;
  expect_bad(Bytes().header(0, 1).kv_str("k", "hello"), {"key `k`", "over the limit of 4"}, small);
  expect_bad(Bytes().header(0, 1).str("").u32(kTypeU32).u32(1), {"metadata key #0 is empty"});
}

TEST(GgufMalformed, MetadataTypes) {
  expect_bad(Bytes().header(0, 1).str("k").u32(13).u32(0), {"key `k`", "invalid type id 13"});
  expect_bad(Bytes().header(0, 1).str("k").u32(0xffffffffu).zeros(8),
             {"invalid type id 4294967295"});
  expect_bad(Bytes().header(0, 1).str("flag").u32(kTypeBool).u8(2),
             {"key `flag`", "invalid byte 2"});
  expect_bad(Bytes().header(0, 2).kv_u32("a", 1).kv_u32("a", 2), {"duplicate key `a`"});
  // Control bytes in a name are escaped in the message; long names are cut short.
  expect_bad(Bytes().header(0, 1).str("a\x1b[2Jb").u32(kTypeBool).u8(3),
             {"key `a\\x1b[2Jb`", "invalid byte 3"});
  expect_bad(Bytes().header(0, 1).str(std::string(5000, 'k')).u32(kTypeBool).u8(3),
             {"... (5000 bytes)`", "invalid byte 3"});
  expect_bad(Bytes().header(0, 1).str("k").u32(kTypeU64).u32(7), {"truncated", "key `k`"});
}

TEST(GgufMalformed, Arrays) {
  auto arr = [](uint32_t elem, uint64_t count) {
    Bytes b;
    b.header(0, 1).str("arr").u32(kTypeArray).u32(elem).u64(count);
    return b;
  };
  expect_bad(arr(99, 0), {"key `arr`", "invalid element type id 99"});
  expect_bad(arr(kTypeU32, 1ull << 40).u32(1), {"key `arr`", "limit"});
  expect_bad(arr(kTypeU32, 1000).u32(1), {"key `arr`", "1000 elements", "more than"});
  ReadOptions no_caps;
  no_caps.max_array_elems = std::numeric_limits<uint64_t>::max();
  // count * 8 wraps to 0 without the checked multiply.
  expect_bad(arr(kTypeU64, 1ull << 61), {"more than"}, no_caps);
  expect_bad(arr(kTypeString, 1ull << 62), {"more than"}, no_caps);
  expect_bad(arr(kTypeString, 2).str("ok").u64(1ull << 50), {"key `arr`[1]", "bytes long"});
  expect_bad(arr(kTypeBool, 2).u8(1).u8(7), {"key `arr`[1]", "invalid byte 7"});
  // An element's element type is checked too.
  expect_bad(arr(kTypeArray, 1).u32(42).u64(0), {"key `arr`[0]", "invalid element type id 42"});

  // Nesting: 8 levels of arrays are accepted at the default max_array_depth 8, 9 are not.
  auto nested = [](int levels) {
    Bytes b;
    b.header(0, 1).str("n").u32(kTypeArray);
    for (int i = 1; i < levels; ++i) b.u32(kTypeArray).u64(1);
    b.u32(kTypeU8).u64(1).u8(5);
    return b;
  };
  auto ok = parse_bytes(nested(8).bytes());
  ASSERT_TRUE(ok.has_value()) << ok.status().message();
  expect_bad(nested(9), {"key `n`", "deeper than 8"});
  expect_bad(nested(1000), {"deeper than 8"});

  // Typed accessor on an array of the wrong element type.
  auto f = parse_bytes(arr(kTypeU8, 2).u8(1).u8(2).bytes());
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto s = f->get_string_array("arr");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), Code::kBadFile);
  EXPECT_NE(s.status().message().find("`arr` is an array of uint8, expected an array of strings"),
            std::string::npos)
      << s.status().message();
}

TEST(GgufMalformed, Alignment) {
  auto with_alignment = [](uint32_t type, uint64_t value) {
    Bytes b;
    b.header(1, 1).str("general.alignment").u32(type);
    if (type == kTypeU64)
      b.u64(value);
    else
      b.u32(static_cast<uint32_t>(value));
    b.tensor("w", {8}, kF32, 0).pad(64).zeros(32);
    return b;
  };
  expect_bad(with_alignment(kTypeU32, 0), {"`general.alignment` is 0", "power of two"});
  expect_bad(with_alignment(kTypeU32, 48), {"`general.alignment` is 48", "power of two"});
  expect_bad(with_alignment(kTypeU32, 1u << 31), {"`general.alignment` is 2147483648", "limit"});
  expect_bad(with_alignment(kTypeU64, 64), {"`general.alignment` is a uint64, expected a uint32"});
  auto f = parse_bytes(with_alignment(kTypeU32, 64).bytes());
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
}

TEST(GgufMalformed, TensorInfos) {
  auto one = [](const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset = 0) {
    Bytes b;
    b.header(1, 0).tensor("blk.0.w", ne, type, offset).pad(32).zeros(64);
    return b;
  };
  expect_bad(one({8}, 99), {"tensor `blk.0.w`", "unknown tensor type id 99"});
  expect_bad(one({8}, 1000), {"unknown tensor type id 1000"});  // FP8: sustain-only, not GGUF
  expect_bad(one({8}, 4), {"unknown tensor type id 4"});        // removed Q4_2
  expect_bad(one({33}, kQ4_0), {"ne[0] = 33", "not a multiple", "Q4_0 block size 32"});
  expect_bad(one({8, 0}, kF32), {"ne[1] is 0"});
  expect_bad(one({0}, kF32), {"ne[0] is 0"});
  expect_bad(one({1, 1, 1, 1, 1}, kF32), {"n_dims is 5"});
  expect_bad(one({}, kF32), {"n_dims is 0"});
  expect_bad(one({1ull << 32, 1ull << 32}, kF32), {"element count", "overflows"});
  expect_bad(one({~0ull}, kF32), {"ne[0]", "out of range"});
  // 2^62 elements fit int64, but 2^62 * 4 bytes wraps.
  expect_bad(one({1ull << 31, 1ull << 31}, kF32), {"byte size overflows"});
  expect_bad(one({8}, kF32, 4), {"offset 4 is not a multiple of the alignment 32"});
  expect_bad(one({8}, kF32, 1ull << 20),
             {"bad.gguf: tensor `blk.0.w`: offset 1048576 + 32 bytes exceeds data section (64 "
              "bytes)"});
  // offset + size wraps around 2^64.
  expect_bad(one({8}, kF32, ~0ull - 31), {"exceeds data section"});
  expect_bad(one({32}, kF32, 32), {"offset 32 + 128 bytes exceeds data section (64 bytes)"});

  Bytes empty_name;
  empty_name.header(1, 0).tensor("", {8}, kF32, 0).pad(32).zeros(32);
  expect_bad(empty_name, {"tensor #0 has an empty name"});
  Bytes name_len;
  name_len.header(1, 0).u64(1ull << 40).raw("w").zeros(40);
  expect_bad(name_len, {"tensor #0 name", "bytes long"});
}

TEST(GgufMalformed, TensorLayout) {
  Bytes dup;
  dup.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64);
  expect_bad(dup, {"duplicate tensor name `w`"});

  Bytes overlap;
  overlap.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(64);
  expect_bad(overlap, {"`a` (bytes 0..64)", "`b` (bytes 32..64)", "overlap"});
  // Overlap found regardless of info order.
  Bytes overlap2;
  overlap2.header(3, 0)
      .tensor("c", {8}, kF32, 96)
      .tensor("b", {8}, kF32, 32)
      .tensor("a", {64}, kF32, 0)
      .pad(32)
      .zeros(256);
  expect_bad(overlap2, {"`a`", "`b`", "overlap"});
  Bytes same;
  same.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0).pad(32).zeros(32);
  expect_bad(same, {"overlap"});

  // Adjacent (not overlapping) and out-of-order tensors are fine.
  Bytes fine;
  fine.header(2, 0).tensor("b", {8}, kF32, 32).tensor("a", {8}, kF32, 0).pad(32).zeros(64);
  auto f = parse_bytes(fine.bytes());
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->find_tensor("b")->data, f->find_tensor("a")->data + 32);

  // The data section would start past the end of the file (no padding written).
  Bytes unpadded;
  unpadded.header(1, 0).tensor("w", {8}, kF32, 0);
  ASSERT_NE(unpadded.size() % 32, 0u);
  expect_bad(unpadded, {"data section would start at offset", "past the end"});
}

// A valid file with every metadata type and several tensors; its last tensor
// ends exactly at the end of the file, so every strict prefix is invalid.
std::vector<uint8_t> rich_file() {
  Bytes b;
  b.header(3, 5)
      .kv_str("general.architecture", "llama")
      .kv_u32("llama.block_count", 3)
      .str("flags")
      .u32(kTypeArray)
      .u32(kTypeBool)
      .u64(3)
      .u8(1)
      .u8(0)
      .u8(1)
      .str("nested")
      .u32(kTypeArray)
      .u32(kTypeArray)
      .u64(2)
      .u32(kTypeString)
      .u64(2)
      .str("a")
      .str("bc")
      .u32(kTypeU8)
      .u64(1)
      .u8(9)
      .str("f64")
      .u32(12)
      .put(2.5);
  b.tensor("a", {32}, kQ4_0, 0).tensor("b", {4, 2}, kF32, 32).tensor("c", {8}, kF32, 64).pad(32);
  for (int i = 0; i < 18 + 14 + 32 + 32; ++i) b.u8(static_cast<uint8_t>(i * 7));
  return b.bytes();
}

TEST(GgufMalformed, EveryTruncationFailsCleanly) {
  auto full = rich_file();
  auto f = parse_bytes(full);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 3u);
  const auto& last = f->tensors()[2];
  ASSERT_EQ(f->data_offset() + last.offset + last.n_bytes, full.size());
  auto nested = f->get_string_array("nested");
  ASSERT_FALSE(nested.has_value());
  EXPECT_NE(nested.status().message().find("`nested` is an array of array"), std::string::npos);
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    auto g = parse_bytes(prefix);
    ASSERT_FALSE(g.has_value()) << "prefix of " << n << " bytes parsed";
    ASSERT_EQ(g.status().code(), Code::kBadFile) << n << ": " << g.status().message();
    ASSERT_EQ(g.status().message().rfind("bad.gguf: ", 0), 0u) << g.status().message();
  }
}

TEST(GgufMalformed, EverySingleByteCorruptionIsHandled) {
  // Not every corruption is detectable (a changed weight byte is still a valid
  // file), but none may crash, and every failure must be a kBadFile.
  auto full = rich_file();
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x7f}, uint8_t{0x80}, uint8_t{0xff}}) {
      auto bytes = full;
      bytes[i] = v;
      auto g = parse_bytes(bytes);
      if (!g.has_value()) {
        ASSERT_EQ(g.status().code(), Code::kBadFile) << i << ": " << g.status().message();
        continue;
      }
      for (const auto& t : g->tensors()) {
        ASSERT_GE(t.data, g->mapping()->data());
        ASSERT_LE(t.data + t.n_bytes, g->mapping()->data() + g->file_size());
      }
    }
  }
}

}  // namespace
}  // namespace sustain::gguf

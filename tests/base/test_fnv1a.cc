#include "base/fnv1a.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string_view>
#include <vector>

namespace sustain {
namespace {

// The published FNV-1a 64-bit test vectors (Noll's reference set).
TEST(Fnv1a, BytesMatchThePublishedVectors) {
  const auto h = [](std::string_view s) { return fnv1a_bytes(s.data(), s.size()); };
  EXPECT_EQ(h(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(h("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(h("foobar"), 0x85944171f73967e8ull);
}

// One step per id: for ids below 256 that is the byte form over their values.
TEST(Fnv1a, IdsStepOncePerId) {
  const std::vector<int32_t> ids{'f', 'o', 'o', 'b', 'a', 'r'};
  EXPECT_EQ(fnv1a_ids(std::span<const int32_t>(ids)), 0x85944171f73967e8ull);
  // A negative id (an image position's key) hashes as its 32-bit pattern,
  // and a wider id differs from its low byte.
  const std::vector<int32_t> neg{-1}, wide{0x101}, low{0x01};
  const std::vector<uint32_t> all_ones{0xffffffffu};
  EXPECT_EQ(fnv1a_ids(std::span<const int32_t>(neg)),
            fnv1a_ids(std::span<const uint32_t>(all_ones)));
  EXPECT_NE(fnv1a_ids(std::span<const int32_t>(wide)), fnv1a_ids(std::span<const int32_t>(low)));
  // The start value chains: hashing in two pieces is hashing the whole.
  const std::span<const int32_t> all(ids);
  EXPECT_EQ(fnv1a_ids(all.subspan(3), fnv1a_ids(all.first(3))), fnv1a_ids(all));
}

TEST(Fnv1a, U64IsItsBytesLeastSignificantFirst) {
  const uint64_t v = 0x0123456789abcdefull;
  const unsigned char le[8] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};
  EXPECT_EQ(fnv1a_u64(v), fnv1a_bytes(le, 8));
  if constexpr (std::endian::native == std::endian::little) {
    EXPECT_EQ(fnv1a_u64(v), fnv1a_bytes(&v, 8));
  }
  static_assert(fnv1a_u64(0) != kFnv1aBasis);  // usable in constant expressions
}

}  // namespace
}  // namespace sustain

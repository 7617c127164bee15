// FNV-1a (Fowler, Noll, Vo): the 64-bit hash the engine keys things by where
// a key must be the same in every run and on every platform (a seed drawn
// from a prompt, a prefix-cache page, a token sequence in a map). Two forms:
// over token ids a whole 32-bit id at a time (fewer multiplies; the ids'
// values, not their bytes), and over bytes (the textbook definition).
// Neither is a defence against chosen collisions: every user compares the
// keyed content, or only needs a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace sustain {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

// One step: h takes in v (a byte, or a whole id for the word form).
constexpr uint64_t fnv1a_step(uint64_t h, uint64_t v) {
  return (h ^ v) * kFnv1aPrime;
}

// Over ids, one step per id as an unsigned 32-bit value.
template <class Int>
constexpr uint64_t fnv1a_ids(std::span<const Int> ids, uint64_t h = kFnv1aBasis) {
  static_assert(std::is_integral_v<Int> && sizeof(Int) <= 4, "ids are 32-bit at most");
  for (Int x : ids) h = fnv1a_step(h, static_cast<uint32_t>(x));
  return h;
}

// Over n bytes at p.
inline uint64_t fnv1a_bytes(const void* p, size_t n, uint64_t h = kFnv1aBasis) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = fnv1a_step(h, b[i]);
  return h;
}

// Over the 8 bytes of v, least significant first (the same on any
// byte order).
constexpr uint64_t fnv1a_u64(uint64_t v, uint64_t h = kFnv1aBasis) {
  for (int i = 0; i < 8; ++i) h = fnv1a_step(h, (v >> (8 * i)) & 0xff);
  return h;
}

}  // namespace sustain

// Overflow-checked integer arithmetic for sizes that come from untrusted input.
#pragma once

#include <cstdint>
#include <optional>

namespace sustain {

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds x up to a multiple of `align` (a power of two), or nullopt on overflow.
inline std::optional<uint64_t> checked_align_up(uint64_t x, uint64_t align) {
  auto s = checked_add(x, align - 1);
  if (!s) return std::nullopt;
  return *s & ~(align - 1);
}

inline bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace sustain

// SplitMix64 (Steele, Lea, Flood 2014): a tiny, fast, statistically good
// 64-bit generator with a portable definition, so a seed gives the same
// stream on every platform and standard library (std's distributions do
// not). Used wherever a seed must reproduce a file or a test case exactly.
#pragma once

#include <cstdint>

namespace sustain {

struct SplitMix64 {
  uint64_t s = 0;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0); the modulo bias is below 2^-40 for n < 2^24.
  uint64_t below(uint64_t n) { return next() % n; }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

}  // namespace sustain

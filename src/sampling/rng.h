// The per-request random number generator: xoshiro256** seeded through
// splitmix64. Both are fully specified integer algorithms, so a seed gives the
// same stream on every platform and standard library (std::mt19937_64 would
// too, but the distributions layered on it, e.g. uniform_real_distribution,
// are implementation-defined; uniform() below fixes that conversion).
#pragma once

#include <array>
#include <cstdint>

namespace sustain::sampling {

class Rng {
 public:
  // splitmix64 spreads a small or zero seed over the 256-bit state, which
  // xoshiro needs to be non-zero and well mixed.
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& s : s_) s = splitmix64(x);
  }

  // A raw state, for known-answer tests of the generator itself.
  static Rng from_state(const std::array<uint64_t, 4>& state) {
    Rng r(0);
    r.s_ = state;
    return r;
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double uniform() { return to_unit(next()); }

  // The top 53 bits as a double's mantissa: every value is exactly
  // representable and the largest, 1 - 2^-53, stays below 1.
  static double to_unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

  // One step of splitmix64 on `x` (advanced in place); public for its test.
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::array<uint64_t, 4> s_{};
};

}  // namespace sustain::sampling

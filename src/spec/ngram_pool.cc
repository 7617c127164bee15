#include "spec/ngram_pool.h"

#include <algorithm>
#include <bit>

namespace sustain::spec {
namespace {

constexpr int kTokenBits = 24;
constexpr uint64_t kTokenMask = (uint64_t{1} << kTokenBits) - 1;

}  // namespace

NgramPool::NgramPool(size_t bytes, int n_min, int n_max)
    : n_min_(std::max(1, n_min)), n_max_(std::max(n_min_, n_max)) {
  const size_t n = std::bit_floor(std::max<size_t>(1, bytes / sizeof(uint64_t)));
  slots_.assign(n, 0);
  mask_ = n - 1;
}

uint64_t NgramPool::hash(const int32_t* t, int n) {
  // Different n give different hashes for the same tokens.
  uint64_t h = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(n + 1);
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

void NgramPool::insert(std::span<const int32_t> tokens) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t i = 1; i < len; ++i) {
    const int32_t next = tokens[static_cast<size_t>(i)];
    if (next < 0 || static_cast<uint64_t>(next) >= kTokenMask) continue;  // image keys
    for (int n = n_min_; n <= n_max_ && n <= i; ++n) {
      const int32_t* g = tokens.data() + i - n;
      if (std::any_of(g, g + n, [](int32_t x) { return x < 0; })) break;
      const uint64_t h = hash(g, n);
      slots_[h & mask_] = (h & ~kTokenMask) | (static_cast<uint64_t>(next) + 1);
      ++inserted_;
    }
  }
}

int32_t NgramPool::lookup(const int32_t* t, int n) const {
  const uint64_t h = hash(t, n);
  const uint64_t s = slots_[h & mask_];
  if ((s & kTokenMask) == 0 || (s & ~kTokenMask) != (h & ~kTokenMask)) return -1;
  return static_cast<int32_t>((s & kTokenMask) - 1);
}

int NgramPool::propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) const {
  // The tail the n-grams are read from: the sequence's last n_max tokens,
  // then the tokens drafted so far.
  std::vector<int32_t> tail(tokens.end() - std::min<ptrdiff_t>(n_max_, std::ssize(tokens)),
                            tokens.end());
  int got = 0;
  while (got < k) {
    int32_t next = -1;
    const int have = static_cast<int>(tail.size());
    for (int n = std::min(n_max_, have); n >= n_min_ && next < 0; --n)
      next = lookup(tail.data() + have - n, n);
    if (next < 0) break;
    out.push_back(next);
    tail.push_back(next);
    ++got;
  }
  return got;
}

}  // namespace sustain::spec

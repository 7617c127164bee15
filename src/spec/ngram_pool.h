// The n-gram pool that every request's prompt lookup shares (`ngram`
// proposer, --spec-ngram-pool-mb): a fixed-size table from a hash of n
// tokens to the token that followed them, filled with the prompt and output
// of every request that completes. A request whose own tokens hold no match
// is drafted from what other requests saw, so documents repeated across
// requests (the same file quoted by many users, an agent re-reading its
// tool outputs) help each other.
//
// Direct-mapped and lossy: a slot holds a 40-bit tag of its n-gram's hash
// and the next token (24 bits); a newer n-gram that maps to the slot
// replaces the older one. Memory is exactly what was asked, whatever the
// traffic; a tag collision (2^-40 per lookup) costs one rejected draft,
// never a wrong output (drafts are verified).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sustain::spec {

class NgramPool {
 public:
  // `bytes` of table (rounded down to a power of two of 8-byte slots; at
  // least one slot); n-grams of n_min..n_max tokens are stored.
  NgramPool(size_t bytes, int n_min, int n_max);

  // Records every n-gram of `tokens` with the token after it.
  void insert(std::span<const int32_t> tokens);
  // Appends up to k tokens that may follow `tokens`: the longest n-gram
  // suffix found gives the next token, which is appended and looked up
  // again (chained), so a draft can run past the end of what one request
  // saw. Returns the number appended.
  int propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) const;

  size_t bytes() const { return slots_.size() * sizeof(uint64_t); }
  uint64_t inserted() const { return inserted_; }

 private:
  static uint64_t hash(const int32_t* t, int n);
  int32_t lookup(const int32_t* t, int n) const;  // -1 when absent

  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
  int n_min_, n_max_;
  uint64_t inserted_ = 0;
};

}  // namespace sustain::spec

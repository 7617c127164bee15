// Prompt lookup ("ngram"): the longest suffix of the sequence, n tokens for
// n from ngram_max down to 1, that occurred earlier in the sequence (its
// prompt or its output) proposes the tokens that followed its most recent
// earlier occurrence. Free to compute, and right where the output repeats
// the input: code edits, quoting, structured documents.
//
// Where the sequence itself holds no match, the pool shared by all requests
// (spec/ngram_pool.h, filled by every request that completes) drafts
// instead, when it was given memory (--spec-ngram-pool-mb).
#pragma once

#include <memory>

#include "spec/ngram_pool.h"
#include "spec/proposer.h"

namespace sustain::spec {

class NgramProposer final : public Proposer {
 public:
  // pool_bytes 0: no shared pool, each request looks up only its own tokens.
  explicit NgramProposer(int ngram_max, size_t pool_bytes = 0);
  const char* name() const override { return "ngram"; }
  void propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) override;
  void completed(std::span<const int32_t> tokens, const sampling::SamplerConfig&) override;
  const NgramPool* pool() const { return pool_.get(); }

  // The scan is bounded: only the last kWindow tokens are searched, so a
  // step costs O(kWindow · n) at any context length.
  static constexpr int64_t kWindow = 1 << 16;

 private:
  int ngram_max_;
  std::unique_ptr<NgramPool> pool_;
};

}  // namespace sustain::spec

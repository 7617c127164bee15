// Prompt lookup ("ngram"): the longest suffix of the sequence, n tokens for
// n from ngram_max down to 1, that occurred earlier in the sequence (its
// prompt or its output) proposes the tokens that followed its most recent
// earlier occurrence. Free to compute, and right where the output repeats
// the input: code edits, quoting, structured documents.
#pragma once

#include "spec/proposer.h"

namespace sustain::spec {

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(int ngram_max) : ngram_max_(ngram_max) {}
  const char* name() const override { return "ngram"; }
  void propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) override;

  // The scan is bounded: only the last kWindow tokens are searched, so a
  // step costs O(kWindow · n) at any context length.
  static constexpr int64_t kWindow = 1 << 16;

 private:
  int ngram_max_;
};

}  // namespace sustain::spec

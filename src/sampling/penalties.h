// Repetition penalties over a sliding window of the request's recent tokens
// (prompt tokens and generated ones), with llama.cpp's semantics: for every
// token that occurs c > 0 times in the last `last_n` tokens,
//   logit = logit > 0 ? logit / repeat : logit * repeat   (repeat penalty)
//   logit -= c * frequency + presence                      (OpenAI-style)
// The repeat penalty multiplies non-positive logits because dividing them
// would make a repeated token *more* likely.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/processors.h"

namespace sustain::sampling {

class PenaltyHistory {
 public:
  // last_n = 0 keeps no history (and penalizes nothing). The window is
  // allocated here, once.
  PenaltyHistory(int32_t last_n, float repeat, float frequency, float presence);

  // True if apply() can change any logit.
  bool active() const {
    return !window_.empty() && (repeat_ != 1.0f || frequency_ != 0.0f || presence_ != 0.0f);
  }

  // Records a token; the oldest drops out once the window is full. Tokens
  // outside [0, n_vocab) are kept in the window (they occupy a slot, as any
  // token does) but never penalize anything.
  void accept(int32_t token);

  // Applies the penalties to c, which must hold the whole vocabulary in id
  // order (c.data[i].id == i), as the chain's first step sees it. Sizes the
  // per-token counts for n_vocab = c.size the first time (or when the
  // vocabulary changes); otherwise allocates nothing.
  void apply(Candidates& c);

  // How many times `token` occurs in the window (for tests).
  int32_t count(int32_t token) const;
  int32_t size() const { return size_; }

 private:
  void rebuild_counts(size_t n_vocab);

  std::vector<int32_t> window_;  // ring buffer, capacity last_n
  int32_t head_ = 0;             // next slot to write
  int32_t size_ = 0;
  // counts_[t] = occurrences of t in the window, for t < counts_.size() (the
  // vocabulary size seen by apply(); empty before the first apply).
  std::vector<int32_t> counts_;
  float repeat_, frequency_, presence_;
};

}  // namespace sustain::sampling

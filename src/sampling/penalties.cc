#include "sampling/penalties.h"

#include <algorithm>

#include "base/status.h"

namespace sustain::sampling {

PenaltyHistory::PenaltyHistory(int32_t last_n, float repeat, float frequency, float presence)
    : window_(static_cast<size_t>(std::max(last_n, 0))),
      repeat_(repeat),
      frequency_(frequency),
      presence_(presence) {}

void PenaltyHistory::accept(int32_t token) {
  if (window_.empty()) return;
  const auto in_vocab = [this](int32_t t) {
    return t >= 0 && static_cast<size_t>(t) < counts_.size();
  };
  const int32_t cap = static_cast<int32_t>(window_.size());
  if (size_ == cap) {
    const int32_t old = window_[head_];  // the oldest, about to be overwritten
    if (in_vocab(old)) --counts_[old];
  } else {
    ++size_;
  }
  window_[head_] = token;
  head_ = head_ + 1 == cap ? 0 : head_ + 1;
  if (in_vocab(token)) ++counts_[token];
}

void PenaltyHistory::rebuild_counts(size_t n_vocab) {
  counts_.assign(n_vocab, 0);
  for (int32_t i = 0; i < size_; ++i) {
    const int32_t t = window_[i];  // the window's filled slots are [0, size_) in any order
    if (t >= 0 && static_cast<size_t>(t) < n_vocab) ++counts_[t];
  }
}

void PenaltyHistory::apply(Candidates& c) {
  if (!active()) return;
  if (counts_.size() != c.size) rebuild_counts(c.size);
  // Each distinct token is penalized once however often it occurs: the first
  // visit negates its count as a "done" mark, and the second loop restores it.
  // This walks only the window, never the vocabulary.
  for (int32_t i = 0; i < size_; ++i) {
    const int32_t t = window_[i];
    if (t < 0 || static_cast<size_t>(t) >= counts_.size() || counts_[t] <= 0) continue;
    const int32_t n = counts_[t];
    Candidate& cand = c.data[t];
    SUSTAIN_CHECK(cand.id == t);
    cand.logit = cand.logit > 0.0f ? cand.logit / repeat_ : cand.logit * repeat_;
    cand.logit -= static_cast<float>(n) * frequency_ + presence_;
    counts_[t] = -n;
  }
  for (int32_t i = 0; i < size_; ++i) {
    const int32_t t = window_[i];
    if (t >= 0 && static_cast<size_t>(t) < counts_.size() && counts_[t] < 0)
      counts_[t] = -counts_[t];
  }
  c.sorted = false;
}

int32_t PenaltyHistory::count(int32_t token) const {
  int32_t n = 0;
  for (int32_t i = 0; i < size_; ++i) n += window_[i] == token;
  return n;
}

}  // namespace sustain::sampling

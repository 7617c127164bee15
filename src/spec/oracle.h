// The "oracle:ALPHA" proposer, for measurement only: it drafts the target's
// own greedy continuation with each token replaced by a wrong one with
// probability 1 − ALPHA, so the speedup of speculative decoding can be
// measured end to end against a known acceptance on random-weight models of
// real size (whose outputs no real proposer predicts). Every report names it
// as an oracle.
//
// It knows a continuation only from a first pass: every request that
// completes greedily (temperature 0, not cancelled) is recorded
// (Proposer::completed), and a later sequence whose tokens so far are a
// prefix of a recorded one is drafted the recorded tokens that follow. So
// `bench` measures it on its repetitions (the fill run of each rung is the
// first pass), `run` makes a first pass itself, and a server learns from the
// requests it has answered. At temperature > 0 the drafts are still verified
// exactly; they are just the greedy path, accepted as often as sampling
// agrees with it.
//
// Memory is bounded: at most kMaxTokens recorded tokens, the oldest
// recordings dropped first.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "spec/proposer.h"

namespace sustain::spec {

class OracleProposer final : public Proposer {
 public:
  // alpha in [0, 1]; wrong tokens are drawn from [0, n_vocab) without the
  // right one, from a stream fixed by `seed`, the sequence and the position.
  OracleProposer(double alpha, int64_t n_vocab, uint64_t seed = 0);
  const char* name() const override { return "oracle"; }
  void propose_batch(std::span<Job> jobs) override;
  void forget(uint64_t seq) override { matched_.erase(seq); }
  void completed(std::span<const int32_t> tokens, const sampling::SamplerConfig& s) override;

  double alpha() const { return alpha_; }
  size_t recordings() const { return book_.size(); }

  // Recordings are found by a hash of their first kKeyTokens tokens (a
  // prompt shorter than that is hashed whole when it is recorded too).
  static constexpr size_t kKeyTokens = 32;
  static constexpr size_t kMaxTokens = size_t{1} << 24;

 private:
  struct Recording {
    uint64_t id = 0;
    std::vector<int32_t> tokens;
  };
  const Recording* find(uint64_t seq, std::span<const int32_t> tokens);
  static uint64_t key(std::span<const int32_t> tokens, size_t n);

  double alpha_;
  int64_t n_vocab_;
  uint64_t seed_;
  uint64_t next_id_ = 1;
  size_t total_tokens_ = 0;
  std::deque<Recording> book_;
  // key of the first min(kKeyTokens, n) tokens, with n → recording ids.
  std::unordered_multimap<uint64_t, uint64_t> index_;
  // A sequence's recording once found, checked again only over its new tokens.
  struct Match {
    uint64_t id = 0;
    size_t checked = 0;
  };
  std::unordered_map<uint64_t, Match> matched_;
};

// "oracle:0.8" -> 0.8; an error naming --spec for anything else.
Expected<double> parse_oracle_alpha(const std::string& type);

}  // namespace sustain::spec

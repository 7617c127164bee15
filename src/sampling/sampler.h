// Token sampling for one request: a typed config validated at the edge, and a
// Sampler that owns everything a request's sampling needs (its RNG, its
// penalty history, a reusable candidate buffer) so requests never share state
// and a decode step allocates nothing.
//
// The chain is llama.cpp's default order:
//   logit bias → penalties → top-k → top-p → min-p → temperature → softmax → draw
// so top-p and min-p see the temperature-1 distribution, and temperature only
// reshapes what survives them. temperature 0 is greedy: the argmax of the
// penalized logits (lowest id on ties), the token every filter keeps anyway.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "sampling/constraint.h"
#include "sampling/penalties.h"
#include "sampling/processors.h"
#include "sampling/rng.h"

namespace sustain::sampling {

struct SamplerConfig {
  float temperature = 0.8f;        // 0 = greedy; at most kMaxTemperature
  int32_t top_k = 40;              // 0 = disabled
  float top_p = 0.95f;             // in (0, 1]; 1 = disabled
  float min_p = 0.05f;             // in [0, 1]; 0 = disabled
  float repeat_penalty = 1.0f;     // in (0, kMaxRepeatPenalty]; 1 = disabled
  int32_t repeat_last_n = 64;      // window of recent tokens penalized; 0 = none
  float presence_penalty = 0.0f;   // in [-2, 2], OpenAI's range
  float frequency_penalty = 0.0f;  // in [-2, 2]
  // Added to the named tokens' logits before anything else (OpenAI's
  // logit_bias): each id at most once, each bias in [-100, 100]. Ids are
  // checked against the vocabulary where it is known (the server's edge).
  std::vector<LogitBias> logit_bias;
  // Used as given (0 is a seed like any other), so a request replays exactly;
  // a caller that wants fresh randomness draws a seed at the edge.
  uint64_t seed = 0;
  // Which tokens may come next (a grammar or JSON schema), applied after
  // logit bias and penalties; each Sampler starts its own state. Null = none.
  std::shared_ptr<const ConstraintFactory> constraint;
};

constexpr float kMaxTemperature = 100.0f;
constexpr float kMaxRepeatPenalty = 10.0f;
constexpr float kMaxPresenceFrequencyPenalty = 2.0f;
constexpr float kMaxLogitBias = 100.0f;  // OpenAI's range is [-100, 100]
// The window is allocated up front; "-1 = whole context" (llama.cpp) must be
// resolved to the context length by the caller.
constexpr int32_t kMaxRepeatLastN = 1 << 20;

// kInvalidArgument naming the field and the value, e.g.
// "sampler: top_p must be in (0, 1] (1 disables it), got 1.5".
Status validate(const SamplerConfig& config);

// One entry of the distribution a token was drawn from.
struct TokenProb {
  int32_t id;
  float prob;
  float logprob;  // ln(prob); -inf for prob 0
};

// The accept/resample step of speculative sampling on its own, for tests:
// p is the target's final distribution (Candidate::prob over p's live
// entries), q_by_id the proposal indexed by token id (n_vocab entries),
// u_accept and u_residual two uniforms in [0, 1). Returns the index into
// p.data of the token chosen, or -1 when `draft` was accepted.
int64_t speculative_choice(const Candidates& p, int32_t draft, std::span<const float> q_by_id,
                           double u_accept, double u_residual);

// The same over a dense target: p_by_id[i] is token i's probability, as a
// list of candidates in id order would hold them (a temperature alone).
// Returns the token chosen, or -1 when `draft` was accepted: bit for bit
// what speculative_choice returns on those candidates.
int64_t speculative_choice_dense(std::span<const float> p_by_id, int32_t draft,
                                 std::span<const float> q_by_id, double u_accept,
                                 double u_residual);

class Sampler {
 public:
  // Validates the config first.
  static Expected<Sampler> create(const SamplerConfig& config);
  // Precondition: validate(config) is ok (checked; a failure is a caller bug).
  explicit Sampler(const SamplerConfig& config);
  // Moves keep live_ valid (a vector's storage moves with it); a copy would
  // alias the source's buffer, and two requests must never share state.
  Sampler(Sampler&&) = default;
  Sampler& operator=(Sampler&&) = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Runs the chain on logits[0, n_vocab), draws a token with this request's
  // RNG and records it in the penalty history (and the constraint, if any). Allocates only on the
  // first call (or when n_vocab grows). n_vocab must be > 0.
  int32_t sample(const float* logits, int32_t n_vocab);

  // Speculative verification against a drafted token (Leviathan et al.,
  // "Fast Inference from Transformers via Speculative Decoding"): runs the
  // chain on logits exactly as sample() does, giving the target
  // distribution p, then accepts `draft` with probability min(1, p(d)/q(d))
  // and otherwise draws from the normalised residual max(0, p - q). q is the
  // proposal `draft` was drawn from (any order; ids absent have q = 0). The
  // token returned is distributed exactly as sample()'s would be; it equals
  // `draft` iff the draft was accepted. Greedy (temperature 0) returns the
  // argmax whatever q says. Records the token like sample().
  int32_t sample_speculative(const float* logits, int32_t n_vocab, int32_t draft,
                             std::span<const TokenProb> q);

  // The number of candidates in the last call's final distribution (what
  // top_probs() can return at most).
  size_t n_live() const { return last_greedy_ ? 1 : dense_n_ > 0 ? dense_n_ : live_.size; }

  // Records a token this sampler did not draw (prompt tokens, tokens forced
  // by the caller) so penalties see it.
  void accept(int32_t token);

  // The last sampled token with its probability in the final distribution
  // (after the whole chain, at the configured temperature). Greedy sampling is
  // a point mass: prob 1, logprob 0.
  TokenProb last() const { return last_; }

  // Writes the most probable min(out.size(), live candidates) entries of the
  // last call's final distribution, most probable first (ties: lower id),
  // and returns how many. Reorders the internal buffer; allocates nothing.
  size_t top_probs(std::span<TokenProb> out);

  // Writes the id and prob of the first min(out.size(), n_live()) entries
  // of the last call's final distribution in no particular order (a
  // temperature alone: by id), logprob left 0, and returns how many: a
  // proposal q for sample_speculative in one pass, where top_probs would
  // sort 49,152 entries. Allocates nothing.
  size_t probs(std::span<TokenProb> out) const;

  const SamplerConfig& config() const { return config_; }
  const PenaltyHistory& history() const { return history_; }

 private:
  // No logit bias, penalty or constraint: the chain sees the logits as given.
  bool logits_untouched() const {
    return config_.logit_bias.empty() && !history_.active() && !constraint_;
  }
  // logit bias, penalties and the constraint on logits[0, n_vocab) into live_.
  void prepare(const float* logits, int32_t n_vocab);
  // top-k .. softmax on live_ (temperature > 0).
  void finish_chain();
  // No top-k and nothing before the chain: its shortcuts from the raw logits
  // apply (processors.h: softmax_logits, nucleus_logits).
  bool wide_ok(int32_t n_vocab) const {
    return (config_.top_k <= 0 || config_.top_k >= n_vocab) && logits_untouched();
  }
  // sample() by those shortcuts (temperature > 0): the token the chain would
  // draw, or -1 (no draw made) where the chain must decide.
  int32_t sample_wide(const float* logits, int32_t n_vocab);
  // live_ ← the chain's final candidates by nucleus_logits (top_p < 1 or
  // min_p > 0); false (live_ unspecified) where the chain must decide.
  bool nucleus_chain(const float* logits, int32_t n_vocab);
  void record(int32_t token);
  std::vector<float> q_dense_;     // speculative: the proposal by id, zero between calls

  SamplerConfig config_;
  Rng rng_;
  PenaltyHistory history_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::vector<Candidate> buffer_;  // grows to n_vocab once, then reused
  // sample_wide's weights, or after a temperature-only call the whole
  // distribution by id (then dense_n_ is its size, else 0).
  std::vector<float> dense_;
  size_t dense_n_ = 0;
  std::vector<uint64_t> keys_;     // nucleus_chain's sort keys
  Candidates live_;                // the last call's final candidates, in buffer_
  TokenProb last_{-1, 0.0f, 0.0f};
  bool last_greedy_ = false;
};

}  // namespace sustain::sampling

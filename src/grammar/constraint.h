// A Grammar as a sampling constraint: each request's Sampler gets its own
// Matcher and mask cache; the grammar, the vocabulary's sorted token bytes
// and a cache of masks by state content are shared by all of them.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/token_masks.h"
#include "sampling/constraint.h"

namespace sustain::grammar {

class GrammarConstraint final : public sampling::ConstraintFactory {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab)
      : grammar_(std::move(g)),
        vocab_(std::move(vocab)),
        shared_(std::make_shared<SharedMasks>()),
        times_(std::make_shared<MaskTimes>()) {}

  std::unique_ptr<sampling::TokenConstraint> start() const override;

  // kInvalidArgument when no token of the vocabulary can begin a sentence of
  // the grammar (and the empty sentence is not one): such a request could
  // only stop at once.
  Status check_startable() const;

  // Measuring what the constraint costs (`sustain bench --ablate grammar=`):
  // while on, every mask a state asks for (each constrained token) records
  // how long it took, cache hits included, in microseconds. Off by default:
  // a server does not pay the clock reads.
  void record_mask_times(bool on) { times_->on.store(on, std::memory_order_relaxed); }
  // The times recorded since the last call (at most kMaxMaskTimes are kept).
  std::vector<float> take_mask_times_us() const;
  static constexpr size_t kMaxMaskTimes = size_t{1} << 22;

  struct MaskTimes {
    std::atomic<bool> on{false};
    std::mutex mu;
    std::vector<float> us;
  };

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  // Masks every state started here shares (the choices of a request, and
  // every request a server sends to this constraint).
  std::shared_ptr<SharedMasks> shared_;
  std::shared_ptr<MaskTimes> times_;
};

}  // namespace sustain::grammar

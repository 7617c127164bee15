// A Grammar as a sampling constraint: each request's Sampler gets its own
// Matcher and mask cache; the grammar, the vocabulary's sorted token bytes
// and a cache of masks by state content are shared by all of them.
#pragma once

#include <memory>

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
        shared_(std::make_shared<SharedMasks>()) {}

  std::unique_ptr<sampling::TokenConstraint> start() const override;

  // kInvalidArgument when no token of the vocabulary can begin a sentence of
  // the grammar (and the empty sentence is not one): such a request could
  // only stop at once.
  Status check_startable() const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  // Masks every state started here shares (the choices of a request, and
  // every request a server sends to this constraint).
  std::shared_ptr<SharedMasks> shared_;
};

}  // namespace sustain::grammar

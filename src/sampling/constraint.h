// A constraint on which tokens may come next — a grammar, a JSON schema —
// applied by the Sampler before the rest of its chain. The interface is
// here so sampling needs nothing of how a constraint is computed (the
// grammar module implements it); the factory is shared by every request
// that uses the same constraint, the state is one request's own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "sampling/processors.h"

namespace sustain::sampling {

// One request's position in its constraint.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Bit (id % 32) of word id / 32 is set for each token that may come next;
  // ids past the end are not allowed. Valid until the next call.
  virtual std::span<const uint32_t> allowed() = 0;
  // The sampler drew `token` (one that allowed() permitted).
  virtual void accept(int32_t token) = 0;
};

class ConstraintFactory {
 public:
  virtual ~ConstraintFactory() = default;
  // A fresh state at the start of the constrained text.
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

// Keeps only the allowed candidates (in their order). Disallowed tokens are
// removed rather than set to -inf, so no later step can pick one — argmax
// over a list whose allowed logits are all -inf would otherwise return the
// lowest id, allowed or not. If nothing is allowed the candidates stay as
// they are and it returns false.
bool apply_mask(Candidates& c, std::span<const uint32_t> allowed);

}  // namespace sustain::sampling

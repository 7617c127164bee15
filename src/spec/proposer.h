// Speculative decoding (DESIGN.md §2: proposers, verification, rollback;
// uses base, model, kv, sampling; the engine calls it). A proposer drafts
// up to k tokens that may follow a sequence; the engine verifies them in
// one forward pass over [last token, drafts...] and keeps the longest
// prefix the target's own sampler agrees with, plus one token of its own.
//
// Drafts here are point masses (one token per position, no distribution):
// verifying one means sampling the target's token at that position exactly
// as non-speculative decoding would (every sampler stage included) and
// accepting the draft iff they are equal. For a point-mass proposal this is
// rejection sampling with q = 1 (accept with p(d), else draw from p
// without d, renormalised), so the output distribution is unchanged at any
// temperature and the acceptance is the best a point mass can get.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace sustain::spec {

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  // Appends up to k drafted tokens that may follow `tokens` (the
  // sequence's prompt and verified output) to `out`.
  virtual void propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) = 0;
};

struct Config {
  std::vector<std::string> types;  // proposers in order; the first that drafts wins
  int draft_max = 8;               // 1..16: tokens drafted per step at most
  int draft_min = 1;               // drafts shorter than this are not verified
  int ngram_max = 4;               // ngram: longest suffix matched (1..16)
  bool enabled() const { return !types.empty(); }
};

// kInvalidArgument naming the flag for an unknown type or a count out of range.
Status validate(const Config& c);

// The proposers of `c`, in order (only model-free types here: ngram).
Expected<std::vector<std::unique_ptr<Proposer>>> make_proposers(const Config& c);

// "ngram,mtp" -> {"ngram", "mtp"}; a type the engine does not know is an error.
Expected<std::vector<std::string>> parse_types(const std::string& list);

}  // namespace sustain::spec

// Speculative decoding (DESIGN.md §2: proposers, verification, rollback;
// uses base, model, kv, sampling; the engine calls it). A proposer drafts
// up to k tokens that may follow a sequence; the engine verifies them in
// one forward pass over [last token, drafts...] and keeps the longest
// prefix the target's own sampler agrees with, plus one token of its own.
//
// A draft is point masses (ngram: one token per position, no distribution)
// or tokens drawn from a proposal distribution q (a draft model). A point
// mass is verified by sampling the target's token at that position exactly
// as non-speculative decoding would (every sampler stage included) and
// accepting the draft iff they are equal: rejection sampling with q = 1
// (accept with p(d), else draw from p without d, renormalised). A drawn
// draft is verified by rejection sampling proper (Sampler::
// sample_speculative: accept with min(1, p/q), else draw from max(0, p-q)).
// Either way the output distribution is unchanged at any temperature.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "sampling/sampler.h"
#include "tensor/qtype.h"

namespace sustain::spec {

// What a proposer drafted for one sequence this step.
struct Draft {
  std::vector<int32_t> tokens;
  // The proposal each token was drawn from (tokens.size() entries, sparse:
  // the ids with q > 0), or empty for point masses.
  std::vector<std::vector<sampling::TokenProb>> q;
  void clear() {
    tokens.clear();
    q.clear();
  }
};

// What one sequence's step computed, for a proposer that drafts from the
// target's hidden states (mtp): the main model's normed final hidden state
// of positions [pos, pos + n), all of them verified, and the sequence's
// tokens so far (prompt + output, the last one not yet computed).
struct Observed {
  uint64_t seq = 0;
  std::span<const int32_t> tokens;
  int64_t pos = 0, n = 0;
  const float* hidden = nullptr;  // [n × n_embd]
  // A prompt with images: the input row ([n_embd], unscaled) of each of its
  // positions that holds one, nullptr where it holds a token; entries past
  // the end are tokens. Empty for a text prompt.
  std::span<const float* const> rows;
};

// One sequence that wants a draft this step.
struct Job {
  uint64_t seq = 0;                 // the engine's id of the sequence (forget() takes it)
  std::span<const int32_t> tokens;  // prompt + verified output; the last is not in the KV yet
  int k = 0;                        // draft at most this many (>= 1)
  const sampling::SamplerConfig* sampling = nullptr;  // the request's sampling
  Draft* out = nullptr;                               // empty on entry
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  // Drafts for every job at once (a model proposer runs them as one batch).
  // The default asks propose() job by job.
  virtual void propose_batch(std::span<Job> jobs) {
    for (Job& j : jobs) propose(j.tokens, j.k, j.out->tokens);
  }
  // Point-mass proposers: appends up to k drafted tokens that may follow
  // `tokens` (the sequence's prompt and verified output) to `out`.
  virtual void propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) {}
  // The sequence left (finished, cancelled, preempted): drop what is kept for it.
  virtual void forget(uint64_t seq) {}
  // Proposers that need the target's hidden states say so; the engine then
  // hands them, after every step, what each running sequence computed.
  virtual bool wants_hidden() const { return false; }
  virtual void observe(std::span<const Observed> steps) {}
  // A request completed (stopped or reached its length; not cancelled, not
  // failed): its prompt and output, and how it was sampled. What proposers
  // learn across requests (the shared n-gram pool, the oracle's first pass)
  // comes from here.
  virtual void completed(std::span<const int32_t> tokens, const sampling::SamplerConfig& s) {}
};

struct Config {
  // Proposers in order; the first that drafts wins. "oracle:0.8" keeps its
  // acceptance in the name, so every report that prints the types names it.
  std::vector<std::string> types;
  int draft_max = 8;       // 1..16: tokens drafted per step at most
  int draft_min = 1;       // drafts shorter than this are not verified
  int ngram_max = 4;       // ngram: longest suffix matched (1..16)
  int ngram_pool_mb = 16;  // ngram: the pool all requests share (0 = none, ..4096)
  // Each step's k per sequence chosen by measured cost and acceptance
  // (spec/gate.h); off: every sequence drafts draft_max whenever it can.
  bool gate = true;
  // draft: the second GGUF (same vocabulary), its KV formats (the MTP
  // block's too), and the confidence below which it stops drafting (its
  // top token's probability at temperature 1; 0 = never stops early).
  std::string draft_model;
  QType draft_k_type = QType::F16;
  QType draft_v_type = QType::F16;
  float draft_p_min = 0.0f;
  // mtp: tokens drafted a step at most by chaining the block's own output
  // (1 = the block's one prediction; each more is one more pass of the
  // block and its LM head over the sequences drafting). Capped by k.
  int mtp_depth = 1;
  bool enabled() const { return !types.empty(); }
  // "oracle" matches "oracle:ALPHA".
  bool uses(const char* type) const {
    for (const std::string& t : types)
      if (t == type || (t.rfind(type, 0) == 0 && t.size() > std::char_traits<char>::length(type) &&
                        t[std::char_traits<char>::length(type)] == ':'))
        return true;
    return false;
  }
  // "ngram,oracle:0.8"
  std::string describe() const {
    std::string out;
    for (const std::string& t : types) out += (out.empty() ? "" : ",") + t;
    return out;
  }
};

// kInvalidArgument naming the flag for an unknown type or a count out of range.
Status validate(const Config& c);

// The model-free proposers of `c` (ngram, oracle), in order; the engine
// builds the model proposers (draft: spec/draft_model.h) and puts them in
// their place. n_vocab: the target's (the oracle draws wrong tokens from it).
Expected<std::vector<std::unique_ptr<Proposer>>> make_proposers(const Config& c, int64_t n_vocab);

// "ngram,mtp" -> {"ngram", "mtp"}; a type the engine does not know is an error.
Expected<std::vector<std::string>> parse_types(const std::string& list);

}  // namespace sustain::spec

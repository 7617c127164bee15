// Batch: the unit of a forward step (DESIGN.md §3). Tokens of one or many
// sequences, each with its position and whether its logits are wanted.
// Single-stream generation is a batch of one sequence: there is one forward
// path, not two.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"

namespace sustain {

struct BatchToken {
  int32_t id = 0;       // token id
  int32_t seq = 0;      // index into Batch::seqs
  int64_t pos = 0;      // position in its sequence (0-based)
  bool logits = false;  // compute this token's logits
  // An input embedding given directly ([n_embd] floats, e.g. one image
  // token from the vision projector) instead of the lookup of `id`; it is
  // used as it is, without the architecture's embedding scale. Must stay
  // valid for the forward call.
  const float* embd = nullptr;
  // How many positions of its sequence the token sees: 0 means causal
  // (pos + 1). More lets it see later positions too: every token of a
  // non-causal block (Gemma 3's image tokens) sees the whole block, so the
  // block must be in this batch or already in the cache.
  int64_t n_visible = 0;
};

struct Batch {
  std::vector<BatchToken> tokens;
  // Page tables of the sequences the tokens belong to. Each must already have
  // room for every position in the batch (KvCache::reserve), and a token at
  // position p sees positions 0..p of its sequence: those before the batch
  // from the cache, those in the batch as they are computed.
  std::vector<kv::PageTable*> seqs;

  int64_t n_logits() const {
    int64_t n = 0;
    for (const auto& t : tokens) n += t.logits;
    return n;
  }
};

}  // namespace sustain

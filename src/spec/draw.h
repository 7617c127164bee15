// How a model proposer (draft, mtp) draws its tokens: at the request's
// temperature and truncation, so that its q is close to the target's p;
// penalties, logit bias and constraints are the target's business (they act
// on p at verification, and q may be anything the draft was really drawn
// from). Its random stream is its own, not the target's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "sampling/sampler.h"
#include "spec/proposer.h"

namespace sustain::spec {

sampling::SamplerConfig draft_sampling(const sampling::SamplerConfig& request);

// Probability of the most likely token under softmax at temperature 1.
float top_probability(const float* row, int64_t n);

// Draws the next draft token of `out` from logits `row` with `sampler`,
// appending it and its sparse q; false (nothing appended) when the top
// probability is below p_min (> 0). `scratch` is reused between calls.
bool draw_token(sampling::Sampler& sampler, const float* row, int64_t n_vocab, float p_min,
                Draft& out, std::vector<sampling::TokenProb>& scratch);

// One sequence's next draft token: its sampler, its logits row, its draft;
// `drafted` is draw_token's answer once drawn.
struct DrawItem {
  sampling::Sampler* sampler = nullptr;
  const float* row = nullptr;
  Draft* out = nullptr;
  bool drafted = false;
};

// draw_token for every item, several at once over `pool` when `pooled`
// and there is more than one (each item is another sequence: its own
// sampler and draft); scratch holds one buffer per pool slot. At a
// temperature with top_p over 49,152 nearly flat logits a draw takes
// 0.2-0.8 ms, and a step of a draft model draws k of them per sequence.
void draw_tokens(std::span<DrawItem> items, int64_t n_vocab, float p_min, ThreadPool& pool,
                 bool pooled, std::vector<std::vector<sampling::TokenProb>>& scratch);

}  // namespace sustain::spec

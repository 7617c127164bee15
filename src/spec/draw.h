// How a model proposer (draft, mtp) draws its tokens: at the request's
// temperature and truncation, so that its q is close to the target's p;
// penalties, logit bias and constraints are the target's business (they act
// on p at verification, and q may be anything the draft was really drawn
// from). Its random stream is its own, not the target's.
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace sustain::spec

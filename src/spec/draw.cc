#include "spec/draw.h"

#include <algorithm>
#include <cmath>

namespace sustain::spec {

sampling::SamplerConfig draft_sampling(const sampling::SamplerConfig& r) {
  sampling::SamplerConfig c;
  c.temperature = r.temperature;
  c.top_k = r.top_k;
  c.top_p = r.top_p;
  c.min_p = r.min_p;
  c.repeat_penalty = 1.0f;
  c.repeat_last_n = 0;
  c.presence_penalty = 0.0f;
  c.frequency_penalty = 0.0f;
  c.seed = r.seed ^ 0x9E3779B97F4A7C15ull;
  return c;
}

float top_probability(const float* row, int64_t n) {
  float mx = row[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, row[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
  return static_cast<float>(1.0 / sum);
}

bool draw_token(sampling::Sampler& sampler, const float* row, int64_t n_vocab, float p_min,
                Draft& out, std::vector<sampling::TokenProb>& scratch) {
  if (p_min > 0.0f && top_probability(row, n_vocab) < p_min) return false;
  const int32_t tok = sampler.sample(row, static_cast<int32_t>(n_vocab));
  // q in any order: sample_speculative spreads it by id. top_probs would
  // sort it (a temperature alone leaves the whole vocabulary live).
  scratch.resize(sampler.n_live());
  const size_t n = sampler.probs(scratch);
  out.tokens.push_back(tok);
  out.q.emplace_back(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n));
  return true;
}

void draw_tokens(std::span<DrawItem> items, int64_t n_vocab, float p_min, ThreadPool& pool,
                 bool pooled, std::vector<std::vector<sampling::TokenProb>>& scratch) {
  scratch.resize(static_cast<size_t>(pool.size()));
  auto one = [&](DrawItem& it, int slot) {
    it.drafted = draw_token(*it.sampler, it.row, n_vocab, p_min, *it.out,
                            scratch[static_cast<size_t>(slot)]);
  };
  if (items.size() > 1 && pooled && pool.size() > 1) {
    pool.parallel_for_dynamic(items.size(), 1, [&](size_t b, size_t e, int slot) {
      for (size_t i = b; i < e; ++i) one(items[i], slot);
    });
  } else {
    for (DrawItem& it : items) one(it, 0);
  }
}

}  // namespace sustain::spec

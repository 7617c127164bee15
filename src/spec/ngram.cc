#include "spec/ngram.h"

#include <algorithm>

namespace sustain::spec {

NgramProposer::NgramProposer(int ngram_max, size_t pool_bytes) : ngram_max_(ngram_max) {
  // Unigrams are left out of the pool: one token says too little about what
  // follows it in another request's text.
  if (pool_bytes > 0) pool_ = std::make_unique<NgramPool>(pool_bytes, 2, std::max(2, ngram_max));
}

void NgramProposer::completed(std::span<const int32_t> tokens, const sampling::SamplerConfig&) {
  if (pool_) pool_->insert(tokens);
}

void NgramProposer::propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) {
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  if (k <= 0 || n_tok < 2) return;
  const int64_t lo = std::max<int64_t>(0, n_tok - kWindow);
  for (int64_t n = std::min<int64_t>(ngram_max_, n_tok - 1); n >= 1; --n) {
    const int32_t* suffix = tokens.data() + n_tok - n;
    // Most recent earlier occurrence that has at least one token after it.
    for (int64_t start = n_tok - n - 1; start >= lo; --start) {
      if (tokens[static_cast<size_t>(start)] != suffix[0]) continue;
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(k, n_tok - from);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + from + take);
      return;
    }
  }
  if (pool_) pool_->propose(tokens, k, out);
}

}  // namespace sustain::spec

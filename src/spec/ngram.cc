#include "spec/ngram.h"

#include <algorithm>

namespace sustain::spec {

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
}

}  // namespace sustain::spec

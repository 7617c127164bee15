#include "kv/random_fill.h"

#include <algorithm>
#include <random>
#include <vector>

namespace sustain::kv {

Status fill_random(KvCache& cache, PageTable& t, int64_t depth, uint64_t seed) {
  const KvGeometry& g = cache.geometry();
  const int64_t from = t.n_tokens;
  if (depth > from) SUSTAIN_TRY(cache.reserve(t, depth - from));
  constexpr int64_t kPeriod = 61;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t nk = size_t(g.n_head_kv) * g.head_dim_k, nv = size_t(g.n_head_kv) * g.head_dim_v;
  const int64_t rows = std::min<int64_t>(kPeriod, std::max<int64_t>(depth - from, 0)) * g.n_layer;
  std::vector<float> k(static_cast<size_t>(rows) * nk), v(static_cast<size_t>(rows) * nv);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (int64_t p = from; p < depth; ++p)
    for (int l = 0; l < g.n_layer; ++l) {
      const auto r = static_cast<size_t>(((p - from) % kPeriod) * g.n_layer + l);
      cache.store(t, l, p, k.data() + r * nk, v.data() + r * nv);
    }
  if (cache.has_state()) {
    if (t.state < 0) SUSTAIN_TRY(cache.reserve(t, 0));
    std::normal_distribution<float> sd(0.0f, 0.05f);
    float* st = cache.states().slot_data(t.state);
    for (size_t i = 0; i < cache.states().slot_floats(); ++i) st[i] = sd(rng);
    cache.states().set_pos(t.state, depth);
  }
  return Status::ok();
}

}  // namespace sustain::kv

#include "engine/verify_cost.h"

#include <chrono>

#include "kv/random_fill.h"

namespace sustain::engine {

Expected<std::vector<std::vector<std::vector<double>>>> time_verify_steps(
    const Model& m, const kv::KvGeometry& geo, ThreadPool& pool, const VerifyCostOptions& opt) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<std::vector<double>>> out;
  if (opt.depths.empty() || opt.ks.empty()) return out;
  // Two state slots for a hybrid: the sequence's, and its state at depth
  // that every step is rewound to (a recurrent state cannot be truncated).
  kv::KvGeometry g = m.kv_geometry(geo.k_type, geo.v_type, geo.page_tokens, 2);
  g.tiled = geo.tiled;
  g.window_layers.clear();
  const int64_t max_k = opt.ks.back();
  auto cache = kv::KvCache::create(g, opt.depths.back() + max_k + 1 + g.page_tokens);
  if (!cache) return cache.status().with_context("verify steps: their KV cache");
  Workspace ws = m.make_workspace(max_k + 1, pool.size());
  const int64_t n_vocab = m.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>((max_k + 1) * n_vocab));
  uint64_t s = opt.seed;
  auto token = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>(3 + (s >> 33) % static_cast<uint64_t>(n_vocab - 3));
  };
  kv::PageTable t;
  for (int64_t depth : opt.depths) {
    SUSTAIN_TRY(kv::fill_random(*cache, t, depth, opt.seed + static_cast<uint64_t>(depth)));
    int32_t saved = -1;
    if (cache->has_state()) {
      saved = cache->states().alloc();
      if (saved < 0) return error(Code::kInternal, "verify steps: no state slot to save");
      cache->states().copy(t.state, saved);
    }
    std::vector<std::vector<double>> ms(opt.ks.size());
    Status st = cache->reserve(t, max_k + 1);
    for (int rep = 0; rep < opt.reps && st.is_ok(); ++rep)
      for (size_t i = 0; i < opt.ks.size() && st.is_ok(); ++i) {
        Batch b;
        b.seqs = {&t};
        for (int64_t j = 0; j <= opt.ks[i]; ++j) b.tokens.push_back({token(), 0, depth + j, true});
        const auto t0 = Clock::now();
        for (int n = 0; n < opt.steps && st.is_ok(); ++n) {
          st = m.forward(b, *cache, ws, pool, logits.data());
          if (saved >= 0) cache->states().copy(saved, t.state);
        }
        ms[i].push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / opt.steps);
      }
    cache->truncate(t, depth);
    if (saved >= 0) {
      cache->states().copy(saved, t.state);
      cache->states().free(saved);
    }
    if (!st.is_ok()) return st.with_context("verify steps");
    out.push_back(std::move(ms));
  }
  cache->release(t);
  return out;
}

}  // namespace sustain::engine

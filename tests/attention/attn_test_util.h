// Shared by the attention tests: a cache filled with random K/V, random
// queries, and a comparison of attend() with the double reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/ref.h"
#include "kv/kv_cache.h"

namespace sustain::attention::test {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
inline std::unique_ptr<uint8_t[], AlignedFree> aligned_scratch(size_t bytes) {
  return std::unique_ptr<uint8_t[], AlignedFree>(
      static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64)));
}

inline ThreadPool& pool(int n) {
  static ThreadPool p1(1), p2(2), p3(3);
  return n == 1 ? p1 : n == 2 ? p2 : p3;
}

// A cache with sequences of the given lengths, every layer's K/V random
// N(0, 1) (V) and N(0, k_sigma) (K).
struct Filled {
  std::unique_ptr<kv::KvCache> cache;
  std::vector<kv::PageTable> seqs;
};

inline Filled make_filled(const kv::KvGeometry& g, const std::vector<int64_t>& lengths,
                          uint32_t seed, float k_sigma = 1.0f) {
  int64_t total = 0;
  for (int64_t n : lengths) total += (n + g.page_tokens - 1) / g.page_tokens * g.page_tokens;
  auto c = kv::KvCache::create(g, std::max<int64_t>(total, 1));
  EXPECT_TRUE(c) << c.status().message();
  Filled f{std::make_unique<kv::KvCache>(std::move(c.value())), {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(size_t(g.n_head_kv) * g.head_dim_k), v(size_t(g.n_head_kv) * g.head_dim_v);
  // Interleave the sequences' pages so a table's pages are not contiguous.
  f.seqs.resize(lengths.size());
  for (int64_t done = 0;; done += g.page_tokens) {
    bool any = false;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t n = std::min<int64_t>(g.page_tokens, lengths[s] - done);
      if (n <= 0) continue;
      any = true;
      EXPECT_TRUE(f.cache->reserve(f.seqs[s], n));
    }
    if (!any) break;
  }
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int layer = 0; layer < g.n_layer; ++layer) {
      for (int64_t pos = 0; pos < lengths[s]; ++pos) {
        for (float& x : k) x = nd(rng) * k_sigma;
        for (float& x : v) x = nd(rng);
        f.cache->store(f.seqs[s], layer, pos, k.data(), v.data());
      }
    }
  }
  return f;
}

inline std::vector<float> random_q(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(n);
  for (float& x : q) x = nd(rng);
  return q;
}

// Largest over rows of max |out - ref| / max |ref| (per row of head_dim_v).
inline double max_rel_error(const std::vector<float>& out, const std::vector<double>& ref, int dv) {
  double worst = 0.0;
  for (size_t r = 0; r * dv < ref.size(); ++r) {
    double err = 0.0, mag = 0.0;
    for (int c = 0; c < dv; ++c) {
      err = std::max(err, std::abs(double(out[r * dv + c]) - ref[r * dv + c]));
      mag = std::max(mag, std::abs(ref[r * dv + c]));
    }
    worst = std::max(worst, mag > 0 ? err / mag : err);
  }
  return worst;
}

// Runs attend() and the reference for `queries` on `layer`; returns the error.
inline double attend_vs_ref(const kv::KvCache& cache, int layer, const AttnParams& p,
                            const std::vector<QueryInfo>& queries, int n_threads, uint32_t seed) {
  const size_t n_q = queries.size();
  const std::vector<float> q = random_q(n_q * p.n_head * p.head_dim_k, seed);
  std::vector<float> out(n_q * p.n_head * p.head_dim_v, std::nanf(""));
  std::vector<double> ref(out.size());
  ThreadPool& tp = pool(n_threads);
  auto scratch = aligned_scratch(attention_scratch_bytes(p, int64_t(n_q), tp.size()));
  attend(cache, layer, p, queries, q.data(), out.data(), tp, scratch.get());
  attend_ref(cache, layer, p, queries, q.data(), ref.data());
  for (float x : out) {
    if (!std::isfinite(x)) return INFINITY;
  }
  return max_rel_error(out, ref, p.head_dim_v);
}

inline AttnParams params_for(const kv::KvGeometry& g, int group, SplitKv split) {
  AttnParams p;
  p.n_head_kv = g.n_head_kv;
  p.n_head = g.n_head_kv * group;
  p.head_dim_k = g.head_dim_k;
  p.head_dim_v = g.head_dim_v;
  p.scale = 1.0f / std::sqrt(float(g.head_dim_k));
  p.split_kv = split;
  return p;
}

}  // namespace sustain::attention::test

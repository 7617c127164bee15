#include "attention/window.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/qtype.h"

namespace sustain::attention {
namespace {

struct ThreadArea {
  size_t floats = 0;  // K rows, V rows, scores
  size_t bytes = 0;   // the area, rounded to 64 bytes
};

ThreadArea area(const AttnParams& p) {
  ThreadArea a;
  const size_t w = static_cast<size_t>(std::max(p.window, 1));
  a.floats = w * (size_t(p.head_dim_k) + size_t(p.head_dim_v)) + w;
  // One stored row: no KV format takes more than 4 bytes an element.
  const size_t row = sizeof(float) * size_t(std::max(p.head_dim_k, p.head_dim_v));
  a.bytes = (a.floats * sizeof(float) + row + 63) / 64 * 64;
  return a;
}

}  // namespace

size_t window_scratch_bytes(const AttnParams& p, int n_threads) {
  return area(p).bytes * static_cast<size_t>(std::max(1, n_threads));
}

namespace {

// Everything an item needs, so the pool's callable captures one pointer (no
// allocation in std::function).
struct WindowRun {
  const kv::KvCache* cache;
  int layer;
  const AttnParams* p;
  const std::vector<QueryInfo>* queries;
  const float* q;
  float* out;
  uint8_t* base;
  ThreadArea area;
  DequantizeFn k_deq, v_deq;
};

constexpr int kMaxGroup = 256;  // query heads per KV head

// Query t, KV head hk: every query head of the group over the window.
void run_window_item(const WindowRun& R, size_t t, int hk, int thread) {
  const AttnParams& p = *R.p;
  const int group = p.n_head / p.n_head_kv;
  const int dk = p.head_dim_k, dv = p.head_dim_v;
  auto* mine = R.base + R.area.bytes * static_cast<size_t>(thread);
  float* kf = reinterpret_cast<float*>(mine);
  float* vf = kf + size_t(p.window) * dk;
  float* s = vf + size_t(p.window) * dv;
  uint8_t* row = mine + R.area.floats * sizeof(float);
  const QueryInfo& qi = (*R.queries)[t];
  const int64_t k1 = qi.n_visible, k0 = std::min(qi.window_first(p.window), k1);
  // At most `window` keys fit the scratch at once. A non-causal query's
  // window can hold more (it sees later keys of its block too): chunks of
  // `window` keys then go through an online softmax (running maximum and
  // sum per head), which one chunk reduces to the exact softmax.
  const int64_t total = k1 - k0;
  SUSTAIN_CHECK(group <= kMaxGroup);
  float m[kMaxGroup], l[kMaxGroup];
  for (int i = 0; i < group; ++i) {
    m[i] = -std::numeric_limits<float>::infinity();
    l[i] = 0.0f;
    float* oh = R.out + (t * p.n_head + hk * group + i) * size_t(dv);
    std::fill(oh, oh + dv, 0.0f);
  }
  for (int64_t c0 = k0; c0 < k1; c0 += p.window) {
    const int n = static_cast<int>(std::min<int64_t>(p.window, k1 - c0));
    for (int j = 0; j < n; ++j) {
      R.cache->copy_k_row(*qi.pages, R.layer, hk, c0 + j, row);
      R.k_deq(row, kf + size_t(j) * dk, dk);
      R.cache->copy_v_row(*qi.pages, R.layer, hk, c0 + j, row);
      R.v_deq(row, vf + size_t(j) * dv, dv);
    }
    for (int i = 0; i < group; ++i) {
      const int h = hk * group + i;
      const float* qh = R.q + (t * p.n_head + h) * size_t(dk);
      float* oh = R.out + (t * p.n_head + h) * size_t(dv);
      float mc = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n; ++j) {
        const float* kj = kf + size_t(j) * dk;
        float dot = 0.0f;
        for (int c = 0; c < dk; ++c) dot += qh[c] * kj[c];
        s[j] = dot * p.scale;
        mc = std::max(mc, s[j]);
      }
      const float mn = std::max(m[i], mc);
      const float keep = l[i] > 0.0f ? std::exp(m[i] - mn) : 0.0f;  // rescales what came before
      float lc = 0.0f;
      for (int j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - mn);
        lc += s[j];
      }
      for (int c = 0; c < dv; ++c) oh[c] *= keep;
      for (int j = 0; j < n; ++j) {
        const float* vj = vf + size_t(j) * dv;
        for (int c = 0; c < dv; ++c) oh[c] += s[j] * vj[c];
      }
      l[i] = l[i] * keep + lc;
      m[i] = mn;
    }
  }
  if (total == 0) return;
  for (int i = 0; i < group; ++i) {
    float* oh = R.out + (t * p.n_head + hk * group + i) * size_t(dv);
    const float inv = 1.0f / l[i];
    for (int c = 0; c < dv; ++c) oh[c] *= inv;
  }
}

}  // namespace

void attend_window(const kv::KvCache& cache, int layer, const AttnParams& p,
                   const std::vector<QueryInfo>& queries, const float* q, float* out,
                   ThreadPool& pool, void* scratch) {
  const kv::KvGeometry& g = cache.geometry();
  SUSTAIN_CHECK(p.window > 0);
  SUSTAIN_CHECK(std::max(g.k_row_bytes(), g.v_row_bytes()) <=
                sizeof(float) * size_t(std::max(p.head_dim_k, p.head_dim_v)));
  WindowRun R{&cache,
              layer,
              &p,
              &queries,
              q,
              out,
              static_cast<uint8_t*>(scratch),
              area(p),
              qtype_traits(g.k_type).dequantize,
              qtype_traits(g.v_type).dequantize};
  SUSTAIN_CHECK(R.k_deq != nullptr && R.v_deq != nullptr);
  const WindowRun* rp = &R;
  const size_t n_items = queries.size() * static_cast<size_t>(p.n_head_kv);
  pool.parallel_for_dynamic(n_items, 1, [rp](size_t b, size_t e, int thread) {
    for (size_t item = b; item < e; ++item)
      run_window_item(*rp, item / rp->p->n_head_kv, static_cast<int>(item % rp->p->n_head_kv),
                      thread);
  });
}

}  // namespace sustain::attention

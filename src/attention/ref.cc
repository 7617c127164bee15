#include "attention/ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sustain::attention {

void attend_ref(const kv::KvCache& cache, int layer, const AttnParams& p,
                const std::vector<QueryInfo>& queries, const float* q, double* out) {
  const kv::KvGeometry& g = cache.geometry();
  const int dk = p.head_dim_k, dv = p.head_dim_v, group = p.n_head / p.n_head_kv;
  const DequantizeFn deq_k = qtype_traits(g.k_type).dequantize;
  const DequantizeFn deq_v = qtype_traits(g.v_type).dequantize;
  std::vector<float> krow(dk), vrow(dv);
  std::vector<uint8_t> bytes(std::max(g.k_row_bytes(), g.v_row_bytes()));
  std::vector<double> scores;
  for (size_t t = 0; t < queries.size(); ++t) {
    const QueryInfo& qi = queries[t];
    for (int h = 0; h < p.n_head; ++h) {
      const int kvh = h / group;
      const float* qr = q + (t * p.n_head + h) * dk;
      double* o = out + (t * p.n_head + h) * dv;
      std::fill(o, o + dv, 0.0);
      // A sliding window keeps the last p.window keys.
      const int64_t k0 = qi.window_first(p.window);
      const int64_t n = qi.n_visible - k0;
      if (n == 0) continue;
      scores.assign(n, 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        cache.copy_k_row(*qi.pages, layer, kvh, k0 + j, bytes.data());
        deq_k(bytes.data(), krow.data(), dk);
        double s = 0.0;
        for (int c = 0; c < dk; ++c) s += double(qr[c]) * krow[c];
        scores[j] = s * p.scale;
        m = std::max(m, scores[j]);
      }
      double sum = 0.0;
      for (double& s : scores) sum += (s = std::exp(s - m));
      for (int64_t j = 0; j < n; ++j) {
        cache.copy_v_row(*qi.pages, layer, kvh, k0 + j, bytes.data());
        deq_v(bytes.data(), vrow.data(), dv);
        const double w = scores[j] / sum;
        for (int c = 0; c < dv; ++c) o[c] += w * vrow[c];
      }
    }
  }
}

std::vector<double> merge_ref(const std::vector<PartialState>& chunks, int dv) {
  double m = -std::numeric_limits<double>::infinity();
  for (const PartialState& c : chunks)
    if (c.l > 0.0) m = std::max(m, c.m);
  std::vector<double> out(dv, 0.0);
  double l = 0.0;
  for (const PartialState& c : chunks) {
    if (c.l == 0.0) continue;
    const double f = std::exp(c.m - m);
    l += c.l * f;
    for (int k = 0; k < dv; ++k) out[k] += c.o[k] * f;
  }
  if (l > 0.0)
    for (double& x : out) x /= l;
  return out;
}

}  // namespace sustain::attention

#include "bench/roofline.h"

#include <algorithm>

namespace sustain::bench {

double decode_bytes(const ModelCost& m, double ctx) {
  return static_cast<double>(m.weight_bytes_per_step) +
         static_cast<double>(m.kv_bytes_per_token) * ctx +
         static_cast<double>(m.window_bytes_per_token) * std::min(ctx, static_cast<double>(m.window));
}

double decode_flops(const ModelCost& m, double ctx) {
  return 2.0 * static_cast<double>(m.matmul_params) +
         4.0 * static_cast<double>(m.n_layer * m.n_head * m.head_dim) * ctx;
}

Bound decode_bound(const ModelCost& m, double ctx, double read_gbps, double gflops) {
  Bound b;
  b.bytes_per_step = decode_bytes(m, ctx);
  b.flops_per_token = decode_flops(m, ctx);
  if (b.bytes_per_step > 0) b.bandwidth_tok_s = read_gbps * 1e9 / b.bytes_per_step;
  if (b.flops_per_token > 0) b.compute_tok_s = gflops * 1e9 / b.flops_per_token;
  return b;
}

double seed_model_tok_s(const ModelCost& m, double peak_ctx, double peak_tok_s, double ctx) {
  const double at = decode_bytes(m, ctx);
  return at > 0 ? peak_tok_s * decode_bytes(m, peak_ctx) / at : 0.0;
}

PrefillFit fit_prefill(const double* from, const double* to, const double* seconds, int n) {
  PrefillFit f;
  // Columns x = L1 − L0 (a's coefficient), y = (L1² − L0²)/2 (b's).
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  int used = 0;
  for (int i = 0; i < n; ++i) {
    const double x = to[i] - from[i];
    if (!(x > 0) || !(seconds[i] > 0)) continue;
    const double y = (to[i] * to[i] - from[i] * from[i]) / 2.0;
    sxx += x * x;
    sxy += x * y;
    syy += y * y;
    sxt += x * seconds[i];
    syt += y * seconds[i];
    ++used;
  }
  if (used == 0) return f;
  f.points = used;
  const double det = sxx * syy - sxy * sxy;
  if (used >= 2 && det > 1e-12 * sxx * syy) {
    f.a = (sxt * syy - syt * sxy) / det;
    f.b = (sxx * syt - sxy * sxt) / det;
  }
  if (used < 2 || !(det > 1e-12 * sxx * syy) || f.b < 0 || f.a < 0) {
    // One point (or a degenerate / unphysical fit): the cheaper model with
    // one parameter that is non-negative.
    if (f.a < 0 && f.b > 0 && used >= 2) {
      f.a = 0;
      f.b = syt / syy;
    } else {
      f.b = 0;
      f.a = sxt / sxx;
    }
  }
  return f;
}

}  // namespace sustain::bench

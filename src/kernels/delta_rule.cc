#include "kernels/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sustain::kernels {

void delta_rule_ref(const DeltaRuleArgs& a) {
  const int dk = a.dk, dv = a.dv;
  std::vector<double> S(a.S, a.S + size_t(dk) * dv), d(static_cast<size_t>(dv));
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const float* q = a.q + t * a.ld_qk;
    const float* k = a.k + t * a.ld_qk;
    const float* v = a.v + t * a.ld_v;
    const double decay = std::exp(static_cast<double>(a.g[t * a.ld_gb]));
    const double beta = a.beta[t * a.ld_gb];
    for (double& s : S) s *= decay;
    for (int j = 0; j < dv; ++j) {
      double sk = 0.0;
      for (int i = 0; i < dk; ++i) sk += S[size_t(i) * dv + j] * k[i];
      d[static_cast<size_t>(j)] = beta * (v[j] - sk);
    }
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dv; ++j) S[size_t(i) * dv + j] += k[i] * d[static_cast<size_t>(j)];
    float* o = a.o + t * a.ld_o;
    for (int j = 0; j < dv; ++j) {
      double sq = 0.0;
      for (int i = 0; i < dk; ++i) sq += S[size_t(i) * dv + j] * q[i];
      o[j] = static_cast<float>(a.scale * sq);
    }
  }
  for (size_t i = 0; i < S.size(); ++i) a.S[i] = static_cast<float>(S[i]);
}

size_t delta_rule_scratch_floats(int chunk, int dk, int dv) {
  const size_t C = static_cast<size_t>(std::max(chunk, 1));
  // kT, qT [dk][C]; A, QK [C][C]; KS, QS, delta [C][dv]; G [C]
  return 2 * size_t(dk) * C + 2 * C * C + 3 * C * size_t(dv) + C;
}

namespace {

// y[0, n) += a · x[0, n): the one inner loop of the chunked form, over
// contiguous rows so the compiler vectorizes it.
inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void delta_rule(const DeltaRuleArgs& a, int chunk, float* scratch) {
  const int dk = a.dk, dv = a.dv;
  const int64_t C = std::max(chunk, 1);
  float* kT = scratch;           // [dk][C]
  float* qT = kT + dk * C;       // [dk][C]
  float* A = qT + dk * C;        // [C][C]: k_s·k_t
  float* QK = A + C * C;         // [C][C]: k_s·q_t
  float* KS = QK + C * C;        // [C][dv]: S0ᵀk_t
  float* QS = KS + C * dv;       // [C][dv]: S0ᵀq_t
  float* D = QS + C * dv;        // [C][dv]: δ_t
  float* G = D + C * dv;         // [C]
  float* S = a.S;
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += C) {
    const int64_t n = std::min<int64_t>(C, a.n_tokens - t0);
    double acc = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      acc += a.g[(t0 + t) * a.ld_gb];
      G[t] = static_cast<float>(acc);
      const float* k = a.k + (t0 + t) * a.ld_qk;
      const float* q = a.q + (t0 + t) * a.ld_qk;
      for (int i = 0; i < dk; ++i) {
        kT[i * C + t] = k[i];
        qT[i * C + t] = q[i];
      }
    }
    // A[t][s] = k_t·k_s and QK[t][s] = q_t·k_s for s ≤ t; S0ᵀk_t, S0ᵀq_t.
    for (int64_t t = 0; t < n; ++t) {
      float* at = A + t * C;
      float* qt = QK + t * C;
      std::fill_n(at, t + 1, 0.0f);
      std::fill_n(qt, t + 1, 0.0f);
      const float* k = a.k + (t0 + t) * a.ld_qk;
      const float* q = a.q + (t0 + t) * a.ld_qk;
      for (int i = 0; i < dk; ++i) {
        axpy(at, k[i], kT + i * C, t + 1);
        axpy(qt, q[i], kT + i * C, t + 1);
      }
      float* ks = KS + t * dv;
      float* qs = QS + t * dv;
      std::fill_n(ks, dv, 0.0f);
      std::fill_n(qs, dv, 0.0f);
      for (int i = 0; i < dk; ++i) {
        axpy(ks, k[i], S + int64_t(i) * dv, dv);
        axpy(qs, q[i], S + int64_t(i) * dv, dv);
      }
    }
    // δ_t by forward substitution, then o_t.
    for (int64_t t = 0; t < n; ++t) {
      const float beta = a.beta[(t0 + t) * a.ld_gb];
      const float et = std::exp(G[t]);
      const float* v = a.v + (t0 + t) * a.ld_v;
      float* d = D + t * dv;
      for (int j = 0; j < dv; ++j) d[j] = beta * (v[j] - et * KS[t * dv + j]);
      for (int64_t s = 0; s < t; ++s)
        axpy(d, -beta * std::exp(G[t] - G[s]) * A[t * C + s], D + s * dv, dv);
      float* o = a.o + (t0 + t) * a.ld_o;
      for (int j = 0; j < dv; ++j) o[j] = et * QS[t * dv + j];
      for (int64_t s = 0; s <= t; ++s) axpy(o, std::exp(G[t] - G[s]) * QK[t * C + s], D + s * dv, dv);
      for (int j = 0; j < dv; ++j) o[j] *= a.scale;
    }
    // S = e^{G_n} S0 + Σ_s e^{G_n − G_s} k_s δ_sᵀ.
    const float gn = G[n - 1];
    const float en = std::exp(gn);
    for (int64_t s = 0; s < n; ++s) KS[s] = std::exp(gn - G[s]);  // reuse as weights
    for (int i = 0; i < dk; ++i) {
      float* row = S + int64_t(i) * dv;
      for (int j = 0; j < dv; ++j) row[j] *= en;
      for (int64_t s = 0; s < n; ++s) axpy(row, KS[s] * kT[i * C + s], D + s * dv, dv);
    }
  }
}

}  // namespace sustain::kernels

// Scale searches for the K-quants. The algorithms are llama.cpp's reference
// ones (make_qkx2_quants, make_qx_quants, make_q3_quants); the code is
// organised for speed instead. A super-block's groups are independent, so
// each function transposes the super-block to [element][group] and runs every
// step for all groups at once: the inner loops over groups are branch-free
// and the compiler vectorises them without -ffast-math, while each group still
// sums its own elements in order, as llama.cpp does. The squared error of a
// Q4_K / Q5_K candidate comes from its weighted sums in closed form rather than from a
// second pass over the elements.
#include <cmath>
#include <cstring>

#include "tensor/quant_kquants_search.h"

namespace sustain::kquant {
namespace {

// xt[i * G + k] = element i of group k, for G groups of N consecutive elements.
template <int G, int N>
inline void transpose(const float* x, float* xt) {
  for (int k = 0; k < G; ++k)
    for (int i = 0; i < N; ++i) xt[i * G + k] = x[k * N + i];
}

// Weighted sums of G groups' codes on the grids iscale[k] laid over min[k]:
// sum w*l, sum w*l^2, sum w*x*l; the codes themselves go to lt when kStore.
// Local accumulators (copied out once) stay in registers.
template <int G, int N, bool kStore>
inline void affine_grid_sums(const float* __restrict xt, const float* __restrict wt,
                             const float* __restrict wxt, const float* __restrict iscale,
                             const float* __restrict min, float nmax, float* __restrict out_l,
                             float* __restrict out_l2, float* __restrict out_xl,
                             float* __restrict lt) {
  float sl[G] = {}, sl2[G] = {}, sxl[G] = {};
  for (int i = 0; i < N; ++i) {
    for (int k = 0; k < G; ++k) {
      const float l = round_clamped_f(iscale[k] * (xt[i * G + k] - min[k]), 0.0f, nmax);
      if constexpr (kStore) lt[i * G + k] = l;
      const float wl = wt[i * G + k] * l;
      sl[k] += wl;
      sl2[k] += wl * l;
      sxl[k] += wxt[i * G + k] * l;
    }
  }
  for (int k = 0; k < G; ++k) {
    out_l[k] = sl[k];
    out_l2[k] = sl2[k];
    out_xl[k] = sxl[k];
  }
}

// make_qkx2_quants for G groups of N at once; kMad selects the weighted
// absolute error as the criterion (else the weighted squared error).
template <int G, int N, bool kMad>
void search_affine_groups(const float* x, const float* w, float nmax, float rmin, float rdelta,
                          int nstep, AffineResult* out) {
  alignas(16) float xt[N * G], wt[N * G], wxt[N * G];
  alignas(16) float lt[kMad ? N * G : 1];  // the current grid's codes (for the absolute error)
  transpose<G, N>(x, xt);
  transpose<G, N>(w, wt);
  for (int i = 0; i < N * G; ++i) wxt[i] = wt[i] * xt[i];

  alignas(16) float mx[G], min[G], sum_w[G] = {}, sum_x[G] = {}, sum_x2[G] = {};
  for (int k = 0; k < G; ++k) mx[k] = min[k] = xt[k];
  for (int i = 0; i < N; ++i) {  // (row 0 again is harmless for min and max)
    for (int k = 0; k < G; ++k) {
      const float v = xt[i * G + k];
      min[k] = std::min(min[k], v);
      mx[k] = std::max(mx[k], v);
      sum_w[k] += wt[i * G + k];
      sum_x[k] += wxt[i * G + k];
      sum_x2[k] += wxt[i * G + k] * v;
    }
  }
  bool constant[G];  // max == min after clamping min to <= 0 (or NaN): nothing to search
  for (int k = 0; k < G; ++k) {
    min[k] = min[k] > 0 ? 0.0f : min[k];
    constant[k] = !(mx[k] > min[k]);
  }

  // Lanes of constant groups (max == min) compute inf/NaN below; their results
  // are replaced at the end, so nothing there needs a guard.
  alignas(16) float iscale[G], scale[G], best_iscale[G], round_min[G];
  alignas(16) float sl[G], sl2[G], sxl[G];
  alignas(16) double best[G];

  auto grid_sums = [&] {
    affine_grid_sums<G, N, kMad>(xt, wt, wxt, iscale, min, nmax, sl, sl2, sxl, lt);
  };
  // Criterion of (s, m) for the codes of the last grid_sums.
  alignas(16) double err[G];
  auto grid_error = [&](const float* s, const float* m) {
    if constexpr (kMad) {
      alignas(16) float e[G] = {};
      for (int i = 0; i < N; ++i) {
        for (int k = 0; k < G; ++k) {
          e[k] += wt[i * G + k] * std::fabs(s[k] * lt[i * G + k] + m[k] - xt[i * G + k]);
        }
      }
      for (int k = 0; k < G; ++k) err[k] = e[k];
    } else {
      // sum w (s l + m - x)^2 expanded; in double because the terms nearly cancel.
      for (int k = 0; k < G; ++k) {
        const double sd = s[k], md = m[k];
        err[k] = sd * sd * sl2[k] + 2 * sd * md * sl[k] + md * md * sum_w[k] - 2 * sd * sxl[k] -
                 2 * md * sum_x[k] + sum_x2[k];
      }
    }
  };

  // Candidate 0: the plain min/max grid with its own (not fitted) scale.
  for (int k = 0; k < G; ++k) {
    iscale[k] = nmax / (mx[k] - min[k]);
    scale[k] = 1 / iscale[k];
    best_iscale[k] = iscale[k];
    round_min[k] = min[k];
  }
  grid_sums();
  grid_error(scale, min);
  for (int k = 0; k < G; ++k) best[k] = err[k];

  alignas(16) float fit_s[G], fit_m[G];
  for (int is = 0; is <= nstep; ++is) {
    const float stretch = rmin + rdelta * is + nmax;
    // Each grid is laid over the best fit so far (llama.cpp does the same).
    for (int k = 0; k < G; ++k) iscale[k] = stretch / (mx[k] - min[k]);
    grid_sums();
    // Weighted least-squares scale and min for these codes; min clamped to <= 0.
    alignas(16) float det[G];
    for (int k = 0; k < G; ++k) {
      det[k] = sum_w[k] * sl2[k] - sl[k] * sl[k];
      // All three quotients unconditionally: keeps the loop branch-free.
      const float s = (sum_w[k] * sxl[k] - sum_x[k] * sl[k]) / det[k];
      const float m = (sl2[k] * sum_x[k] - sl[k] * sxl[k]) / det[k];
      const float s0 = sxl[k] / sl2[k];
      const bool clamp = m > 0;
      fit_s[k] = clamp ? s0 : s;
      fit_m[k] = clamp ? 0.0f : m;
    }
    grid_error(fit_s, fit_m);
    for (int k = 0; k < G; ++k) {
      const bool better = (det[k] > 0) & (err[k] < best[k]);
      best[k] = better ? err[k] : best[k];
      best_iscale[k] = better ? iscale[k] : best_iscale[k];
      round_min[k] = better ? min[k] : round_min[k];
      scale[k] = better ? fit_s[k] : scale[k];
      min[k] = better ? fit_m[k] : min[k];
    }
  }

  for (int k = 0; k < G; ++k) {
    out[k] = constant[k] ? AffineResult{0.0f, -min[k], 0.0f, 0.0f}  // codes 0, x = -neg_min
                         : AffineResult{scale[k], -min[k], best_iscale[k], round_min[k]};
  }
}

// Weighted squared error of G affine groups (x ≈ ds * l - dm) after rounding
// each element against its group's decoded scale and min, exactly as the final
// quantization pass does. ds == 0 needs no care: l is clamped, so ds * l is 0.
template <int G, int N>
inline void affine_errors(const float* xt, const float* wt, const float* ds, const float* dm,
                          float nmax, float* err) {
  for (int k = 0; k < G; ++k) err[k] = 0;
  for (int i = 0; i < N; ++i) {
    for (int k = 0; k < G; ++k) {
      const float v = xt[i * G + k];
      const float l = round_clamped_f((v + dm[k]) / ds[k], 0.0f, nmax);
      const float diff = ds[k] * l - dm[k] - v;
      err[k] += wt[i * G + k] * diff * diff;
    }
  }
}

template <int G, int N>
inline void symmetric_errors(const float* xt, const float* wt, const float* ds, float lo, float hi,
                             float* err) {
  for (int k = 0; k < G; ++k) err[k] = 0;
  for (int i = 0; i < N; ++i) {
    for (int k = 0; k < G; ++k) {
      const float v = xt[i * G + k];
      const float l = round_clamped_f(v / ds[k], lo, hi);
      const float diff = ds[k] * l - v;
      err[k] += wt[i * G + k] * diff * diff;
    }
  }
}

// Tries the 8 neighbours (scale code ± 1, min code ± 1) of every group's codes.
template <int G, int N>
void refine_affine_groups(const float* x, const float* w, float d, float dmin, float nmax,
                          int code_max, uint8_t* ls, uint8_t* lm) {
  alignas(16) float xt[N * G], wt[N * G];
  transpose<G, N>(x, xt);
  transpose<G, N>(w, wt);
  alignas(16) float best[G], err[G], ds[G], dm[G];
  int best_s[G], best_m[G];
  for (int k = 0; k < G; ++k) {
    best_s[k] = ls[k];
    best_m[k] = lm[k];
    ds[k] = d * ls[k];
    dm[k] = dmin * lm[k];
  }
  affine_errors<G, N>(xt, wt, ds, dm, nmax, best);
  for (int a = -1; a <= 1; ++a) {
    for (int b = -1; b <= 1; ++b) {
      if (a == 0 && b == 0) continue;
      int s[G], m[G];
      for (int k = 0; k < G; ++k) {
        s[k] = std::clamp(ls[k] + a, 0, code_max);
        m[k] = std::clamp(lm[k] + b, 0, code_max);
        ds[k] = d * s[k];
        dm[k] = dmin * m[k];
      }
      affine_errors<G, N>(xt, wt, ds, dm, nmax, err);
      for (int k = 0; k < G; ++k) {
        const bool better = err[k] < best[k];
        best[k] = better ? err[k] : best[k];
        best_s[k] = better ? s[k] : best_s[k];
        best_m[k] = better ? m[k] : best_m[k];
      }
    }
  }
  for (int k = 0; k < G; ++k) {
    ls[k] = static_cast<uint8_t>(best_s[k]);
    lm[k] = static_cast<uint8_t>(best_m[k]);
  }
}

// Tries code ± 1 for 16 symmetric groups of 16 with weights x^2; the decoded
// scale of code c is d * (c - bias), codes in [code_min, code_max].
template <typename Code>
void refine_symmetric_groups(const float* x, float d, int bias, int code_min, int code_max,
                             float lo, float hi, Code* codes) {
  constexpr int G = 16, N = 16;
  alignas(16) float xt[N * G], wt[N * G];
  transpose<G, N>(x, xt);
  for (int i = 0; i < N * G; ++i) wt[i] = xt[i] * xt[i];
  alignas(16) float best[G], err[G], ds[G];
  int best_c[G];
  for (int k = 0; k < G; ++k) {
    best_c[k] = codes[k];
    ds[k] = d * (codes[k] - bias);
  }
  symmetric_errors<G, N>(xt, wt, ds, lo, hi, best);
  for (int a = -1; a <= 1; a += 2) {
    int c[G];
    for (int k = 0; k < G; ++k) {
      c[k] = std::clamp(codes[k] + a, code_min, code_max);
      ds[k] = d * (c[k] - bias);
    }
    symmetric_errors<G, N>(xt, wt, ds, lo, hi, err);
    for (int k = 0; k < G; ++k) {
      const bool better = err[k] < best[k];
      best[k] = better ? err[k] : best[k];
      best_c[k] = better ? c[k] : best_c[k];
    }
  }
  for (int k = 0; k < G; ++k) codes[k] = static_cast<Code>(best_c[k]);
}

}  // namespace

void search_affine_k4(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep,
                      AffineResult* out) {
  search_affine_groups<8, 32, false>(x, w, static_cast<float>(nmax), rmin, rdelta, nstep, out);
}

void search_affine_q2(const float* x, AffineResult* out) {
  alignas(16) float w[256];
  for (int i = 0; i < 256; ++i) w[i] = std::fabs(x[i]);
  search_affine_groups<16, 16, true>(x, w, 3.0f, -0.5f, 0.1f, 15, out);
}

void affine_codes(const float* x, int n, const AffineResult& r, int nmax, uint8_t* L) {
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(round_clamped(r.iscale * (x[i] - r.round_min), 0, nmax));
  }
}

void search_symmetric_q6(const float* x, SymmetricResult* out) {
  constexpr int G = 16, N = 16;
  constexpr float kNmax = 32;
  alignas(16) float xt[N * G], wt[N * G], wxt[N * G];
  transpose<G, N>(x, xt);
  alignas(16) float mx[G] = {}, amax[G] = {};
  for (int i = 0; i < N; ++i) {
    for (int k = 0; k < G; ++k) {
      const float v = xt[i * G + k];
      const bool larger = std::fabs(v) > amax[k];  // first of equal magnitudes wins
      amax[k] = larger ? std::fabs(v) : amax[k];
      mx[k] = larger ? v : mx[k];
      wt[i * G + k] = v * v;
      wxt[i * G + k] = v * v * v;
    }
  }
  alignas(16) float iscale[G], slx[G], sl2[G];
  auto grid_sums = [&] {
    for (int k = 0; k < G; ++k) slx[k] = sl2[k] = 0;
    for (int i = 0; i < N; ++i) {
      for (int k = 0; k < G; ++k) {
        const float l = round_clamped_f(iscale[k] * xt[i * G + k], -kNmax, kNmax - 1);
        slx[k] += wxt[i * G + k] * l;
        sl2[k] += wt[i * G + k] * l * l;
      }
    }
  };
  alignas(16) float scale[G], best[G], best_iscale[G];
  for (int k = 0; k < G; ++k) iscale[k] = -kNmax / mx[k];
  grid_sums();
  for (int k = 0; k < G; ++k) {
    scale[k] = sl2[k] != 0 ? slx[k] / sl2[k] : 0.0f;
    best[k] = scale[k] * slx[k];  // the error reduction slx^2 / sl2: larger is better
    best_iscale[k] = iscale[k];
  }
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float stretch = -(kNmax + 0.1f * is);
    for (int k = 0; k < G; ++k) iscale[k] = stretch / mx[k];
    grid_sums();
    for (int k = 0; k < G; ++k) {
      const bool better = (sl2[k] > 0) & (slx[k] * slx[k] > best[k] * sl2[k]);
      const float s = slx[k] / sl2[k];
      scale[k] = better ? s : scale[k];
      best[k] = better ? s * slx[k] : best[k];
      best_iscale[k] = better ? iscale[k] : best_iscale[k];
    }
  }
  for (int k = 0; k < G; ++k) {
    out[k] = amax[k] >= kGroupMaxEps ? SymmetricResult{scale[k], best_iscale[k]}
                                     : SymmetricResult{0.0f, 0.0f};
  }
}

void symmetric_codes_q6(const float* x, const SymmetricResult& r, uint8_t* L) {
  if (r.iscale == 0) {  // all-zero group: llama.cpp leaves codes 0
    std::memset(L, 0, 16);
    return;
  }
  for (int i = 0; i < 16; ++i) {
    L[i] = static_cast<uint8_t>(round_clamped(r.iscale * x[i], -32, 31) + 32);
  }
}

float search_symmetric_q3(const float* x, uint8_t* L) {
  constexpr int kN = 16;
  constexpr int kNmax = 4;
  float max = 0, amax = 0;
  for (int i = 0; i < kN; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax >= kGroupMaxEps)) {
    std::memset(L, 0, kN);
    return 0.f;
  }
  const float iscale = -kNmax / max;
  int l[kN];
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < kN; ++i) {
    l[i] = round_clamped(iscale * x[i], -kNmax, kNmax - 1);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l[i];
    suml2 += w * l[i] * l[i];
  }
  // Coordinate descent: move one code at a time to its best value for the
  // least-squares scale of the others, keeping the move if the fit improves.
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < kN; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * l[i];
      if (slx > 0) {
        float sl2 = suml2 - w * l[i] * l[i];
        const int new_l = round_clamped(x[i] * sl2 / slx, -kNmax, kNmax - 1);
        if (new_l != l[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            l[i] = new_l;
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < kN; ++i) L[i] = static_cast<uint8_t>(l[i] + kNmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void refine_codes_k4(const float* x, const float* w, float d, float dmin, int nmax, uint8_t* ls,
                     uint8_t* lm) {
  refine_affine_groups<8, 32>(x, w, d, dmin, static_cast<float>(nmax), 63, ls, lm);
}

void refine_codes_q2(const float* x, float d, float dmin, uint8_t* ls, uint8_t* lm) {
  alignas(16) float w[256];
  for (int i = 0; i < 256; ++i) w[i] = std::fabs(x[i]);
  refine_affine_groups<16, 16>(x, w, d, dmin, 3.0f, 15, ls, lm);
}

void refine_codes_q6(const float* x, float d, int8_t* scales) {
  refine_symmetric_groups(x, d, 0, -128, 127, -32.0f, 31.0f, scales);
}

void refine_codes_q3(const float* x, float d, uint8_t* codes) {
  refine_symmetric_groups(x, d, 32, 0, 63, -4.0f, 3.0f, codes);
}

}  // namespace sustain::kquant

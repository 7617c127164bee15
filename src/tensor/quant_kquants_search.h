// Scale searches behind the K-quant quantizers (quant_kquants.cc). Internal to
// src/tensor: nothing outside the quantizers should depend on these.
//
// Every function works on all sub-blocks of one super-block at once (8 groups
// of 32 or 16 groups of 16 consecutive elements of x), because the groups are
// independent and the compiler can then run them in SIMD lanes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sustain::kquant {

// Groups whose largest magnitude is below this are treated as all zero (llama.cpp's value).
inline constexpr float kGroupMaxEps = 1e-15f;

// Clamps v into [lo, hi], then rounds to nearest with ties to even (the current
// rounding mode). Clamping first keeps NaN (-> lo) and huge values well defined;
// for in-range values it equals rounding then clamping, since lo and hi are integers.
inline float round_clamped_f(float v, float lo, float hi) {
  v = std::max(lo, v);  // NaN compares false: yields lo
  v = std::min(hi, v);
  // Adding 1.5 * 2^23 leaves no fraction bits, so the FPU rounds for us (|v| < 2^22).
  constexpr float kMagic = 12582912.f;
  return (v + kMagic) - kMagic;
}
inline int round_clamped(float v, int lo, int hi) {
  return static_cast<int>(round_clamped_f(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// Result of an affine (scale + min) search over one group: x ≈ scale * l - neg_min.
// `iscale` and `round_min` are how the winning codes were rounded (l = round(iscale * (x -
// round_min))), kept so the codes can be rebuilt when the group's final scale is zero.
struct AffineResult {
  float scale = 0;
  float neg_min = 0;
  float iscale = 0;
  float round_min = 0;
};

// Weighted least-squares search of llama.cpp's make_qkx2_quants for the 8
// groups of 32 of a Q4_K / Q5_K super-block, weights w: tries the plain
// min/max grid and nstep + 1 stretched grids iscale = (nmax + rmin + rdelta *
// is) / (max - min), fits scale and min to each grid's codes by weighted least
// squares and keeps the lowest weighted squared error. min is never positive.
void search_affine_k4(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep,
                      AffineResult* out);

// The same search for the 16 groups of 16 of a Q2_K super-block, codes 0..3,
// with weights |x| and the weighted absolute error as the criterion (llama.cpp's
// choice for 2 bits).
void search_affine_q2(const float* x, AffineResult* out);

// Rebuilds the codes of a search result (for groups whose final scale is zero).
void affine_codes(const float* x, int n, const AffineResult& r, int nmax, uint8_t* L);

// Q6_K: the scale of each of the 16 groups of 16 for codes in [-32, 31], searched
// over 19 grid stretches with weights x^2 (llama.cpp's make_qx_quants, rmse_type 1).
// Positive or negative: the largest-magnitude element maps to -32.
struct SymmetricResult {
  float scale = 0;
  float iscale = 0;  // how the winning codes were rounded; 0 for an all-zero group
};
void search_symmetric_q6(const float* x, SymmetricResult* out);
void symmetric_codes_q6(const float* x, const SymmetricResult& r, uint8_t* L);

// Q3_K: the scale of one group of 16 for codes in [-4, 3], refined by coordinate
// descent with weights x^2 (llama.cpp's make_q3_quants); writes codes + 4 to L.
float search_symmetric_q3(const float* x, uint8_t* L);

// Second pass over the quantized scale codes: with the super-block scale(s)
// fixed, moves each group's scale code (and min code) by ±1 where that lowers
// the group's weighted squared error after re-rounding its elements. A group
// never ends up worse than with the codes it was given.
void refine_codes_k4(const float* x, const float* w, float d, float dmin, int nmax, uint8_t* ls,
                     uint8_t* lm);
void refine_codes_q2(const float* x, float d, float dmin, uint8_t* ls, uint8_t* lm);
void refine_codes_q6(const float* x, float d, int8_t* scales);
void refine_codes_q3(const float* x, float d, uint8_t* codes);

}  // namespace sustain::kquant

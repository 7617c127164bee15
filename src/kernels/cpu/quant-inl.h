// Per-target integer SIMD primitives and the tile walk for the quantized
// matmul kernels.
//
// Highway 1.0.3 has no int8 dot-product op, so the x86 paths use raw
// intrinsics. They are written once over a "64 int8 lanes" type, I64: one
// __m512i on AVX3 / AVX3_DL, a pair of __m256i on AVX2, so each format's
// kernel body serves both widths. Other targets define SUSTAIN_X86 0 and the
// kernels use their portable path instead.
//
// Included by each kernels/cpu/*.cc inside its foreach_target pass (per-target
// include guard below). Use SUSTAIN_SIMD_BEGIN / END instead of
// HWY_BEFORE_NAMESPACE / HWY_AFTER_NAMESPACE: on AVX3_DL they also enable
// AVX-512 VNNI, which Highway 1.0.3's AVX3_DL target string omits (it names
// the VEX-encoded "avxvnni" instead; that one is switched off, because Zen 4
// has AVX-512 VNNI but not AVX-VNNI and would fault on a VEX vpdpbusd).

#if defined(SUSTAIN_KERNELS_CPU_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_KERNELS_CPU_QUANT_INL_H_
#undef SUSTAIN_KERNELS_CPU_QUANT_INL_H_
#else
#define SUSTAIN_KERNELS_CPU_QUANT_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/cpu/kernels.h"

#undef SUSTAIN_X86
#undef SUSTAIN_VNNI
#undef SUSTAIN_SIMD_EXTRA
#undef SUSTAIN_SIMD_OPEN
// Highway 1.0.3's AVX3_DL target names avxvnni (the VEX form), not
// avx512vnni. GCC gets it by a target pragma inside Highway's push (popped
// with it); clang (the sanitizer and fuzz build), which keeps only the
// innermost of nested target pushes, by Highway's push with it added.
#if HWY_TARGET == HWY_AVX3_DL && defined(__clang__)
#define SUSTAIN_X86 512
#define SUSTAIN_VNNI 1
#define SUSTAIN_SIMD_EXTRA
#define SUSTAIN_SIMD_OPEN HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512vnni")
#elif HWY_TARGET == HWY_AVX3_DL
#define SUSTAIN_X86 512
#define SUSTAIN_VNNI 1
#define SUSTAIN_SIMD_EXTRA _Pragma("GCC target(\"avx512vnni,no-avxvnni\")")
#elif HWY_TARGET == HWY_AVX3
#define SUSTAIN_X86 512
#define SUSTAIN_VNNI 0
#define SUSTAIN_SIMD_EXTRA
#elif HWY_TARGET == HWY_AVX2
#define SUSTAIN_X86 256
#define SUSTAIN_VNNI 0
#define SUSTAIN_SIMD_EXTRA
#else
#define SUSTAIN_X86 0
#define SUSTAIN_VNNI 0
#define SUSTAIN_SIMD_EXTRA
#endif

#ifndef SUSTAIN_SIMD_OPEN
#define SUSTAIN_SIMD_OPEN \
  HWY_BEFORE_NAMESPACE(); \
  SUSTAIN_SIMD_EXTRA
#endif

#ifndef SUSTAIN_SIMD_BEGIN
#define SUSTAIN_SIMD_BEGIN() SUSTAIN_SIMD_OPEN static_assert(true, "requires a trailing semicolon")
#define SUSTAIN_SIMD_END() HWY_AFTER_NAMESPACE()
#endif

SUSTAIN_SIMD_BEGIN();
namespace sustain::kernels::cpu::HWY_NAMESPACE {

#if SUSTAIN_X86

inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}
inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline __m128i load16(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// 32 four-bit values of a 16-byte legacy block, in element order: low
// nibbles are elements 0..15, high nibbles 16..31.
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = load16(qs);
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

#if SUSTAIN_X86 == 512
struct I64 {
  __m512i v;
};
struct F64 {
  __m512 v;
};
inline I64 load64(const void* p) {
  return {_mm512_loadu_si512(p)};
}
inline I64 join(__m256i lo, __m256i hi) {
  return {_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)};
}
inline I64 set8(int8_t x) {
  return {_mm512_set1_epi8(x)};
}
inline I64 set16(int16_t lo, int16_t hi) {
  return join(_mm256_set1_epi16(lo), _mm256_set1_epi16(hi));
}
inline I64 zero() {
  return {_mm512_setzero_si512()};
}
inline I64 operator&(I64 a, I64 b) {
  return {_mm512_and_si512(a.v, b.v)};
}
inline I64 operator|(I64 a, I64 b) {
  return {_mm512_or_si512(a.v, b.v)};
}
template <int kBits>
inline I64 srl16(I64 a) {
  return {_mm512_srli_epi16(a.v, kBits)};
}
template <int kBits>
inline I64 sll16(I64 a) {
  return {_mm512_slli_epi16(a.v, kBits)};
}
inline I64 sub8(I64 a, I64 b) {
  return {_mm512_sub_epi8(a.v, b.v)};
}
inline I64 add32(I64 a, I64 b) {
  return {_mm512_add_epi32(a.v, b.v)};
}
// u8 x s8 pairs summed to s16 (saturating: callers keep |u*s| pairs < 2^15).
inline I64 maddubs(I64 u, I64 s) {
  return {_mm512_maddubs_epi16(u.v, s.v)};
}
inline I64 madd16(I64 a, I64 b) {
  return {_mm512_madd_epi16(a.v, b.v)};
}
// acc + madd16(a, b): one vpdpwssd on VNNI.
inline I64 dot_s16(I64 acc, I64 a, I64 b) {
#if SUSTAIN_VNNI
  return {_mm512_dpwssd_epi32(acc.v, a.v, b.v)};
#else
  return add32(acc, madd16(a, b));
#endif
}
// acc + madd of 16 int16 pairs into int32 lanes 0..7 (lanes 8..15 unchanged).
inline I64 dot_s16_low(I64 acc, __m256i a, __m256i b) {
#if SUSTAIN_VNNI
  return {_mm512_dpwssd_epi32(acc.v, _mm512_zextsi256_si512(a), _mm512_zextsi256_si512(b))};
#else
  return add32(acc, {_mm512_zextsi256_si512(_mm256_madd_epi16(a, b))});
#endif
}
// acc += sum of 4 adjacent u8 x s8 products per int32 lane.
inline I64 dot_u8s8(I64 acc, I64 u, I64 s) {
#if SUSTAIN_VNNI
  return {_mm512_dpbusd_epi32(acc.v, u.v, s.v)};
#else
  return add32(acc, madd16(maddubs(u, s), {_mm512_set1_epi16(1)}));
#endif
}
// Signed weights: |w| as the unsigned operand, the sign moved onto the activations.
struct Signed {
  I64 abs;
  __mmask64 neg;
};
inline Signed prep_signed(I64 w) {
  return {{_mm512_abs_epi8(w.v)}, _mm512_movepi8_mask(w.v)};
}
inline I64 dot_signed(I64 acc, const Signed& w, I64 a) {
  return dot_u8s8(acc, w.abs, {_mm512_mask_sub_epi8(a.v, w.neg, _mm512_setzero_si512(), a.v)});
}
inline F64 fzero() {
  return {_mm512_setzero_ps()};
}
// acc += float(i) * s (all lanes) or (lanes 0..7: s_lo, 8..15: s_hi).
inline F64 fmadd(I64 i, float s, F64 acc) {
  return {_mm512_fmadd_ps(_mm512_cvtepi32_ps(i.v), _mm512_set1_ps(s), acc.v)};
}
inline F64 fmadd2(I64 i, float s_lo, float s_hi, F64 acc) {
  const __m512 s = _mm512_insertf32x8(_mm512_set1_ps(s_lo), _mm256_set1_ps(s_hi), 1);
  return {_mm512_fmadd_ps(_mm512_cvtepi32_ps(i.v), s, acc.v)};
}
inline float reduce(F64 a) {
  return _mm512_reduce_add_ps(a.v);
}
inline F64 add(F64 a, F64 b) {
  return {_mm512_add_ps(a.v, b.v)};
}
// 16 int32 lanes from 8 int32 in a __m256i (upper half zero).
inline I64 widen(__m256i x) {
  return {_mm512_zextsi256_si512(x)};
}
#else   // AVX2
struct I64 {
  __m256i lo, hi;
};
struct F64 {
  __m256 lo, hi;
};
inline I64 load64(const void* p) {
  return {load32(p), load32(static_cast<const uint8_t*>(p) + 32)};
}
inline I64 join(__m256i lo, __m256i hi) {
  return {lo, hi};
}
inline I64 set8(int8_t x) {
  return {_mm256_set1_epi8(x), _mm256_set1_epi8(x)};
}
inline I64 set16(int16_t lo, int16_t hi) {
  return {_mm256_set1_epi16(lo), _mm256_set1_epi16(hi)};
}
inline I64 zero() {
  return {_mm256_setzero_si256(), _mm256_setzero_si256()};
}
inline I64 operator&(I64 a, I64 b) {
  return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)};
}
inline I64 operator|(I64 a, I64 b) {
  return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)};
}
template <int kBits>
inline I64 srl16(I64 a) {
  return {_mm256_srli_epi16(a.lo, kBits), _mm256_srli_epi16(a.hi, kBits)};
}
template <int kBits>
inline I64 sll16(I64 a) {
  return {_mm256_slli_epi16(a.lo, kBits), _mm256_slli_epi16(a.hi, kBits)};
}
inline I64 sub8(I64 a, I64 b) {
  return {_mm256_sub_epi8(a.lo, b.lo), _mm256_sub_epi8(a.hi, b.hi)};
}
inline I64 add32(I64 a, I64 b) {
  return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)};
}
inline I64 maddubs(I64 u, I64 s) {
  return {_mm256_maddubs_epi16(u.lo, s.lo), _mm256_maddubs_epi16(u.hi, s.hi)};
}
inline I64 madd16(I64 a, I64 b) {
  return {_mm256_madd_epi16(a.lo, b.lo), _mm256_madd_epi16(a.hi, b.hi)};
}
inline I64 dot_s16(I64 acc, I64 a, I64 b) {
  return add32(acc, madd16(a, b));
}
inline I64 dot_s16_low(I64 acc, __m256i a, __m256i b) {
  return {_mm256_add_epi32(acc.lo, _mm256_madd_epi16(a, b)), acc.hi};
}
inline I64 dot_u8s8(I64 acc, I64 u, I64 s) {
  const __m256i ones = _mm256_set1_epi16(1);
  return add32(acc, madd16(maddubs(u, s), {ones, ones}));
}
struct Signed {
  I64 abs, sign;
};
inline Signed prep_signed(I64 w) {
  return {{_mm256_abs_epi8(w.lo), _mm256_abs_epi8(w.hi)}, w};
}
inline I64 dot_signed(I64 acc, const Signed& w, I64 a) {
  return dot_u8s8(acc, w.abs,
                  {_mm256_sign_epi8(a.lo, w.sign.lo), _mm256_sign_epi8(a.hi, w.sign.hi)});
}
inline F64 fzero() {
  return {_mm256_setzero_ps(), _mm256_setzero_ps()};
}
inline F64 fmadd(I64 i, float s, F64 acc) {
  const __m256 sv = _mm256_set1_ps(s);
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(i.lo), sv, acc.lo),
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(i.hi), sv, acc.hi)};
}
inline F64 fmadd2(I64 i, float s_lo, float s_hi, F64 acc) {
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(i.lo), _mm256_set1_ps(s_lo), acc.lo),
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(i.hi), _mm256_set1_ps(s_hi), acc.hi)};
}
inline F64 add(F64 a, F64 b) {
  return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}
inline float reduce(F64 a) {
  const __m256 s = _mm256_add_ps(a.lo, a.hi);
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}
inline I64 widen(__m256i x) {
  return {x, _mm256_setzero_si256()};
}
#endif  // SUSTAIN_X86 == 512

// Sum of the 8 int32 lanes of x, as float lanes times s, added to acc (8 lanes).
inline __m256 fmadd8(__m256i x, float s, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(x), _mm256_set1_ps(s), acc);
}
inline float reduce8(__m256 a) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

#endif  // SUSTAIN_X86

// The tile walk shared by the quantized matmul kernels: for each group of up
// to kMaxTokens tokens, every weight row of the tile is dotted with all of them
// at once, so a row is loaded and unpacked once per group (batched decode and
// speculative verification have 2..16 tokens) and its bytes come from L1/L2
// after the first group. Kernel::Dot<NT>(w_row, act_rows[NT], n_in, out[NT]).
// AVX-512's 32 registers hold 8 tokens' accumulators beside an unpacked
// super-block; AVX2's 16 hold 4.
#if SUSTAIN_X86 == 512
inline constexpr int kMaxTokens = 8;
#else
inline constexpr int kMaxTokens = 4;
#endif

// Kernel::Dot<nt> for a run-time nt in 1..NT.
template <class Kernel, int NT>
inline void dot_tokens(int nt, const uint8_t* w, const uint8_t* const* act, int64_t n, float* out) {
  if constexpr (NT > 1) {
    if (nt < NT) return dot_tokens<Kernel, NT - 1>(nt, w, act, n, out);
  }
  Kernel::template Dot<NT>(w, act, n, out);
}

template <class Kernel>
void run_tile(const MatmulArgs& a, int64_t row0, int64_t row1, int64_t tok0, int64_t tok1) {
  for (int64_t t = tok0; t < tok1; t += kMaxTokens) {
    const int nt = static_cast<int>(std::min<int64_t>(kMaxTokens, tok1 - t));
    const uint8_t* act[kMaxTokens];
    for (int i = 0; i < kMaxTokens; ++i)
      act[i] = a.act + static_cast<size_t>(t + std::min(i, nt - 1)) * a.act_stride;
    float out[kMaxTokens];
    for (int64_t r = row0; r < row1; ++r) {
      const uint8_t* w = a.w + static_cast<size_t>(r) * a.w_stride;
      dot_tokens<Kernel, kMaxTokens>(nt, w, act, a.n_in, out);
      for (int i = 0; i < nt; ++i) a.y[(t + i) * a.ldy + r] = out[i];
    }
  }
}

}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
SUSTAIN_SIMD_END();

#endif  // include guard

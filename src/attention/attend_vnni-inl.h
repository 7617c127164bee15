// The AVX-512 VNNI integer paths of the attention kernel (attend_item-inl.h):
// K·q with an int8 copy of q (vpdpbusd) for Q8_0 and the 4/5-bit K formats,
// and o += p·V with int16 softmax weights (vpdpwssd) for Q8_0 and the 4/5-bit
// V formats, on pages in the row layout. Compiled only where
// SUSTAIN_ATTN_VNNI is 1 (the AVX3_DL / AVX3_ZEN4 targets).

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_VNNI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_VNNI_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_VNNI_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_VNNI_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attention/kernel.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"

#include "hwy/highway.h"

#include "attention/attend_target-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if SUSTAIN_ATTN_VNNI

// A state row's query quantized to int8 once per item (q8_row_floats):
// codes in blocks of 32 (an even count, zero-padded), per block d = the
// codes' scale × the softmax scale, and corr = 128 × sum(codes).
struct Q8Query {
  const int8_t* qs;
  const float* d;
  const int32_t* corr;
};

inline Q8Query Q8QueryAt(float* base, int dk) {
  const int nbp = int((size_t(dk) + 63) / 64 * 2);
  auto* qs = reinterpret_cast<int8_t*>(base);
  const float* d = base + nbp * kQK / 4;
  return {qs, d, reinterpret_cast<const int32_t*>(d + nbp)};
}

// Quantizes q (dk floats) into the row at base, like Q8_0 but with an f32
// scale (rounding to nearest, ties away like lroundf), a block of 32 in two
// vectors: once per row and item, which with 8 split items per layer and a
// scalar lroundf per element was a fifth of decode attention at 4K.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
// round(t) with ties away from zero, clamped to [-127, 127], as int32:
// trunc(t) plus sign(t) where |t - trunc(t)| >= 0.5 (the difference is exact).
HWY_INLINE __m512i RoundAwayClamp127(__m512 t) {
  const __m512 tr = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(t, tr));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(t, _mm512_set1_ps(-0.0f)));
  const __m512i v = _mm512_cvttps_epi32(_mm512_mask_add_ps(tr, up, tr, one));
  return _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
}
inline void QuantizeQuery(const float* q, int dk, float scale, float* base) {
  const int nbp = int((size_t(dk) + 63) / 64 * 2);
  auto* qs = reinterpret_cast<int8_t*>(base);
  float* d = base + nbp * kQK / 4;
  auto* corr = reinterpret_cast<int32_t*>(d + nbp);
  for (int b = 0; b < nbp; ++b) {
    int8_t* out = qs + b * kQK;
    if (b * kQK >= dk) {
      std::fill(out, out + kQK, int8_t(0));
      d[b] = 0.0f;
      corr[b] = 0;
      continue;
    }
    const float* x = q + b * kQK;
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float db = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(db > 0.0f ? 1.0f / db : 0.0f);
    const __m512i v0 = RoundAwayClamp127(_mm512_mul_ps(x0, inv));
    const __m512i v1 = RoundAwayClamp127(_mm512_mul_ps(x1, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(v0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtepi32_epi8(v1));
    d[b] = db * scale;
    corr[b] = 128 * _mm512_reduce_add_epi32(_mm512_add_epi32(v0, v1));
  }
}
#pragma GCC pop_options

// The VNNI functions below use raw intrinsics only: Highway's ops carry its
// AVX3_DL target string (with avxvnni), which functions compiled without
// avxvnni may not inline. ScoreRowsQ8 is therefore called, not inlined.
#pragma GCC push_options
#pragma GCC target("avx512vnni,no-avxvnni")

// Blocks b and b + 1 of a Q8_0 row's codes as unsigned (code + 128) bytes;
// only block b where b + 1 is past the row (the upper half is then 0x80,
// which meets the zero padding of q).
HWY_INLINE __m512i LoadQ8Pair(const BlockQ8_0* blk, bool pair) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
  const __m512i x = pair ? _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                              _mm256_loadu_si256(
                                                  reinterpret_cast<const __m256i*>(blk[1].qs)),
                                              1)
                         : _mm512_zextsi256_si512(lo);
  return _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// A K row of zero blocks for the keys a tail group lacks (scale 0: their
// scores are 0 and never read), for head dims up to 32 blocks.
alignas(64) inline constexpr uint8_t kZeroKeyRow[32 * sizeof(BlockQ8_0)] = {};

// The f32 scales of block b of four rows at rows[0..3].
HWY_INLINE __m128 Q8Scales4At(const uint8_t* const* rows, int b) {
  const auto sc = [&](int t) { return reinterpret_cast<const BlockQ8_0*>(rows[t])[b].d; };
  return _mm_cvtph_ps(
      _mm_setr_epi16(short(sc(0)), short(sc(1)), short(sc(2)), short(sc(3)), 0, 0, 0, 0));
}

// The f32 scales of block b of four rows kstride apart.
HWY_INLINE __m128 Q8Scales4(const uint8_t* k0, size_t kstride, int b) {
  const auto sc = [&](int t) {
    return reinterpret_cast<const BlockQ8_0*>(k0 + t * kstride)[b].d;
  };
  return _mm_cvtph_ps(_mm_setr_epi16(short(sc(0)), short(sc(1)), short(sc(2)), short(sc(3)), 0, 0,
                                     0, 0));
}

// scores[r][j] = scale · q_r · k_j for j < n with Q8_0 K and int8 q: per
// pair of blocks one vpdpbusd per key and row, four keys reduced together.
// pf's rows [j, j + count) prefetched (Prefetch::rows without Highway).
HWY_INLINE void PrefetchQ8(const Prefetch& pf, int j, int count) {
  if (j >= pf.n) return;
  const int end = std::min(pf.n, j + count);
  for (size_t off = j * pf.k_row; off < end * pf.k_row; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(pf.k + off), _MM_HINT_T0);
  for (size_t off = j * pf.v_row; off < end * pf.v_row; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(pf.v + off), _MM_HINT_T0);
}

template <int R>
HWY_NOINLINE void ScoreRowsQ8(const Q8Query* q, const uint8_t* krows, size_t kstride, int n,
                              int dk, float* const* scores, const Prefetch& pf) {
  const int nb = dk / kQK;
  const int8_t* qs[R];
  const float* qd[R];
  const int32_t* qc[R];
  for (int r = 0; r < R; ++r) {
    qs[r] = q[r].qs;
    qd[r] = q[r].d;
    qc[r] = q[r].corr;
  }
  SUSTAIN_CHECK(nb <= 32);  // kZeroKeyRow
  // Four keys at a time; the last 1-3 as a group of four with zero rows for
  // the missing keys. Lane t of the sums is key t's alone, so a key's score
  // has the same bits whatever the tile's length: a row of a block, whose
  // tile runs to the longest row, is scored as alone (batch invariance).
  for (int j = 0; j < n; j += 4) {
    const int m = std::min(4, n - j);
    PrefetchQ8(pf, j, m);
    const uint8_t* rows[4];
    for (int t = 0; t < 4; ++t) rows[t] = t < m ? krows + (j + t) * kstride : kZeroKeyRow;
    __m128 out[R];
    for (int r = 0; r < R; ++r) out[r] = _mm_setzero_ps();
    // Blocks b and b + 1 (kPair) or block b alone (an odd last block).
    const auto blocks = [&](int b, auto pair_tag) {
      constexpr bool kPair = decltype(pair_tag)::value;
      __m512i x[4];
      for (int t = 0; t < 4; ++t)
        x[t] = LoadQ8Pair(reinterpret_cast<const BlockQ8_0*>(rows[t]) + b, kPair);
      const __m128 kd0 = Q8Scales4At(rows, b);
      const __m128 kd1 = kPair ? Q8Scales4At(rows, b + 1) : _mm_setzero_ps();
      for (int r = 0; r < R; ++r) {
        const __m512i qv = _mm512_loadu_si512(qs[r] + b * kQK);
        const __m512i z = _mm512_setzero_si512();
        const __m512i a0 = _mm512_dpbusd_epi32(z, x[0], qv);
        const __m512i a1 = _mm512_dpbusd_epi32(z, x[1], qv);
        const __m512i a2 = _mm512_dpbusd_epi32(z, x[2], qv);
        const __m512i a3 = _mm512_dpbusd_epi32(z, x[3], qv);
        // Transpose-and-add: each 128-bit lane holds partial sums of keys
        // 0..3; lanes 0-1 belong to block b, 2-3 to block b + 1.
        const __m512i ab =
            _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
        const __m512i ce =
            _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
        const __m512i s4 =
            _mm512_add_epi32(_mm512_unpacklo_epi64(ab, ce), _mm512_unpackhi_epi64(ab, ce));
        const __m512i u = _mm512_add_epi32(s4, _mm512_shuffle_i64x2(s4, s4, 0xB1));
        const __m128i s0 = _mm_sub_epi32(_mm512_castsi512_si128(u), _mm_set1_epi32(qc[r][b]));
        out[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(s0), _mm_mul_ps(kd0, _mm_set1_ps(qd[r][b])), out[r]);
        if constexpr (kPair) {
          const __m128i s1 =
              _mm_sub_epi32(_mm512_extracti32x4_epi32(u, 2), _mm_set1_epi32(qc[r][b + 1]));
          out[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(s1), _mm_mul_ps(kd1, _mm_set1_ps(qd[r][b + 1])),
                                out[r]);
        }
      }
    };
    int b = 0;
    for (; b + 2 <= nb; b += 2) blocks(b, std::true_type());
    if (b < nb) blocks(b, std::false_type());
    if (m == 4) {
      for (int r = 0; r < R; ++r) _mm_storeu_ps(scores[r] + j, out[r]);
    } else {
      alignas(16) float four[4];
      for (int r = 0; r < R; ++r) {
        _mm_store_ps(four, out[r]);
        for (int t = 0; t < m; ++t) scores[r][j + t] = four[t];
      }
    }
  }
}
// The 4/5-bit K formats on VNNI: their codes are unsigned, so they are the
// u8 operand of vpdpbusd against the int8 q directly. Per block b of key t:
// q·k = d_q d_t (sum code·q - kOffset·sum q) (+ m_t d_q sum q for the
// formats with a minimum). Four keys at a time, one key per 128-bit lane:
// the low nibbles (elements 0..15) against q's first 16 codes, the high
// nibbles against the next 16; the integer dots are scaled per block into
// f32 accumulators and reduced once per four keys.
inline const uint8_t* HighOf(const BlockQ5_0& b) { return b.qh; }
inline const uint8_t* HighOf(const BlockQ5_1& b) { return b.qh; }
inline uint16_t MinOf(const BlockQ4_1& b) { return b.m; }
inline uint16_t MinOf(const BlockQ5_1& b) { return b.m; }

template <int R, class Blk, int kOffset, bool kMin, bool kHigh>
HWY_NOINLINE void ScoreRowsQ4(const Q8Query* q, const uint8_t* krows, size_t kstride, int n,
                              int dk, float* const* scores, const Prefetch& pf) {
  const int nb = dk / kQK;
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  SUSTAIN_CHECK(nb * sizeof(Blk) <= sizeof(kZeroKeyRow));
  // Four keys at rows[0..3], one per 128-bit lane: acc[r] holds 4 partial
  // sums per key, mins[r] the minimum terms of the formats that have one.
  const auto group = [&](const uint8_t* const* rows, __m512* acc, __m128* mins) {
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_setzero_ps();
      mins[r] = _mm_setzero_ps();
    }
    for (int b = 0; b < nb; ++b) {
      const Blk* bt[4];
      for (int t = 0; t < 4; ++t) bt[t] = reinterpret_cast<const Blk*>(rows[t]) + b;
      __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bt[0]->qs)));
      x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(bt[1]->qs)), 1);
      x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(bt[2]->qs)), 2);
      x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(bt[3]->qs)), 3);
      __m512i lo = _mm512_and_si512(x, nib);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib);
      if constexpr (kHigh) {
        uint64_t mlo = 0, mhi = 0;
        for (int t = 0; t < 4; ++t) {
          uint32_t h;
          std::memcpy(&h, HighOf(*bt[t]), sizeof(h));
          mlo |= uint64_t(h & 0xffffu) << (16 * t);
          mhi |= uint64_t(h >> 16) << (16 * t);
        }
        const __m512i bit4 = _mm512_set1_epi8(16);
        lo = _mm512_mask_add_epi8(lo, __mmask64(mlo), lo, bit4);
        hi = _mm512_mask_add_epi8(hi, __mmask64(mhi), hi, bit4);
      }
      const __m128 kd4 = _mm_cvtph_ps(_mm_setr_epi16(short(bt[0]->d), short(bt[1]->d),
                                                     short(bt[2]->d), short(bt[3]->d), 0, 0, 0, 0));
      const __m512 kd = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(kd4));
      __m128 km4 = _mm_setzero_ps();
      if constexpr (kMin)
        km4 = _mm_cvtph_ps(_mm_setr_epi16(short(MinOf(*bt[0])), short(MinOf(*bt[1])),
                                          short(MinOf(*bt[2])), short(MinOf(*bt[3])), 0, 0, 0, 0));
      for (int r = 0; r < R; ++r) {
        const int8_t* qb = q[r].qs + b * kQK;
        // corr is 128 × the code sum exactly, so the shift is exact.
        const int32_t sum_q = q[r].corr[b] >> 7;
        __m512i a = _mm512_set1_epi32(-(kOffset / 4) * sum_q);
        a = _mm512_dpbusd_epi32(
            a, lo, _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb))));
        a = _mm512_dpbusd_epi32(
            a, hi,
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16))));
        const float dq = q[r].d[b];
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(kd, _mm512_set1_ps(dq)),
                                 acc[r]);
        if constexpr (kMin) mins[r] = _mm_fmadd_ps(km4, _mm_set1_ps(dq * float(sum_q)), mins[r]);
      }
    }
  };
  // Sixteen keys at a time: the four groups' lane sums reduced together by a
  // transpose-and-add (10 instructions per row instead of 4 × 5). The last
  // 1-15 keys likewise, with zero rows for the missing ones: each key's sum
  // stays its own, so a key's score has the same bits whatever the tile's
  // length (a row of a block is scored as alone: batch invariance).
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int j = 0; j < n; j += 16) {
    const int live = std::min(16, n - j);
    PrefetchQ8(pf, j, live);
    __m512 acc[4][R];
    __m128 mins[4][R];
    for (int g = 0; g < 4; ++g) {
      const uint8_t* rows[4];
      for (int t = 0; t < 4; ++t)
        rows[t] = 4 * g + t < live ? krows + (j + 4 * g + t) * kstride : kZeroKeyRow;
      group(rows, acc[g], mins[g]);
    }
    for (int r = 0; r < R; ++r) {
      // Lane t of group g's 128-bit lanes: [a0+a2, b0+b2, a1+a3, b1+b3] ...
      const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(acc[0][r], acc[1][r]),
                                      _mm512_unpackhi_ps(acc[0][r], acc[1][r]));
      const __m512 t2 = _mm512_add_ps(_mm512_unpacklo_ps(acc[2][r], acc[3][r]),
                                      _mm512_unpackhi_ps(acc[2][r], acc[3][r]));
      // ... then element 4t + g holds key 4g + t's whole sum.
      const __m512d t1d = _mm512_castps_pd(t1), t2d = _mm512_castps_pd(t2);
      const __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(t1d, t2d)),
                                     _mm512_castpd_ps(_mm512_unpackhi_pd(t1d, t2d)));
      __m512 res = _mm512_permutexvar_ps(order, u);
      if constexpr (kMin) {
        __m512 m = _mm512_castps128_ps512(mins[0][r]);
        m = _mm512_insertf32x4(m, mins[1][r], 1);
        m = _mm512_insertf32x4(m, mins[2][r], 2);
        m = _mm512_insertf32x4(m, mins[3][r], 3);
        res = _mm512_add_ps(res, m);
      }
      if (live == 16) {
        _mm512_storeu_ps(scores[r] + j, res);
      } else {
        _mm512_mask_storeu_ps(scores[r] + j, __mmask16((1u << live) - 1), res);
      }
    }
  }
}

// The int16 softmax weights of the integer V paths, per row r and block b:
// w_j = p_r[j] · d_jb, quantized against a bound of their largest, the
// row's largest p in the tile × the largest |d| of the block over the keys
// the row weighs (p > 0: keys only another row of a block sees must not
// move the bound; both are exact maxima, so |w_j| never exceeds it). The
// bound may be up to
// the spread of d above the true largest weight, leaving ≥ 11 of the 15
// bits for block scales within 16× of each other. All blocks' scales are
// copied first, so their vector loads read stores that have retired (a
// load right after 16-bit stores to its bytes stalls on store forwarding).
// `work`: Floats(nb) floats.
template <int R>
struct VScales {
  const uint16_t* d;  // [nb][kTile] f16 block scales, 0 past n
  const uint16_t* m;  // [nb][kTile] f16 block minimums (formats with one)
  __m512 p0[R], p1[R];
  bool row_bounds = false;  // Item::row_bounds
  float pmax[R];

  static size_t Floats(int nb) { return size_t(nb) * kTile; }  // 2 × nb × kTile uint16

  template <class Blk, bool kMin>
  static VScales Load(const float* const* p, const uint8_t* vrows, size_t vstride, int n, int nb,
                      float* work, bool row_bounds) {
    VScales v;
    v.row_bounds = row_bounds;
    auto* d = reinterpret_cast<uint16_t*>(work);
    uint16_t* m = d + size_t(nb) * kTile;
    for (int j = 0; j < n; ++j) {
      const Blk* row = reinterpret_cast<const Blk*>(vrows + j * vstride);
      for (int b = 0; b < nb; ++b) {
        d[b * kTile + j] = row[b].d;
        if constexpr (kMin) m[b * kTile + j] = MinOf(row[b]);
      }
    }
    for (int b = 0; b < nb; ++b) {
      std::fill(d + b * kTile + n, d + (b + 1) * kTile, uint16_t(0));
      if constexpr (kMin) std::fill(m + b * kTile + n, m + (b + 1) * kTile, uint16_t(0));
    }
    v.d = d;
    v.m = m;
    // p beyond a row's visible keys is 0 (TileRows), and so is d beyond n.
    for (int r = 0; r < R; ++r) {
      v.p0[r] = _mm512_loadu_ps(p[r]);
      v.p1[r] = _mm512_loadu_ps(p[r] + 16);
      v.pmax[r] = _mm512_reduce_max_ps(_mm512_max_ps(v.p0[r], v.p1[r]));
    }
    return v;
  }

  // Block b's weights of each row scaled to int16 steps (w0: keys 0-15, w1:
  // 16-31) and the step each unit stands for.
  HWY_INLINE void Weights(int b, __m512* w0, __m512* w1, float* step) const {
    const __m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + b * kTile)));
    const __m512 d1 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + b * kTile + 16)));
    // Q4_0 / Q5_0 scales may be negative (the signed extreme maps to code 0).
    const __m512 a0 = _mm512_abs_ps(d0), a1 = _mm512_abs_ps(d1);
    const __m512 zero = _mm512_setzero_ps();
    const float dmax_tile = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    for (int r = 0; r < R; ++r) {
      // With row_bounds, the bound over the keys this row weighs (p > 0),
      // not every key of the tile: a row of a block is then quantized as it
      // is alone, where the tile ends at its own length (batch invariance).
      const float dmax =
          row_bounds ? _mm512_reduce_max_ps(_mm512_max_ps(
                           _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p0[r], zero, _CMP_GT_OQ), a0),
                           _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p1[r], zero, _CMP_GT_OQ), a1)))
                     : dmax_tile;
      const float bound = pmax[r] * dmax;
      // A bound this small means weights that no float sum would notice.
      const float inv = bound > 1e-30f ? 32767.0f / bound : 0.0f;
      step[r] = inv > 0.0f ? bound * (1.0f / 32767.0f) : 0.0f;
      const __m512 vi = _mm512_set1_ps(inv);
      w0[r] = _mm512_mul_ps(_mm512_mul_ps(p0[r], d0), vi);
      w1[r] = _mm512_mul_ps(_mm512_mul_ps(p1[r], d1), vi);
    }
  }

  // sum_j p_r[j] m_jb, for the formats with a minimum.
  HWY_INLINE float MinTerm(int b, int r) const {
    const __m512 m0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + b * kTile)));
    const __m512 m1 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + b * kTile + 16)));
    return _mm512_reduce_add_ps(_mm512_fmadd_ps(p0[r], m0, _mm512_mul_ps(p1[r], m1)));
  }
};

// o_r += sum_j p_r[j] v_j for j < n with Q8_0 V on VNNI, in integers: per
// row and block, the weights w_j = p_r[j] · d_j (d_j key j's block scale)
// are quantized to int16 against the tile's largest (error <= 2^-16 of it,
// far below Q8_0's own), and vpdpwssd accumulates codes × weights of two
// keys per int32 lane — 32 multiply-adds per instruction against an f32
// FMA's 16. Codes of keys 2i and 2i + 1 are interleaved bytewise, so lanes
// hold elements 0-7, 16-23 (unpacklo) and 8-15, 24-31 (unpackhi); the f32
// results are put back in order when added to o. `work`: see VScales, then
// R × kTile / 2 uint32.
template <int R>
HWY_NOINLINE void AccumulateRowsQ8Int(const float* const* p, const uint8_t* vrows, size_t vstride,
                                      int n, int dv, float* const* o, float* work,
                                      bool row_bounds) {
  const int nb = dv / kQK;
  const VScales<R> vs =
      VScales<R>::template Load<BlockQ8_0, false>(p, vrows, vstride, n, nb, work, row_bounds);
  auto* wpair = reinterpret_cast<uint32_t*>(work + VScales<R>::Floats(nb));
  const int n_pairs = (n + 1) / 2;
  for (int b = 0; b < nb; ++b) {
    __m512 w0[R], w1[R];
    float step[R];
    vs.Weights(b, w0, w1, step);
    for (int r = 0; r < R; ++r) {
      const __m256i q0 = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(w0[r]));
      const __m256i q1 = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(w1[r]));
      _mm512_storeu_si512(wpair + r * (kTile / 2),
                          _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1));
    }
    __m512i lo_acc[R], hi_acc[R];
    for (int r = 0; r < R; ++r) lo_acc[r] = hi_acc[r] = _mm512_setzero_si512();
    for (int i = 0; i < n_pairs; ++i) {
      const auto* ka = reinterpret_cast<const BlockQ8_0*>(vrows + 2 * i * vstride) + b;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ka->qs));
      __m256i c = _mm256_setzero_si256();
      if (2 * i + 1 < n) {
        const auto* kc = reinterpret_cast<const BlockQ8_0*>(vrows + (2 * i + 1) * vstride) + b;
        c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kc->qs));
      }
      const __m512i lo = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(a, c));
      const __m512i hi = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(a, c));
      for (int r = 0; r < R; ++r) {
        const __m512i w = _mm512_set1_epi32(static_cast<int>(wpair[r * (kTile / 2) + i]));
        lo_acc[r] = _mm512_dpwssd_epi32(lo_acc[r], lo, w);
        hi_acc[r] = _mm512_dpwssd_epi32(hi_acc[r], hi, w);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 st = _mm512_set1_ps(step[r]);
      const __m512 fl = _mm512_mul_ps(_mm512_cvtepi32_ps(lo_acc[r]), st);
      const __m512 fh = _mm512_mul_ps(_mm512_cvtepi32_ps(hi_acc[r]), st);
      float* dst = o[r] + b * kQK;
      _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst), _mm512_shuffle_f32x4(fl, fh, 0x44)));
      _mm512_storeu_ps(dst + 16,
                       _mm512_add_ps(_mm512_loadu_ps(dst + 16), _mm512_shuffle_f32x4(fl, fh, 0xEE)));
    }
  }
}

// The same for the 4/5-bit V formats: the codes (unsigned) of keys 2i and
// 2i + 1 interleaved bytewise before the nibbles are split, so the low
// nibbles give elements 0-15 and the high ones 16-31 in order; Q5's bit 4
// is added under a mask of both keys' qh bits interleaved (pdep). The
// offset (-kOffset · sum of the quantized weights) and the minimum terms
// (sum p_j m_j) are per row and block, added to all 32 elements. `work`:
// see VScales, then R × kTile / 2 uint32.
template <int R, class Blk, int kOffset, bool kMin, bool kHigh>
HWY_NOINLINE void AccumulateRowsQ4Int(const float* const* p, const uint8_t* vrows, size_t vstride,
                                      int n, int dv, float* const* o, float* work,
                                      bool row_bounds) {
  const int nb = dv / kQK;
  const VScales<R> vs =
      VScales<R>::template Load<Blk, kMin>(p, vrows, vstride, n, nb, work, row_bounds);
  auto* wpair = reinterpret_cast<uint32_t*>(work + VScales<R>::Floats(nb));
  const int n_pairs = (n + 1) / 2;
  const __m256i nib = _mm256_set1_epi8(0x0f);
  for (int b = 0; b < nb; ++b) {
    __m512 w0[R], w1[R];
    float step[R], add[R];
    vs.Weights(b, w0, w1, step);
    for (int r = 0; r < R; ++r) {
      const __m512i i0 = _mm512_cvtps_epi32(w0[r]);
      const __m512i i1 = _mm512_cvtps_epi32(w1[r]);
      _mm512_storeu_si512(wpair + r * (kTile / 2),
                          _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtsepi32_epi16(i0)),
                                             _mm512_cvtsepi32_epi16(i1), 1));
      add[r] = kOffset == 0 ? 0.0f
                            : -float(kOffset) * step[r] *
                                  float(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1)));
      if constexpr (kMin) add[r] += vs.MinTerm(b, r);
    }
    __m512i lo_acc[R], hi_acc[R];
    for (int r = 0; r < R; ++r) lo_acc[r] = hi_acc[r] = _mm512_setzero_si512();
    for (int i = 0; i < n_pairs; ++i) {
      const Blk* ka = reinterpret_cast<const Blk*>(vrows + 2 * i * vstride) + b;
      const Blk* kc = 2 * i + 1 < n ? reinterpret_cast<const Blk*>(vrows + (2 * i + 1) * vstride) + b
                                    : nullptr;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ka->qs));
      const __m128i c = kc ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(kc->qs))
                           : _mm_setzero_si128();
      const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(a, c)),
                                                _mm_unpackhi_epi8(a, c), 1);
      __m256i lo = _mm256_and_si256(x, nib);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), nib);
      if constexpr (kHigh) {
        uint32_t ha, hc = 0;
        std::memcpy(&ha, HighOf(*ka), sizeof(ha));
        if (kc) std::memcpy(&hc, HighOf(*kc), sizeof(hc));
        const uint32_t mlo = _pdep_u32(ha & 0xffffu, 0x55555555u) | _pdep_u32(hc & 0xffffu, 0xaaaaaaaau);
        const uint32_t mhi = _pdep_u32(ha >> 16, 0x55555555u) | _pdep_u32(hc >> 16, 0xaaaaaaaau);
        const __m256i bit4 = _mm256_set1_epi8(16);
        lo = _mm256_mask_add_epi8(lo, __mmask32(mlo), lo, bit4);
        hi = _mm256_mask_add_epi8(hi, __mmask32(mhi), hi, bit4);
      }
      const __m512i l16 = _mm512_cvtepu8_epi16(lo), h16 = _mm512_cvtepu8_epi16(hi);
      for (int r = 0; r < R; ++r) {
        const __m512i w = _mm512_set1_epi32(static_cast<int>(wpair[r * (kTile / 2) + i]));
        lo_acc[r] = _mm512_dpwssd_epi32(lo_acc[r], l16, w);
        hi_acc[r] = _mm512_dpwssd_epi32(hi_acc[r], h16, w);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 st = _mm512_set1_ps(step[r]), ad = _mm512_set1_ps(add[r]);
      float* dst = o[r] + b * kQK;
      _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst),
                                          _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo_acc[r]), st, ad)));
      _mm512_storeu_ps(dst + 16,
                       _mm512_add_ps(_mm512_loadu_ps(dst + 16),
                                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi_acc[r]), st, ad)));
    }
  }
}

#pragma GCC pop_options

#endif  // SUSTAIN_ATTN_VNNI

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_VNNI_INL_H_

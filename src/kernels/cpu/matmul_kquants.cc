// Matmul kernels for the K-quants (Q2_K .. Q6_K) with Q8_K activations.
//
// Each 256-element super-block is unpacked into four 64-lane vectors of
// unsigned codes (Q3_K and Q6_K keep their offset of 4 / 32 out of the codes
// and subtract offset * sum(scale * bsum) instead). u8 x s8 pairs are summed to
// int16 (maddubs: codes <= 63 keep it from saturating) and then multiplied by
// the sub-block scale while summing to int32 (madd), so the super-block sum is
// exact, as in llama.cpp; it is scaled by d_w * d_a once per super-block. The
// mins of Q2_K / Q4_K / Q5_K use the activation's per-16 bsums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_kquants.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>

#include "hwy/highway.h"
#include "kernels/block_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/packed-inl.h"
#include "kernels/cpu/quant-inl.h"
#include "kernels/ref.h"
#include "tensor/blocks.h"

SUSTAIN_SIMD_BEGIN();
namespace sustain::kernels::cpu::HWY_NAMESPACE {

#if SUSTAIN_X86
inline __m256i mask8(int8_t m) {
  return _mm256_set1_epi8(m);
}

// Decoded super-block of a format with 8 sub-blocks of 32 (Q4_K, Q5_K).
struct K32 {
  I64 w[4];
};

// The 8 scales and 8 mins of a Q4_K / Q5_K super-block as int16 lanes, in
// vector registers (the scalar unpacking was the decode loop's bottleneck):
// the same bit moves as unpack_k4_scales, on four 32-bit words at once.
inline void k4_scales_vec(const uint8_t* q, __m128i& sc16, __m128i& mn16) {
  uint32_t u[3];
  std::memcpy(u, q, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const uint32_t sc_lo = u[0] & m6;                                       // scales 0..3
  const uint32_t sc_hi = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);         // scales 4..7
  const uint32_t mn_lo = u[1] & m6;                                       // mins 0..3
  const uint32_t mn_hi = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);  // mins 4..7
  const __m128i v = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi),
                                   static_cast<int>(mn_lo), static_cast<int>(mn_hi));
  sc16 = _mm_cvtepu8_epi16(v);
  mn16 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
}

// int16 scale vector for group g (sub-blocks 2g, 2g + 1) from 8 int16 scales.
inline I64 k4_group_scales(__m128i sc16, int g) {
#if SUSTAIN_X86 == 512
  const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * g)),
                                         _mm256_set1_epi16(static_cast<int16_t>(2 * g + 1)), 1);
  return {_mm512_permutexvar_epi16(idx, _mm512_castsi128_si512(sc16))};
#else
  const __m256i both = _mm256_broadcastsi128_si256(sc16);
  const char a0 = static_cast<char>(4 * g), a1 = static_cast<char>(4 * g + 1);
  const char b0 = static_cast<char>(4 * g + 2), b1 = static_cast<char>(4 * g + 3);
  return {_mm256_shuffle_epi8(both, _mm256_setr_epi8(a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1,
                                                     a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1,
                                                     a0, a1, a0, a1, a0, a1, a0, a1)),
          _mm256_shuffle_epi8(both, _mm256_setr_epi8(b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1,
                                                     b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1,
                                                     b0, b1, b0, b1, b0, b1, b0, b1))};
#endif
}
// Decoded super-block of a format with 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K).
struct K16 {
  I64 w[4];
  __m128i sc;  // 16 int8 scales
  __m128i mn;  // Q2_K: 16 mins (uint8); unused otherwise
};

struct FmtQ4_K {
  using W = BlockQ4_K;
  static void decode(const W& b, K32& k) {
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load32(b.qs + 32 * g);
      k.w[g] = join(_mm256_and_si256(q, mask8(0xF)),
                    _mm256_and_si256(_mm256_srli_epi16(q, 4), mask8(0xF)));
    }
  }
};

struct FmtQ5_K {
  using W = BlockQ5_K;
  static void decode(const W& b, K32& k) {
    // Bit 2g (2g + 1) of qh[l] is the fifth bit of element 64g + l (64g + 32 + l).
    __m256i qh = load32(b.qh);
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load32(b.qs + 32 * g);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask8(0xF)),
                                         _mm256_slli_epi16(_mm256_and_si256(qh, mask8(1)), 4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask8(0xF)),
                                         _mm256_slli_epi16(_mm256_and_si256(qh, mask8(2)), 3));
      k.w[g] = join(lo, hi);
      qh = _mm256_srli_epi16(qh, 2);  // bits leaking in from the next byte are masked off
    }
  }
};

struct FmtQ6_K {
  using W = BlockQ6_K;
  static constexpr int kOffsetShift = 5;  // codes are q + 32
  static constexpr bool kMins = false;
  static void decode(const W& b, K16& k) {
    for (int h = 0; h < 2; ++h) {
      // Elements 128h + 32s + l: nibble (s >> 1) of ql[64h + 32(s & 1) + l],
      // top bits 2s..2s+1 of qh[32h + l].
      const I64 ql = load64(b.ql + 64 * h);
      const __m256i qh = load32(b.qh + 32 * h);
      const I64 qhj = join(qh, _mm256_srli_epi16(qh, 2));
      const I64 m4 = set8(0xF), m2 = set8(3);
      k.w[2 * h] = (ql & m4) | sll16<4>(qhj & m2);
      k.w[2 * h + 1] = (srl16<4>(ql) & m4) | sll16<4>(srl16<4>(qhj) & m2);
    }
    k.sc = load16(b.scales);
  }
};

struct FmtQ3_K {
  using W = BlockQ3_K;
  static constexpr int kOffsetShift = 2;  // codes are q + 4
  static constexpr bool kMins = false;
  static void decode(const W& b, K16& k) {
    // Element 128h + 32s + l: bits 2s..2s+1 of qs[32h + l], and bit 4h + s
    // of hmask[l] as bit 2 of the code.
    __m256i hm = load32(b.hmask);
    for (int h = 0; h < 2; ++h) {
      __m256i q = load32(b.qs + 32 * h);
      __m256i u[4];
      for (int s = 0; s < 4; ++s) {
        u[s] = _mm256_or_si256(_mm256_and_si256(q, mask8(3)),
                               _mm256_slli_epi16(_mm256_and_si256(hm, mask8(1)), 2));
        q = _mm256_srli_epi16(q, 2);
        hm = _mm256_srli_epi16(hm, 1);
      }
      k.w[2 * h] = join(u[0], u[1]);
      k.w[2 * h + 1] = join(u[2], u[3]);
    }
    alignas(16) int8_t sc[16];
    unpack_q3k_scales(b.scales, sc);
    k.sc = _mm_load_si128(reinterpret_cast<const __m128i*>(sc));
  }
};

struct FmtQ2_K {
  using W = BlockQ2_K;
  static constexpr int kOffsetShift = 0;
  static constexpr bool kMins = true;
  static void decode(const W& b, K16& k) {
    for (int h = 0; h < 2; ++h) {
      __m256i q = load32(b.qs + 32 * h);
      __m256i u[4];
      for (int s = 0; s < 4; ++s) {
        u[s] = _mm256_and_si256(q, mask8(3));
        q = _mm256_srli_epi16(q, 2);
      }
      k.w[2 * h] = join(u[0], u[1]);
      k.w[2 * h + 1] = join(u[2], u[3]);
    }
    const __m128i s = load16(b.scales);
    k.sc = _mm_and_si128(s, _mm_set1_epi8(0xF));
    k.mn = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0xF));
  }
};

// int16 scale vector for group g of a K16 super-block: sub-block 4g + i
// covers int16 lanes 8i .. 8i + 7 (each lane is a pair of bytes).
inline I64 k16_scales(__m128i sc, int g) {
  const __m256i both = _mm256_broadcastsi128_si256(sc);
  const char b0 = static_cast<char>(4 * g), b1 = static_cast<char>(4 * g + 1);
  const char b2 = static_cast<char>(4 * g + 2), b3 = static_cast<char>(4 * g + 3);
  const __m256i ctrl =
      _mm256_setr_epi8(b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1, b1, b1, b1, b1, b2, b2, b2,
                       b2, b2, b2, b2, b2, b3, b3, b3, b3, b3, b3, b3, b3);
  const __m256i bytes = _mm256_shuffle_epi8(both, ctrl);
#if SUSTAIN_X86 == 512
  return {_mm512_cvtepi8_epi16(bytes)};
#else
  return {_mm256_cvtepi8_epi16(_mm256_castsi256_si128(bytes)),
          _mm256_cvtepi8_epi16(_mm256_extracti128_si256(bytes, 1))};
#endif
}
#endif  // SUSTAIN_X86

template <class Fmt, QType kType>
struct KQuant32 {
  template <int NT>
  static void Dot(const uint8_t* wp, const uint8_t* const* act, int64_t n, float* out) {
#if SUSTAIN_X86
    const auto* w = reinterpret_cast<const typename Fmt::W*>(wp);
    const BlockQ8_K* a[NT];
    F64 acc[NT];
    __m256 min_acc[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]);
      acc[t] = fzero();
      min_acc[t] = _mm256_setzero_ps();
    }
    K32 k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      Fmt::decode(w[b], k);
      __m128i sc16, m8;
      k4_scales_vec(w[b].scales, sc16, m8);
      I64 scv[4];
      for (int g = 0; g < 4; ++g) scv[g] = k4_group_scales(sc16, g);
      // Lane j of the bsums (16 int16) pairs with min j / 2.
      const __m256i mins = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_unpacklo_epi16(m8, m8)), _mm_unpackhi_epi16(m8, m8), 1);
      const float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& q = a[t][b];
        I64 s = zero();
        for (int g = 0; g < 4; ++g) s = dot_s16(s, maddubs(k.w[g], load64(q.qs + 64 * g)), scv[g]);
        acc[t] = fmadd(s, d * q.d, acc[t]);
        min_acc[t] = fmadd8(_mm256_madd_epi16(load32(q.bsums), mins), -dmin * q.d, min_acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce(acc[t]) + reduce8(min_acc[t]);
#else
    for (int t = 0; t < NT; ++t) out[t] = ref::vec_dot(kType, wp, act[t], n);
#endif
  }
};

template <class Fmt, QType kType>
struct KQuant16 {
  template <int NT>
  static void Dot(const uint8_t* wp, const uint8_t* const* act, int64_t n, float* out) {
#if SUSTAIN_X86
    const auto* w = reinterpret_cast<const typename Fmt::W*>(wp);
    const BlockQ8_K* a[NT];
    F64 acc[NT];
    __m256 min_acc[NT];
    for (int t = 0; t < NT; ++t) {
      a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]);
      acc[t] = fzero();
      min_acc[t] = _mm256_setzero_ps();
    }
    K16 k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      Fmt::decode(w[b], k);
      I64 scv[4];
      const __m256i sc16 = _mm256_cvtepi8_epi16(k.sc);
#if SUSTAIN_X86 == 512
      // One lane permute per group from the 16 widened scales: lane l of group
      // g takes scale 4g + l / 8.
      for (int g = 0; g < 4; ++g) {
        const __m512i idx = _mm512_add_epi16(
            _mm512_set1_epi16(static_cast<int16_t>(4 * g)),
            _mm512_srli_epi16(
                _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15,
                                 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                3));
        scv[g] = {_mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(sc16))};
      }
#else
      for (int g = 0; g < 4; ++g) scv[g] = k16_scales(k.sc, g);
#endif
      [[maybe_unused]] __m256i mn16;
      if constexpr (Fmt::kMins) mn16 = _mm256_cvtepu8_epi16(k.mn);
      // The codes carry an offset: subtract offset * sum_j scale_j * bsum_j,
      // as one more int16 pair dot with -(scale << shift) (|.| <= 4096).
      [[maybe_unused]] __m256i neg_sc;
      if constexpr (Fmt::kOffsetShift > 0)
        neg_sc =
            _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, Fmt::kOffsetShift));
      const float d = h2f(w[b].d);
      [[maybe_unused]] float dmin = 0.0f;
      if constexpr (Fmt::kMins) dmin = h2f(w[b].dmin);
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& q = a[t][b];
        I64 s = zero();
        for (int g = 0; g < 4; ++g) s = dot_s16(s, maddubs(k.w[g], load64(q.qs + 64 * g)), scv[g]);
        const __m256i bsums = load32(q.bsums);
        if constexpr (Fmt::kOffsetShift > 0) s = dot_s16_low(s, bsums, neg_sc);
        acc[t] = fmadd(s, d * q.d, acc[t]);
        if constexpr (Fmt::kMins)
          min_acc[t] = fmadd8(_mm256_madd_epi16(bsums, mn16), -dmin * q.d, min_acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce(acc[t]) + reduce8(min_acc[t]);
#else
    for (int t = 0; t < NT; ++t) out[t] = ref::vec_dot(kType, wp, act[t], n);
#endif
  }
};

#if SUSTAIN_VNNI
// Prefill (packed-inl.h): codes from the same decoders, scales per lane.
template <class Fmt>
struct PackK32 {
  static void pack(const uint8_t* row, int64_t k0, int64_t kc, uint8_t* out, Packed& p, int r) {
    const auto* w = reinterpret_cast<const typename Fmt::W*>(row) + k0 / kQK_K;
    K32 k;
    // Lane r of sub-block rows 8sb .. 8sb + 7: scattered with one store each
    // (the scalar unpacking and 16 stores were most of the packing time).
    const __m256i rows =
        _mm256_setr_epi32(0, kPR, 2 * kPR, 3 * kPR, 4 * kPR, 5 * kPR, 6 * kPR, 7 * kPR);
    for (int64_t sb = 0; sb < kc / kQK_K; ++sb) {
      Fmt::decode(w[sb], k);
      for (int g = 0; g < 4; ++g) store64(out + kQK_K * sb + 64 * g, k.w[g]);
      __m128i sc16, mn16;
      k4_scales_vec(w[sb].scales, sc16, mn16);
      _mm256_i32scatter_epi32(&p.sc[8 * sb][r], rows, _mm256_cvtepu16_epi32(sc16), 4);
      _mm256_i32scatter_epi32(&p.mn[8 * sb][r], rows, _mm256_cvtepu16_epi32(mn16), 4);
      p.d[sb][r] = h2f(w[sb].d);
      p.dmin[sb][r] = h2f(w[sb].dmin);
    }
  }
  template <int NT>
  static void compute(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act, int64_t,
                      __m512* out, TilePrefetch& pf) {
    packed_kquant<NT, PackKind::kK32, 0>(p, k0, kc, act, out, pf);
  }
};
template <class Fmt>
struct PackK16 {
  static void pack(const uint8_t* row, int64_t k0, int64_t kc, uint8_t* out, Packed& p, int r) {
    const auto* w = reinterpret_cast<const typename Fmt::W*>(row) + k0 / kQK_K;
    K16 k;
    const __m512i rows =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(kPR));
    for (int64_t sb = 0; sb < kc / kQK_K; ++sb) {
      Fmt::decode(w[sb], k);
      for (int g = 0; g < 4; ++g) store64(out + kQK_K * sb + 64 * g, k.w[g]);
      _mm512_i32scatter_epi32(&p.sc[16 * sb][r], rows, _mm512_cvtepi8_epi32(k.sc), 4);
      p.d[sb][r] = h2f(w[sb].d);
    }
  }
  template <int NT>
  static void compute(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act, int64_t,
                      __m512* out, TilePrefetch& pf) {
    packed_kquant<NT, PackKind::kK16, Fmt::kOffsetShift>(p, k0, kc, act, out, pf);
  }
};
#endif

TileFn PackedKQuant(QType t) {
#if SUSTAIN_VNNI
  switch (t) {
    case QType::Q4_K:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackK32<FmtQ4_K>>(a, r0, r1, t0, t1);
      };
    case QType::Q5_K:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackK32<FmtQ5_K>>(a, r0, r1, t0, t1);
      };
    case QType::Q6_K:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackK16<FmtQ6_K>>(a, r0, r1, t0, t1);
      };
    case QType::Q3_K:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackK16<FmtQ3_K>>(a, r0, r1, t0, t1);
      };
    default:
      return nullptr;
  }
#else
  (void)t;
  return nullptr;
#endif
}

#if SUSTAIN_X86
#define SUSTAIN_K32(F, T) KQuant32<F, T>
#define SUSTAIN_K16(F, T) KQuant16<F, T>
#else
// The portable path only needs the type; the decode structs are x86-only.
struct FmtNone {};
#define SUSTAIN_K32(F, T) KQuant32<FmtNone, T>
#define SUSTAIN_K16(F, T) KQuant16<FmtNone, T>
#endif

void TileQ4_K(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<SUSTAIN_K32(FmtQ4_K, QType::Q4_K)>(a, r0, r1, t0, t1);
}
void TileQ5_K(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<SUSTAIN_K32(FmtQ5_K, QType::Q5_K)>(a, r0, r1, t0, t1);
}
void TileQ6_K(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<SUSTAIN_K16(FmtQ6_K, QType::Q6_K)>(a, r0, r1, t0, t1);
}
void TileQ3_K(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<SUSTAIN_K16(FmtQ3_K, QType::Q3_K)>(a, r0, r1, t0, t1);
}
void TileQ2_K(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<SUSTAIN_K16(FmtQ2_K, QType::Q2_K)>(a, r0, r1, t0, t1);
}
#undef SUSTAIN_K32
#undef SUSTAIN_K16

}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
SUSTAIN_SIMD_END();

#if HWY_ONCE
namespace sustain::kernels::cpu {

HWY_EXPORT(TileQ2_K);
HWY_EXPORT(TileQ3_K);
HWY_EXPORT(TileQ4_K);
HWY_EXPORT(TileQ5_K);
HWY_EXPORT(TileQ6_K);
HWY_EXPORT(PackedKQuant);

TileFn kquant_tile(QType t) {
  switch (t) {
    case QType::Q2_K:
      return &HWY_DYNAMIC_DISPATCH(TileQ2_K);
    case QType::Q3_K:
      return &HWY_DYNAMIC_DISPATCH(TileQ3_K);
    case QType::Q4_K:
      return &HWY_DYNAMIC_DISPATCH(TileQ4_K);
    case QType::Q5_K:
      return &HWY_DYNAMIC_DISPATCH(TileQ5_K);
    case QType::Q6_K:
      return &HWY_DYNAMIC_DISPATCH(TileQ6_K);
    default:
      return nullptr;
  }
}

TileFn kquant_packed_tile(QType t) {
  return HWY_DYNAMIC_DISPATCH(PackedKQuant)(t);
}

}  // namespace sustain::kernels::cpu
#endif  // HWY_ONCE

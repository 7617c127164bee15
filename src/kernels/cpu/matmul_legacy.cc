// Matmul kernels for the 32-element formats: Q8_0, Q4_0, Q5_0 (dotted with
// Q8_0 activations) and Q4_1, Q5_1 (with Q8_1 activations).
//
// Two weight blocks form one 64-lane vector of int8 values. Signed values
// (Q8_0, and Q4_0 / Q5_0 after removing their offset) use the sign trick —
// |w| as the unsigned operand of the u8 x s8 dot, w's sign moved onto the
// activation — so the per-block integer sums are exact, as in llama.cpp.
// Q4_1 / Q5_1 values are unsigned already; their min term uses the
// activation block's s. Lanes 0..7 / 8..15 of the int32 result hold the two
// blocks' partial sums, scaled by their own d_w * d_a.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_legacy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <type_traits>

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
// Bit i of x -> byte i = 0xFF, for the fifth bit of Q5 blocks.
inline __m256i bits_to_bytes(uint32_t x) {
  const __m256i shuf =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}
inline __m256i q5_high(const uint8_t* qh) {
  return _mm256_and_si256(bits_to_bytes(load_u32(qh)), _mm256_set1_epi8(0x10));
}
#endif

// Each format: its block types, the offset its codes carry (value = code -
// kOffset; 0 for Q4_1 / Q5_1, whose min term uses the activation's s) and
// (x86) the 32 unsigned codes of one block.
// Q8_0 keeps its signed values for the row-by-row kernel (sign trick: codes
// up to 255 would saturate AVX2's maddubs); the packed kernel uses codes.
struct FmtQ8_0 {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static constexpr QType kType = QType::Q8_0;
  static constexpr int kOffset = 128;
  static constexpr bool kSigned = true;
#if SUSTAIN_X86
  static __m256i values(const W& b) {
    return load32(b.qs);
  }
  static __m256i codes(const W& b) {
    return _mm256_xor_si256(load32(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
#endif
};
struct FmtQ4_0 {
  static constexpr bool kSigned = false;
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr QType kType = QType::Q4_0;
  static constexpr int kOffset = 8;
#if SUSTAIN_X86
  static __m256i codes(const W& b) {
    return nibbles32(b.qs);
  }
#endif
};
struct FmtQ5_0 {
  static constexpr bool kSigned = false;
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr QType kType = QType::Q5_0;
  static constexpr int kOffset = 16;
#if SUSTAIN_X86
  static __m256i codes(const W& b) {
    return _mm256_or_si256(nibbles32(b.qs), q5_high(b.qh));
  }
#endif
};
struct FmtQ4_1 {
  static constexpr bool kSigned = false;
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr QType kType = QType::Q4_1;
  static constexpr int kOffset = 0;
#if SUSTAIN_X86
  static __m256i codes(const W& b) {
    return nibbles32(b.qs);
  }
#endif
};
struct FmtQ5_1 {
  static constexpr bool kSigned = false;
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr QType kType = QType::Q5_1;
  static constexpr int kOffset = 0;
#if SUSTAIN_X86
  static __m256i codes(const W& b) {
    return _mm256_or_si256(nibbles32(b.qs), q5_high(b.qh));
  }
#endif
};

#if SUSTAIN_X86
// The int32 lanes of a block pair's dot: signed values with the sign trick
// (Q8_0), or offset codes starting from the row's -offset lane sums.
template <class Fmt>
struct PairDot {
  I64 w;
  [[maybe_unused]] Signed sw;
  explicit PairDot(I64 v) : w(v) {
    if constexpr (Fmt::kSigned) sw = prep_signed(v);
  }
  I64 operator()(I64 init, I64 a) const {
    if constexpr (Fmt::kSigned)
      return dot_signed(zero(), sw, a);
    else
      return dot_u8s8(init, w, a);
  }
};
template <class Fmt>
inline __m256i pair_values(const typename Fmt::W& b) {
  if constexpr (Fmt::kSigned)
    return Fmt::values(b);
  else
    return Fmt::codes(b);
}

// The values of blocks b0, b1 as one 64-lane vector. On AVX-512 the 4-bit
// formats unpack both blocks' nibbles in one go and expand Q5's fifth bits
// with a mask move (vpmovm2b), a third of the work of doing it per block.
template <class Fmt>
inline I64 pair_of(const typename Fmt::W& b0, const typename Fmt::W& b1) {
#if SUSTAIN_X86 == 512
  if constexpr (!Fmt::kSigned) {
    const __m256i q =
        _mm256_inserti128_si256(_mm256_castsi128_si256(load16(b0.qs)), load16(b1.qs), 1);
    // 128-bit lanes: b0 low nibbles, b1 low, b0 high, b1 high -> b0 lo, b0 hi, b1 lo, b1 hi.
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
    v = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    if constexpr (Fmt::kType == QType::Q5_0 || Fmt::kType == QType::Q5_1) {
      const uint64_t bits = load_u32(b0.qh) | (static_cast<uint64_t>(load_u32(b1.qh)) << 32);
      v = _mm512_or_si512(v, _mm512_and_si512(_mm512_movm_epi8(bits), _mm512_set1_epi8(0x10)));
    }
    return {v};
  }
#endif
  return join(pair_values<Fmt>(b0), pair_values<Fmt>(b1));
}

// Lanes 0..7 = s[2p], lanes 8..15 = s[2p + 1]: the scales of block pair p.
inline F64 pair_scales(__m128 s, int p) {
#if SUSTAIN_X86 == 512
  const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
  return {_mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s))};
#else
  const __m256 s8 = _mm256_castps128_ps256(s);
  return {_mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(2 * p)),
          _mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(2 * p + 1))};
#endif
}
inline F64 fmadd(I64 i, F64 s, F64 acc) {
#if SUSTAIN_X86 == 512
  return {_mm512_fmadd_ps(_mm512_cvtepi32_ps(i.v), s.v, acc.v)};
#else
  return {_mm256_fmadd_ps(_mm256_cvtepi32_ps(i.lo), s.lo, acc.lo),
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(i.hi), s.hi, acc.hi)};
#endif
}
#endif

template <class Fmt>
struct Legacy {
  template <int NT>
  static void Dot(const uint8_t* wp, const uint8_t* const* act, int64_t n, float* out) {
#if SUSTAIN_X86
    using W = typename Fmt::W;
    using A = typename Fmt::A;
    const W* w = reinterpret_cast<const W*>(wp);
    const int64_t nb = n / kQK;
    const __m256i z = _mm256_setzero_si256();
    if constexpr (Fmt::kOffset > 0) {
      // Q8_0 activations. The codes are unsigned; each dot starts from the
      // row's precomputed -kOffset * (sum of the 4 activations of its lane),
      // and the block scales come as f32 from the row (kernels.h).
      const A* a[NT];
      const float* da[NT];
      const int32_t* init[NT];
      F64 acc[NT][2];  // two chains per token hide the FMA latency
      for (int t = 0; t < NT; ++t) {
        a[t] = reinterpret_cast<const A*>(act[t]);
        da[t] = reinterpret_cast<const float*>(act[t] + q8_0_scales_offset(n));
        init[t] = reinterpret_cast<const int32_t*>(act[t] + q8_0_lanesums_offset(n));
        acc[t][0] = acc[t][1] = fzero();
      }
      int64_t b = 0;
      for (; b + 3 < nb; b += 4) {
        const PairDot<Fmt> w01(pair_of<Fmt>(w[b], w[b + 1]));
        const PairDot<Fmt> w23(pair_of<Fmt>(w[b + 2], w[b + 3]));
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(
            static_cast<int16_t>(w[b].d), static_cast<int16_t>(w[b + 1].d),
            static_cast<int16_t>(w[b + 2].d), static_cast<int16_t>(w[b + 3].d), 0, 0, 0, 0));
        for (int t = 0; t < NT; ++t) {
          const I64 i01 =
              w01(load64(init[t] + 8 * b), join(load32(a[t][b].qs), load32(a[t][b + 1].qs)));
          const I64 i23 = w23(load64(init[t] + 8 * b + 16),
                              join(load32(a[t][b + 2].qs), load32(a[t][b + 3].qs)));
          const __m128 sc = _mm_mul_ps(dw, _mm_loadu_ps(da[t] + b));
          acc[t][0] = fmadd(i01, pair_scales(sc, 0), acc[t][0]);
          acc[t][1] = fmadd(i23, pair_scales(sc, 1), acc[t][1]);
        }
      }
      for (; b < nb; b += 2) {  // the last 1..3 blocks, a pair (or a block and zeros) at a time
        const bool pair = b + 1 < nb;
        const int64_t b1 = pair ? b + 1 : b;
        const PairDot<Fmt> wv(join(pair_values<Fmt>(w[b]), pair ? pair_values<Fmt>(w[b1]) : z));
        const float dw0 = h2f(w[b].d), dw1 = pair ? h2f(w[b1].d) : 0.0f;
        for (int t = 0; t < NT; ++t) {
          const I64 i0 = join(load32(init[t] + 8 * b), pair ? load32(init[t] + 8 * b1) : z);
          const I64 i = wv(i0, join(load32(a[t][b].qs), pair ? load32(a[t][b1].qs) : z));
          acc[t][0] = fmadd2(i, dw0 * da[t][b], dw1 * da[t][b1], acc[t][0]);
        }
      }
      for (int t = 0; t < NT; ++t) out[t] = reduce(add(acc[t][0], acc[t][1]));
    } else {
      // Q8_1 activations: unsigned codes, plus m_w * s_a per block.
      const A* a[NT];
      F64 acc[NT];
      float min_acc[NT];
      for (int t = 0; t < NT; ++t) {
        a[t] = reinterpret_cast<const A*>(act[t]);
        acc[t] = fzero();
        min_acc[t] = 0;
      }
      for (int64_t b = 0; b < nb; b += 2) {
        const bool pair = b + 1 < nb;
        const int64_t b1 = pair ? b + 1 : b;
        const I64 wv = pair ? pair_of<Fmt>(w[b], w[b1]) : join(Fmt::codes(w[b]), z);
        const float dw0 = h2f(w[b].d), dw1 = pair ? h2f(w[b1].d) : 0.0f;
        for (int t = 0; t < NT; ++t) {
          const I64 i =
              dot_u8s8(zero(), wv, join(load32(a[t][b].qs), pair ? load32(a[t][b1].qs) : z));
          min_acc[t] += h2f(w[b].m) * h2f(a[t][b].s);
          if (pair) min_acc[t] += h2f(w[b1].m) * h2f(a[t][b1].s);
          acc[t] = fmadd2(i, dw0 * h2f(a[t][b].d), dw1 * h2f(a[t][b1].d), acc[t]);
        }
      }
      for (int t = 0; t < NT; ++t) out[t] = reduce(acc[t]) + min_acc[t];
    }
#else
    for (int t = 0; t < NT; ++t) out[t] = ref::vec_dot(Fmt::kType, wp, act[t], n);
#endif
  }
};

#if SUSTAIN_VNNI
// Prefill (packed-inl.h): the codes are the unsigned values q, and the
// format's offset (value = q - kOffset) comes off through the activation sums.
template <class Fmt, int kOffset>
struct PackLegacy {
  static __m256i codes(const typename Fmt::W& b) { return Fmt::codes(b); }
  static void pack(const uint8_t* row, int64_t k0, int64_t kc, uint8_t* out, Packed& p, int r) {
    const auto* w = reinterpret_cast<const typename Fmt::W*>(row) + k0 / kQK;
    for (int64_t b = 0; b < kc / kQK; ++b) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kQK * b), codes(w[b]));
      p.d[b][r] = h2f(w[b].d);
    }
  }
  template <int NT>
  static void compute(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act,
                      int64_t n_in, __m512* out, TilePrefetch& pf) {
    packed_legacy<NT>(p, k0, kc, act, n_in, kOffset, out, pf);
  }
};
#endif

TileFn PackedLegacy(QType t) {
#if SUSTAIN_VNNI
  switch (t) {
    case QType::Q8_0:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackLegacy<FmtQ8_0, 128>>(a, r0, r1, t0, t1);
      };
    case QType::Q4_0:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackLegacy<FmtQ4_0, 8>>(a, r0, r1, t0, t1);
      };
    case QType::Q5_0:
      return [](const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        run_packed<PackLegacy<FmtQ5_0, 16>>(a, r0, r1, t0, t1);
      };
    default:
      return nullptr;
  }
#else
  (void)t;
  return nullptr;
#endif
}

void TileQ8_0(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<Legacy<FmtQ8_0>>(a, r0, r1, t0, t1);
}
void TileQ4_0(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<Legacy<FmtQ4_0>>(a, r0, r1, t0, t1);
}
void TileQ5_0(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<Legacy<FmtQ5_0>>(a, r0, r1, t0, t1);
}
void TileQ4_1(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<Legacy<FmtQ4_1>>(a, r0, r1, t0, t1);
}
void TileQ5_1(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  run_tile<Legacy<FmtQ5_1>>(a, r0, r1, t0, t1);
}

}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
SUSTAIN_SIMD_END();

#if HWY_ONCE
namespace sustain::kernels::cpu {

HWY_EXPORT(TileQ8_0);
HWY_EXPORT(TileQ4_0);
HWY_EXPORT(TileQ5_0);
HWY_EXPORT(TileQ4_1);
HWY_EXPORT(TileQ5_1);
HWY_EXPORT(PackedLegacy);

TileFn legacy_tile(QType t) {
  switch (t) {
    case QType::Q8_0:
      return &HWY_DYNAMIC_DISPATCH(TileQ8_0);
    case QType::Q4_0:
      return &HWY_DYNAMIC_DISPATCH(TileQ4_0);
    case QType::Q5_0:
      return &HWY_DYNAMIC_DISPATCH(TileQ5_0);
    case QType::Q4_1:
      return &HWY_DYNAMIC_DISPATCH(TileQ4_1);
    case QType::Q5_1:
      return &HWY_DYNAMIC_DISPATCH(TileQ5_1);
    default:
      return nullptr;
  }
}

TileFn legacy_packed_tile(QType t) {
  return HWY_DYNAMIC_DISPATCH(PackedLegacy)(t);
}

}  // namespace sustain::kernels::cpu
#endif  // HWY_ONCE

// Matmul kernels for repacked weights (tensor/row_tiles.h): Q4_0, Q5_0, Q8_0,
// Q4_K and Q6_K rows in groups of 16, read in place on AVX-512 VNNI (AVX3_DL).
//
// A group block's code dwords load straight into vectors whose int32 lane r
// is row r: Q8_0's after flipping each byte's sign bit (codes + 128), Q4_0's
// and Q5_0's after splitting nibbles (low: elements 4j..4j+3, high:
// 16+4j..), Q5_0 adding 16 where its fifth-bit mask says. One vpdpbusd with
// 4 activation bytes broadcast then advances 16 row sums, and every per-row
// scale applies lane-wise, as in packed-inl.h, but with nothing unpacked per
// call: a decode step reads the same bytes the row layout would, and a batch
// of up to 8 tokens dots each group block with every token while it is in
// registers.
//
// Integer sums are exact as in llama.cpp (the code offset comes off through
// the activation block sums). Each token's result is computed the same way
// whatever else is in the call, so the kernel is batch invariant.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_tiles.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "kernels/block_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/packed-inl.h"
#include "kernels/cpu/quant-inl.h"
#include "tensor/blocks.h"
#include "tensor/row_tiles.h"

SUSTAIN_SIMD_BEGIN();
namespace sustain::kernels::cpu::HWY_NAMESPACE {

#if SUSTAIN_VNNI
// Tokens dotted with a group block while its codes are in registers.
inline constexpr int kTileTok = 8;
// Group blocks ahead that the first pass over a group asks into L1.
inline constexpr int kPrefetchAhead = 8;

template <QType kType>
struct TileFmt;

template <>
struct TileFmt<QType::Q4_0> {
  static constexpr int kOffset = 8;
  static constexpr size_t kD = 256, kBytes = 288;
  static void codes(const uint8_t* gb, __m512i* w) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {
      const __m512i n = _mm512_loadu_si512(gb + 64 * j);
      w[j] = _mm512_and_si512(n, m4);
      w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(n, 4), m4);
    }
  }
};

template <>
struct TileFmt<QType::Q5_0> {
  static constexpr int kOffset = 16;
  static constexpr size_t kHi = 256, kD = 320, kBytes = 352;
  static void codes(const uint8_t* gb, __m512i* w) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    uint64_t hi[8];
    std::memcpy(hi, gb + kHi, sizeof(hi));
    for (int j = 0; j < 4; ++j) {
      const __m512i n = _mm512_loadu_si512(gb + 64 * j);
      const __m512i lo = _mm512_and_si512(n, m4);
      const __m512i up = _mm512_and_si512(_mm512_srli_epi16(n, 4), m4);
      w[j] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(hi[j]), lo, b4);
      w[4 + j] = _mm512_mask_add_epi8(up, _cvtu64_mask64(hi[4 + j]), up, b4);
    }
  }
};

template <>
struct TileFmt<QType::Q8_0> {
  static constexpr int kOffset = 128;
  static constexpr size_t kD = 512, kBytes = 544;
  static void codes(const uint8_t* gb, __m512i* w) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int k = 0; k < 8; ++k) w[k] = _mm512_xor_si512(_mm512_loadu_si512(gb + 64 * k), flip);
  }
};

// NT tokens' sums over every block of one group: out[t] lane r is row r.
template <QType kType, int NT>
inline void group_dot(const uint8_t* group, int64_t nb, const uint8_t* const* act, int64_t n_in,
                      const uint8_t* pf_end, __m512* out) {
  using F = TileFmt<kType>;
  const BlockQ8_0* a[NT];
  const int32_t* sums[NT];
  const float* da[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(act[t]);
    sums[t] = reinterpret_cast<const int32_t*>(act[t] + q8_0_sums_offset(n_in));
    da[t] = reinterpret_cast<const float*>(act[t] + q8_0_scales_offset(n_in));
    out[t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = group + static_cast<size_t>(b) * F::kBytes;
    if (const uint8_t* p = gb + kPrefetchAhead * F::kBytes; p < pf_end) {
      for (size_t l = 0; l < F::kBytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T0);
    }
    __m512i w[8];
    F::codes(gb, w);
    // A few tokens leave the dpbusd chains too short to hide their latency:
    // then each token's sum runs as kChains chains, added at the end (exact
    // integers, so every token count computes the same sums).
    constexpr int kChains = NT == 1 ? 4 : NT == 2 ? 2 : 1;
    __m512i acc[NT * kChains];
    for (int t = 0; t < NT; ++t) {
      acc[t * kChains] = _mm512_set1_epi32(-F::kOffset * sums[t][b]);
      for (int c = 1; c < kChains; ++c) acc[t * kChains + c] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 8; ++k)
      for (int t = 0; t < NT; ++t)
        acc[t * kChains + k % kChains] =
            _mm512_dpbusd_epi32(acc[t * kChains + k % kChains], w[k], bcast4(a[t][b].qs + 4 * k));
    for (int t = 0; t < NT; ++t)
      for (int c = 1; c < kChains; ++c)
        acc[t * kChains] = _mm512_add_epi32(acc[t * kChains], acc[t * kChains + c]);
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + F::kD)));
    for (int t = 0; t < NT; ++t)
      out[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t * kChains]),
                               _mm512_mul_ps(d, _mm512_set1_ps(da[t][b])), out[t]);
  }
}

// group_dot for 1 .. kTileTok tokens, by token count - 1.
// pf_end: the first pass over a group asks for the blocks kPrefetchAhead
// ahead (one super-block for the K-quants) while they lie before pf_end,
// running on into the next group (groups are contiguous); null: none.
using GroupDotFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, int64_t, const uint8_t*,
                            __m512*);
template <QType kType, size_t... I>
constexpr std::array<GroupDotFn, sizeof...(I)> group_dots(std::index_sequence<I...>) {
  return {&group_dot<kType, static_cast<int>(I) + 1>...};
}
template <QType kType>
inline constexpr auto kGroupDot = group_dots<kType>(std::make_index_sequence<kTileTok>{});

// Activation rows a pass over the rows reads: a chunk of tokens whose rows
// stay in L2 while every row group is dotted with them.
inline constexpr size_t kActChunkBytes = 512 * 1024;

// Rows [row0, row1) in groups of 16 and tokens in groups of kTileTok: each
// group's nb blocks dotted with each token group by dots[tokens - 1]. Many
// tokens (prefill) go in chunks of about kActChunkBytes of activations, each
// chunk dotted with every row group before the next: else every row group
// would stream all the tokens' activations from memory again (512 tokens of
// an 8192-wide Q8_K input are 4.7 MB). Each token's sums are the same
// whatever the chunking.
template <size_t kN>
void walk_tiles(const std::array<GroupDotFn, kN>& dots, int64_t nb, const MatmulArgs& a,
                int64_t row0, int64_t row1, int64_t tok0, int64_t tok1) {
  const size_t group_bytes = kTileRows * a.w_stride;
  const int64_t chunk = std::max<int64_t>(
      kTileTok, static_cast<int64_t>(kActChunkBytes / a.act_stride) / kTileTok * kTileTok);
  for (int64_t tc = tok0; tc < tok1; tc += chunk) {
    const int64_t te = std::min(tok1, tc + chunk);
    for (int64_t rt = row0; rt < row1; rt += kTileRows) {
      const uint8_t* group = a.w + static_cast<size_t>(rt / kTileRows) * group_bytes;
      const int nr = static_cast<int>(std::min<int64_t>(kTileRows, row1 - rt));
      const __mmask16 lanes = static_cast<__mmask16>((1u << nr) - 1);
      // The call's rows end at the end of its last group.
      const uint8_t* rows_end =
          a.w + static_cast<size_t>((row1 + kTileRows - 1) / kTileRows) * group_bytes;
      for (int64_t t = tc; t < te; t += kTileTok) {
        const int nt = static_cast<int>(std::min<int64_t>(kTileTok, te - t));
        const uint8_t* act[kTileTok];
        for (int i = 0; i < kTileTok; ++i)
          act[i] = a.act + static_cast<size_t>(t + std::min(i, nt - 1)) * a.act_stride;
        __m512 out[kTileTok];
        dots[nt - 1](group, nb, act, a.n_in, t == tc ? rows_end : nullptr, out);
        for (int i = 0; i < nt; ++i)
          _mm512_mask_storeu_ps(a.y + (t + i) * a.ldy + rt, lanes, out[i]);
      }
    }
  }
}

template <QType kType>
void run_tiles(const MatmulArgs& a, int64_t row0, int64_t row1, int64_t tok0, int64_t tok1) {
  walk_tiles(kGroupDot<kType>, a.n_in / kQK, a, row0, row1, tok0, tok1);
}

// Q4_K (row_tiles.h): a group block is a 256-element super-block of 16 rows,
// every dword of the row block transposed, so dword 0 gives the 16 rows' d
// and dmin, dwords 1..3 their 6-bit scales and mins, and each of the 32 qs
// dwords two code vectors (low nibbles: sub-block 2j, high: 2j + 1 of the
// 64-element chunk j). Per sub-block the codes dot the Q8_K activations in
// exact int32 lanes, times the sub-block's scale (vpmulld); the mins come
// off through the activations' 16-element sums (vpdpwssd, exact int32):
//   y_r += da * (d_r * sum_s sc_rs * dot_rs - dmin_r * sum_s m_rs * asum_s).
inline constexpr size_t kQ4KGroupBytes = kTileRows * sizeof(BlockQ4_K);

template <int kShift>
inline __m512i field6(__m512i v) {
  return _mm512_and_si512(_mm512_srli_epi32(v, kShift), _mm512_set1_epi32(63));
}
// A scale (min) of sub-blocks 4..7: its low 4 bits from dword 3 at
// kLowShift, its high 2 from the top of byte s of dword 1 (2).
template <int kLowShift, int kHighShift>
inline __m512i field_hi(__m512i low, __m512i high) {
  return _mm512_or_si512(
      _mm512_and_si512(_mm512_srli_epi32(low, kLowShift), _mm512_set1_epi32(15)),
      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(high, kHighShift), _mm512_set1_epi32(3)),
                        4));
}

// v's int32 lanes (each below 2^15) as two equal int16s.
inline __m512i dup16(__m512i v) {
  return _mm512_or_si512(v, _mm512_slli_epi32(v, 16));
}

// NT tokens' sums over every super-block of one group (n_in unused: the
// Q8_K blocks carry their sums).
template <int NT>
inline void group_dot_q4k(const uint8_t* group, int64_t nsb, const uint8_t* const* act, int64_t,
                          const uint8_t* pf_end, __m512* out) {
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]);
    out[t] = _mm512_setzero_ps();
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nsb; ++b) {
    const uint8_t* gb = group + static_cast<size_t>(b) * kQ4KGroupBytes;
    if (const uint8_t* p = gb + kQ4KGroupBytes; p < pf_end) {
      for (size_t l = 0; l < kQ4KGroupBytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T0);
    }
    const __m512i dd = _mm512_loadu_si512(gb);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const __m512i s0 = _mm512_loadu_si512(gb + 64), s1 = _mm512_loadu_si512(gb + 128),
                  s2 = _mm512_loadu_si512(gb + 192);
    __m512i sum[NT];
    for (int t = 0; t < NT; ++t) sum[t] = _mm512_setzero_si512();
    if constexpr (NT >= 4) {
      // Four tokens or more: sub-block s (32 codes: the low nibbles of chunk
      // j = s / 2 for even s, the high for odd) dotted with every token,
      // token after token inside each code dword, so the NT chains are
      // independent; then times its scale. The scales are unpacked where they
      // are used and the mins after, which leaves the codes, the chains and
      // the sums in registers (all unpacked at once, the sums of 8 tokens
      // went through memory).
      auto sub_block = [&](auto s_tag, const __m512i sc) {
        constexpr int s = decltype(s_tag)::value;
        constexpr int j = s / 2;
        __m512i w[8];
        for (int i = 0; i < 8; ++i) {
          const __m512i n = _mm512_loadu_si512(gb + 64 * (4 + 8 * j + i));
          w[i] =
              s % 2 == 0 ? _mm512_and_si512(n, m4) : _mm512_and_si512(_mm512_srli_epi16(n, 4), m4);
        }
        __m512i acc[NT];
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
        for (int i = 0; i < 8; ++i)
          for (int t = 0; t < NT; ++t)
            acc[t] = _mm512_dpbusd_epi32(acc[t], w[i],
                                         bcast4(a[t][b].qs + 64 * j + 32 * (s % 2) + 4 * i));
        for (int t = 0; t < NT; ++t)
          sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(acc[t], sc));
      };
      using I0 = std::integral_constant<int, 0>;
      using I1 = std::integral_constant<int, 1>;
      using I2 = std::integral_constant<int, 2>;
      using I3 = std::integral_constant<int, 3>;
      using I4 = std::integral_constant<int, 4>;
      using I5 = std::integral_constant<int, 5>;
      using I6 = std::integral_constant<int, 6>;
      using I7 = std::integral_constant<int, 7>;
      sub_block(I0{}, field6<0>(s0));
      sub_block(I1{}, field6<8>(s0));
      sub_block(I2{}, field6<16>(s0));
      sub_block(I3{}, field6<24>(s0));
      sub_block(I4{}, field_hi<0, 6>(s2, s0));
      sub_block(I5{}, field_hi<8, 14>(s2, s0));
      sub_block(I6{}, field_hi<16, 22>(s2, s0));
      sub_block(I7{}, field_hi<24, 30>(s2, s0));
    } else {
      // Fewer tokens: a chunk's 16 code vectors unpacked at once, each token
      // dotted with them in two chains (four for one token: exact integers,
      // so every token count computes the same sums).
      const __m512i sc[8] = {field6<0>(s0),
                             field6<8>(s0),
                             field6<16>(s0),
                             field6<24>(s0),
                             field_hi<0, 6>(s2, s0),
                             field_hi<8, 14>(s2, s0),
                             field_hi<16, 22>(s2, s0),
                             field_hi<24, 30>(s2, s0)};
      constexpr int kChains = NT == 1 ? 2 : 1;
      for (int j = 0; j < 4; ++j) {
        __m512i lo[8], hi[8];
        for (int i = 0; i < 8; ++i) {
          const __m512i n = _mm512_loadu_si512(gb + 64 * (4 + 8 * j + i));
          lo[i] = _mm512_and_si512(n, m4);
          hi[i] = _mm512_and_si512(_mm512_srli_epi16(n, 4), m4);
        }
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = a[t][b].qs + 64 * j;
          __m512i al[kChains], ah[kChains];
          for (int c = 0; c < kChains; ++c) al[c] = ah[c] = _mm512_setzero_si512();
          for (int i = 0; i < 8; ++i) {
            al[i % kChains] = _mm512_dpbusd_epi32(al[i % kChains], lo[i], bcast4(q + 4 * i));
            ah[i % kChains] = _mm512_dpbusd_epi32(ah[i % kChains], hi[i], bcast4(q + 32 + 4 * i));
          }
          for (int c = 1; c < kChains; ++c) {
            al[0] = _mm512_add_epi32(al[0], al[c]);
            ah[0] = _mm512_add_epi32(ah[0], ah[c]);
          }
          sum[t] =
              _mm512_add_epi32(sum[t], _mm512_add_epi32(_mm512_mullo_epi32(al[0], sc[2 * j]),
                                                        _mm512_mullo_epi32(ah[0], sc[2 * j + 1])));
        }
      }
    }
    // Each min twice, as two int16 in a dword: one vpdpwssd with a dword
    // of the activations' 16-element sums adds m_s * (bsums[2s] + bsums[2s+1]).
    const __m512i mn[8] = {dup16(field6<0>(s1)),
                           dup16(field6<8>(s1)),
                           dup16(field6<16>(s1)),
                           dup16(field6<24>(s1)),
                           dup16(field_hi<4, 6>(s2, s1)),
                           dup16(field_hi<12, 14>(s2, s1)),
                           dup16(field_hi<20, 22>(s2, s1)),
                           dup16(field_hi<28, 30>(s2, s1))};
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& q = a[t][b];
      __m512i ms = _mm512_setzero_si512();
      for (int s = 0; s < 8; ++s)
        ms = _mm512_dpwssd_epi32(ms, mn[s],
                                 _mm512_set1_epi32(static_cast<int>(
                                     load_u32(reinterpret_cast<const uint8_t*>(q.bsums + 2 * s)))));
      const __m512 da = _mm512_set1_ps(q.d);
      out[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, da), out[t]);
      out[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dmin, da), out[t]);
    }
  }
}

struct Q4KDot {
  template <int NT>
  static constexpr GroupDotFn fn() {
    return &group_dot_q4k<NT>;
  }
};

// Q6_K (row_tiles.h): a group block is a 256-element super-block of 16 rows,
// its ql, qh and scale dwords transposed, then the 16 rows' d. Sub-block s
// (16 elements: 128h + 32q + 16k ..., s = 8h + 2q + k) takes its 4 code
// dwords from ql dwords 16h + 8(q & 1) + 4k + i (low nibbles for q < 2,
// high for q >= 2) and qh dwords 32 + 8h + 4k + i (bits 2q, 2q + 1): codes
// 0..63, dotted with the Q8_K activations in exact int32 lanes from -32
// times the activations' 16-element sum (the code offset), then times the
// sub-block's int8 scale in f32 (exact; vpmulld costs more on these cores):
//   y_r += da * d_r * sum_s sc_rs * (dot_rs - 32 * asum_s).
inline constexpr size_t kQ6KGroupBytes = kTileRows * sizeof(BlockQ6_K);
inline constexpr size_t kQ6KScales = 48 * 64, kQ6KD = 52 * 64;

// Code dword i of sub-block (h, Q, k): 4 six-bit codes of each of 16 rows.
template <int Q>
inline __m512i q6k_codes(const uint8_t* gb, int h, int i) {
  const __m512i l = _mm512_loadu_si512(gb + 64 * (16 * h + 8 * (Q & 1) + i));
  const __m512i qh = _mm512_loadu_si512(gb + 64 * (32 + 8 * h + i));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i nib =
      Q >= 2 ? _mm512_and_si512(_mm512_srli_epi16(l, 4), m4) : _mm512_and_si512(l, m4);
  // Bits 2Q, 2Q + 1 of each qh byte moved to bits 4, 5 (what the 16-bit
  // shift carries across bytes is masked off).
  __m512i hb;
  if constexpr (Q == 0) {
    hb = _mm512_slli_epi16(qh, 4);
  } else if constexpr (Q == 1) {
    hb = _mm512_slli_epi16(qh, 2);
  } else if constexpr (Q == 2) {
    hb = qh;
  } else {
    hb = _mm512_srli_epi16(qh, 2);
  }
  // nib | (hb & 0x30)
  return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x30), 0xF8);
}

// Sub-block S of one super-block, added to NT tokens' sums. Each token's
// sum over the sub-block starts from -32 times its activations' sum, so the
// dpbusd chain ends at sum (code - 32) * x, exact in int32; times the
// sub-block's scale it is still exact in f32 (|.| < 2^24), and the 16
// sub-blocks add up in f32, the same order for every token count.
template <int S, int NT>
inline void q6k_sub_block(const uint8_t* gb, const BlockQ8_K* const* a, int64_t b, __m512* sum) {
  constexpr int h = S / 8, q = (S % 8) / 2, k = S % 2;
  __m512i w[4];
  for (int i = 0; i < 4; ++i) w[i] = q6k_codes<q>(gb, h, 4 * k + i);
  // Scale byte S % 4 of scale dword S / 4, sign-extended.
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_srai_epi32(
      _mm512_slli_epi32(_mm512_loadu_si512(gb + kQ6KScales + 64 * (S / 4)), 24 - 8 * (S % 4)), 24));
  for (int t = 0; t < NT; ++t) {
    const BlockQ8_K& x = a[t][b];
    __m512i acc = _mm512_set1_epi32(-32 * x.bsums[S]);
    for (int i = 0; i < 4; ++i) acc = _mm512_dpbusd_epi32(acc, w[i], bcast4(x.qs + 16 * S + 4 * i));
    sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sc, sum[t]);
  }
}

template <int NT, int... S>
inline void q6k_sub_blocks(const uint8_t* gb, const BlockQ8_K* const* a, int64_t b, __m512* sum,
                           std::integer_sequence<int, S...>) {
  (q6k_sub_block<S, NT>(gb, a, b, sum), ...);
}

// NT tokens' sums over every super-block of one group.
template <int NT>
inline void group_dot_q6k(const uint8_t* group, int64_t nsb, const uint8_t* const* act, int64_t,
                          const uint8_t* pf_end, __m512* out) {
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]);
    out[t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nsb; ++b) {
    const uint8_t* gb = group + static_cast<size_t>(b) * kQ6KGroupBytes;
    if (const uint8_t* p = gb + kQ6KGroupBytes; p < pf_end) {
      for (size_t l = 0; l < kQ6KGroupBytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T0);
    }
    __m512 sum[NT];
    for (int t = 0; t < NT; ++t) sum[t] = _mm512_setzero_ps();
    q6k_sub_blocks<NT>(gb, a, b, sum, std::make_integer_sequence<int, 16>{});
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kQ6KD)));
    for (int t = 0; t < NT; ++t)
      out[t] = _mm512_fmadd_ps(sum[t], _mm512_mul_ps(d, _mm512_set1_ps(a[t][b].d)), out[t]);
  }
}

struct Q6KDot {
  template <int NT>
  static constexpr GroupDotFn fn() {
    return &group_dot_q6k<NT>;
  }
};

// Many tokens (prefill) from repacked K-quants: each group's super-blocks,
// a slice of kKc elements at a time, unpacked into the packed kernel's tile
// (packed-inl.h) and dotted with every token of the call there. A group is
// already 16 rows side by side, so the codes need their nibbles split (Q6_K:
// the high bits merged) but no transpose, and the tile holds what
// PackK32 / PackK16 (matmul_kquants.cc) make of the same rows: the same
// codes, scales, mins and d, so the sums are bit for bit the rows' packed
// prefill. The tile kernel's arithmetic (up to 8 tokens a pass, scales per
// token) loses to the packed kernel's at many tokens where rows are short.
struct GroupPackQ4K {
  static constexpr int64_t kBlock = kQK_K;
  static constexpr size_t kGroupBytes = kQ4KGroupBytes;
  static void pack_group(const uint8_t* g, int64_t nsb, Packed& p) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* gb = g + static_cast<size_t>(sb) * kQ4KGroupBytes;
      // qs dword 8j + i: low nibbles are elements 64j + 4i .., dword 16j + i
      // of the super-block; high nibbles 64j + 32 + 4i .., dword 16j + 8 + i.
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 8; ++i) {
          const __m512i n = _mm512_loadu_si512(gb + 64 * (4 + 8 * j + i));
          _mm512_store_si512(p.q[64 * sb + 16 * j + i], _mm512_and_si512(n, m4));
          _mm512_store_si512(p.q[64 * sb + 16 * j + 8 + i],
                             _mm512_and_si512(_mm512_srli_epi16(n, 4), m4));
        }
      const __m512i dd = _mm512_loadu_si512(gb);
      _mm512_store_ps(p.d[sb], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
      _mm512_store_ps(p.dmin[sb],
                      _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
      const __m512i s0 = _mm512_loadu_si512(gb + 64), s1 = _mm512_loadu_si512(gb + 128),
                    s2 = _mm512_loadu_si512(gb + 192);
      int32_t(*sc)[kPR] = p.sc + 8 * sb;
      int32_t(*mn)[kPR] = p.mn + 8 * sb;
      _mm512_store_si512(sc[0], field6<0>(s0));
      _mm512_store_si512(sc[1], field6<8>(s0));
      _mm512_store_si512(sc[2], field6<16>(s0));
      _mm512_store_si512(sc[3], field6<24>(s0));
      _mm512_store_si512(sc[4], field_hi<0, 6>(s2, s0));
      _mm512_store_si512(sc[5], field_hi<8, 14>(s2, s0));
      _mm512_store_si512(sc[6], field_hi<16, 22>(s2, s0));
      _mm512_store_si512(sc[7], field_hi<24, 30>(s2, s0));
      _mm512_store_si512(mn[0], field6<0>(s1));
      _mm512_store_si512(mn[1], field6<8>(s1));
      _mm512_store_si512(mn[2], field6<16>(s1));
      _mm512_store_si512(mn[3], field6<24>(s1));
      _mm512_store_si512(mn[4], field_hi<4, 6>(s2, s1));
      _mm512_store_si512(mn[5], field_hi<12, 14>(s2, s1));
      _mm512_store_si512(mn[6], field_hi<20, 22>(s2, s1));
      _mm512_store_si512(mn[7], field_hi<28, 30>(s2, s1));
    }
  }
  template <int NT>
  static void compute(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act, int64_t,
                      __m512* out, TilePrefetch& pf) {
    packed_kquant<NT, PackKind::kK32, 0>(p, k0, kc, act, out, pf);
  }
};

template <int Q>
inline void q6k_pack_quarter(const uint8_t* gb, int h, uint32_t (*q)[kPR]) {
  for (int m = 0; m < 8; ++m) _mm512_store_si512(q[32 * h + 8 * Q + m], q6k_codes<Q>(gb, h, m));
}

struct GroupPackQ6K {
  static constexpr int64_t kBlock = kQK_K;
  static constexpr size_t kGroupBytes = kQ6KGroupBytes;
  static void pack_group(const uint8_t* g, int64_t nsb, Packed& p) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* gb = g + static_cast<size_t>(sb) * kQ6KGroupBytes;
      // Element 128h + 32Q + 4m .. is dword 32h + 8Q + m of the super-block.
      uint32_t(*q)[kPR] = p.q + 64 * sb;
      for (int h = 0; h < 2; ++h) {
        q6k_pack_quarter<0>(gb, h, q);
        q6k_pack_quarter<1>(gb, h, q);
        q6k_pack_quarter<2>(gb, h, q);
        q6k_pack_quarter<3>(gb, h, q);
      }
      for (int w = 0; w < 4; ++w) {
        const __m512i v = _mm512_loadu_si512(gb + kQ6KScales + 64 * w);
        _mm512_store_si512(p.sc[16 * sb + 4 * w + 0],
                           _mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24));
        _mm512_store_si512(p.sc[16 * sb + 4 * w + 1],
                           _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 24));
        _mm512_store_si512(p.sc[16 * sb + 4 * w + 2],
                           _mm512_srai_epi32(_mm512_slli_epi32(v, 8), 24));
        _mm512_store_si512(p.sc[16 * sb + 4 * w + 3], _mm512_srai_epi32(v, 24));
      }
      _mm512_store_ps(
          p.d[sb],
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kQ6KD))));
    }
  }
  template <int NT>
  static void compute(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act, int64_t,
                      __m512* out, TilePrefetch& pf) {
    packed_kquant<NT, PackKind::kK16, 5>(p, k0, kc, act, out, pf);
  }
};

// A K-quant's group_dot for 1 .. kTileTok tokens (Dot::fn<NT>), walked over
// 256-element super-blocks.
template <class Dot, size_t... I>
constexpr std::array<GroupDotFn, sizeof...(I)> kquant_dots(std::index_sequence<I...>) {
  return {Dot::template fn<static_cast<int>(I) + 1>()...};
}
template <class Dot>
void run_tiles_kquant(const MatmulArgs& a, int64_t row0, int64_t row1, int64_t tok0, int64_t tok1) {
  static constexpr auto kDots = kquant_dots<Dot>(std::make_index_sequence<kTileTok>{});
  walk_tiles(kDots, a.n_in / kQK_K, a, row0, row1, tok0, tok1);
}
#endif  // SUSTAIN_VNNI

TileFn RowTiles(QType t) {
#if SUSTAIN_VNNI
  switch (t) {
    case QType::Q4_0:
      return &run_tiles<QType::Q4_0>;
    case QType::Q5_0:
      return &run_tiles<QType::Q5_0>;
    case QType::Q8_0:
      return &run_tiles<QType::Q8_0>;
    case QType::Q4_K:
      return &run_tiles_kquant<Q4KDot>;
    case QType::Q6_K:
      return &run_tiles_kquant<Q6KDot>;
    default:
      return nullptr;
  }
#else
  (void)t;
  return nullptr;
#endif
}

TileFn RowTilesPacked(QType t) {
#if SUSTAIN_VNNI
  switch (t) {
    case QType::Q4_K:
      return &run_packed_groups<GroupPackQ4K>;
    case QType::Q6_K:
      return &run_packed_groups<GroupPackQ6K>;
    default:
      return nullptr;
  }
#else
  (void)t;
  return nullptr;
#endif
}

}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
SUSTAIN_SIMD_END();

#if HWY_ONCE
namespace sustain::kernels::cpu {

HWY_EXPORT(RowTiles);
HWY_EXPORT(RowTilesPacked);

TileFn row_tiles_tile(QType t) {
  return HWY_DYNAMIC_DISPATCH(RowTiles)(t);
}

TileFn row_tiles_packed_tile(QType t) {
  return HWY_DYNAMIC_DISPATCH(RowTilesPacked)(t);
}

}  // namespace sustain::kernels::cpu
#endif  // HWY_ONCE

// The AVX-512 BF16 paths of the attention kernel for FP8 E4M3 K / V pages in
// the tiled layout (kv/tiled.h): every E4M3 byte becomes the bf16 of the
// same value (exact: E4M3's 3 mantissa bits and exponents 2^-9 .. 2^8 fit
// bf16) by two 128-entry byte-table lookups (vpermi2b), and vdpbf16ps takes
// two products per 32-bit lane into f32. K·q: q rounded to bf16 once per
// item (the softmax scale folded in), 16 keys per vector. p·V: the tile's
// softmax weights rounded to bf16, 16 elements per vector, two keys per lane.
// Against converting each byte to f32 in registers (the row reader Fp8Rows,
// ~11 vector ops per 16 elements), 64 bytes cost 5 ops here.
//
// Rounding q and p to bf16 (8 significant bits) errs by at most 2^-9 of
// each value, below the int8 query of the block formats and far below
// E4M3's own 2^-4. Uses Broadcast32 of attend_tiled-inl.h; compiled only
// where SUSTAIN_ATTN_VNNI is 1, called only where the CPU has AVX512_BF16
// (Fp8TiledCpu).

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_FP8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_FP8_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_FP8_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_FP8_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "attention/kernel.h"
#include "kv/tiled.h"
#include "tensor/fp16.h"

#include "hwy/highway.h"

#include "attention/attend_target-inl.h"
#include "attention/attend_tiled-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if SUSTAIN_ATTN_VNNI

// Whether this CPU runs the functions below (AVX3_DL targets such as Ice
// Lake lack AVX512_BF16; Zen 4 and Sapphire Rapids have it).
inline bool Fp8TiledCpu() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

// bf16 bits of the E4M3 magnitude em (< 128): e = em >> 3, m = em & 7 is
// 2^(e - 7) · (1 + m/8) for e > 0, m · 2^-9 for e = 0; em = 127 is NaN.
constexpr uint16_t Fp8MagnitudeBf16(int em) {
  if (em == 127) return 0x7fc0;
  const int e = em >> 3, m = em & 7;
  if (e > 0) return uint16_t((e + 120) << 7 | m << 4);
  if (m == 0) return 0;
  const int top = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m = 2^top + rest
  return uint16_t((118 + top) << 7 | (m - (1 << top)) << (7 - top));
}
struct Fp8Bytes {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
};
constexpr Fp8Bytes MakeFp8Bytes() {
  Fp8Bytes t{};
  for (int em = 0; em < 128; ++em) {
    t.hi[em] = uint8_t(Fp8MagnitudeBf16(em) >> 8);
    t.lo[em] = uint8_t(Fp8MagnitudeBf16(em) & 0xff);
  }
  return t;
}
inline constexpr Fp8Bytes kFp8Bytes = MakeFp8Bytes();

// q (dk floats, a multiple of 32) × scale as bf16, rounded to nearest even,
// into the query row at base (kernel.h int_query_floats).
inline void Bf16Query(const float* q, int dk, float scale, float* base) {
  auto* out = reinterpret_cast<uint16_t*>(base);
  for (int i = 0; i < dk; ++i) out[i] = f32_to_bf16(q[i] * scale);
}

#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512bf16,avx512vbmi,avx512bw,avx512vl,no-avxvnni")

struct Fp8Table {
  __m512i hi0, hi1, lo0, lo1;
};
HWY_INLINE Fp8Table LoadFp8Table() {
  return {_mm512_load_si512(kFp8Bytes.hi), _mm512_load_si512(kFp8Bytes.hi + 64),
          _mm512_load_si512(kFp8Bytes.lo), _mm512_load_si512(kFp8Bytes.lo + 64)};
}

// A 64-byte line of E4M3 codes as bf16: a holds bytes 16L + 0..7 of each
// 16-byte lane L, b bytes 16L + 8..15 (kv/tiled.h), in byte order, so 32-bit
// lane 4L + u of a is the pair (byte 16L + 2u, 16L + 2u + 1).
HWY_INLINE void Fp8LineToBf16(__m512i x, const Fp8Table& t, __m512i& a, __m512i& b) {
  // vpermi2b reads 7 index bits: the magnitude's entry; the sign is or'ed in.
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, x, t.hi1), x,
                                               _mm512_set1_epi8(char(0x80)), 0xf8);  // a | b & c
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, x, t.lo1);
  a = _mm512_unpacklo_epi8(lo, hi);
  b = _mm512_unpackhi_epi8(lo, hi);
}

HWY_INLINE __m512 DotBf16(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

// scores[r][16g + t] = q_r · k_t (scale folded into q) for G 16-key groups,
// group g's nb group-blocks of 32 elements at gp[g].
template <int R, int G>
HWY_INLINE void ScoreGroupsFp8(const uint16_t* const* q, const uint8_t* const* gp, int nb,
                               const Fp8Table& t, float* const* scores, int j0,
                               LineCursor& next) {
  __m512 acc[G][R][2];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r][0] = acc[g][r][1] = _mm512_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    for (int c = 0; c < 8; ++c) {
      __m512i q01[R], q23[R];  // elements (4c, 4c + 1) and (4c + 2, 4c + 3)
      for (int r = 0; r < R; ++r) {
        q01[r] = Broadcast32(q[r] + b * kQK + 4 * c);
        q23[r] = Broadcast32(q[r] + b * kQK + 4 * c + 2);
      }
      for (int g = 0; g < G; ++g) {
        __m512i a, bb;
        Fp8LineToBf16(_mm512_loadu_si512(gp[g] + size_t(b) * 512 + 64 * c), t, a, bb);
        next.step();
        for (int r = 0; r < R; ++r) {
          acc[g][r][0] = DotBf16(acc[g][r][0], a, q01[r]);
          acc[g][r][1] = DotBf16(acc[g][r][1], bb, q23[r]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(scores[r] + j0 + 16 * g, _mm512_add_ps(acc[g][r][0], acc[g][r][1]));
}

// scores[r][j] = q_r · k_j for the keys of whole 16-key groups covering
// [0, n) of a tile, group g at groups[g] (keys past n score stale bytes;
// the caller masks them). q[r]: row r's bf16 query (Bf16Query).
template <int R>
HWY_NOINLINE void ScoreRowsFp8Tiled(const uint16_t* const* q, const uint8_t* const* groups, int n,
                                    int dk, float* const* scores, LineCursor& cursor, bool touch) {
  LineCursor next = cursor;  // in registers (LineCursor)
  const int nb = dk / kQK;
  const int n_groups = (n + 15) / 16;
  if (touch)
    for (int g = 0; g < n_groups; ++g) TouchLines(groups[g], size_t(nb) * 512);
  const Fp8Table t = LoadFp8Table();
  int j = 0;
  for (; j + 16 < n; j += 32) ScoreGroupsFp8<R, 2>(q, groups + j / 16, nb, t, scores, j, next);
  if (j < n) ScoreGroupsFp8<R, 1>(q, groups + j / 16, nb, t, scores, j, next);
  cursor = next;
}

// Byte masks of a value line that keep keys 4s .. 4s + live - 1 of its quad
// (item k of a lane: bytes with (byte & 8) / 4 + (byte & 1) == k), so stale
// bytes past the sequence's end (possibly NaN codes) read as 0.
constexpr uint64_t Fp8LiveMask(int live) {
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i)
    if (((i & 8) >> 2) + (i & 1) < live) m |= uint64_t(1) << i;
  return m;
}

// o_r += sum_j p_r[j] v_j for j < n (n <= kTileTiled), V tiled FP8, group
// g at groups[g]: p rounded to bf16 pairs (keys 2i, 2i + 1 in one 32-bit
// lane), 16 elements of V per vector. `work`: R × kTileTiled bf16.
template <int R>
HWY_NOINLINE void AccumulateRowsFp8Tiled(const float* const* p, const uint8_t* const* groups, int n,
                                         int dv, float* const* o, float* work, LineCursor& cursor,
                                         bool touch) {
  LineCursor next = cursor;  // in registers (LineCursor)
  static constexpr uint64_t kLive[4] = {Fp8LiveMask(0), Fp8LiveMask(1), Fp8LiveMask(2),
                                        Fp8LiveMask(3)};
  const int nb = dv / kQK;
  const int n_groups = (n + 15) / 16;
  if (touch)
    for (int g = 0; g < n_groups; ++g) TouchLines(groups[g], size_t(nb) * 512);
  auto* pw = reinterpret_cast<uint16_t*>(work);  // [R][kTileTiled]
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 16 * n_groups; j += 32)
      _mm512_storeu_si512(pw + r * kTileTiled + j,
                          reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(
                              _mm512_loadu_ps(p[r] + j + 16), _mm512_loadu_ps(p[r] + j))));
  const Fp8Table t = LoadFp8Table();
  for (int b = 0; b < nb; ++b) {
    // acc[r][h][k]: elements 32b + 16h + lane, from items 0, 1 (k = 0) and
    // 2, 3 (k = 1) of each quad.
    __m512 acc[R][2][2];
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) acc[r][h][0] = acc[r][h][1] = _mm512_setzero_ps();
    for (int g = 0; g < n_groups; ++g) {
      const uint8_t* gb = groups[g] + size_t(b) * 512;
      for (int s = 0; s < 4; ++s) {
        const int live = n - 16 * g - 4 * s;
        if (live <= 0) break;
        __m512i p01[R], p23[R];
        for (int r = 0; r < R; ++r) {
          p01[r] = Broadcast32(pw + r * kTileTiled + 16 * g + 4 * s);
          p23[r] = Broadcast32(pw + r * kTileTiled + 16 * g + 4 * s + 2);
        }
        for (int h = 0; h < 2; ++h) {
          __m512i x = _mm512_loadu_si512(gb + (2 * s + h) * 64);
          next.step();
          if (live < 4) x = _mm512_maskz_mov_epi8(kLive[live], x);
          __m512i a, bb;
          Fp8LineToBf16(x, t, a, bb);
          for (int r = 0; r < R; ++r) {
            acc[r][h][0] = DotBf16(acc[r][h][0], a, p01[r]);
            acc[r][h][1] = DotBf16(acc[r][h][1], bb, p23[r]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) {
        float* dst = o[r] + b * kQK + 16 * h;
        _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst),
                                            _mm512_add_ps(acc[r][h][0], acc[r][h][1])));
      }
  }
  cursor = next;
}

#pragma GCC pop_options

#endif  // SUSTAIN_ATTN_VNNI

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_FP8_INL_H_

// The AVX-512 VNNI paths of the attention kernel for K / V pages stored in
// the tiled layout (kv/tiled.h): 16 keys per vector, one per 32-bit lane for
// K·q, four per lane for p·V. Uses Q8Query and PrefetchQ8 of
// attend_vnni-inl.h; compiled only where SUSTAIN_ATTN_VNNI is 1.
//
// Against the row-major kernels (attend_vnni-inl.h) this removes the
// per-key inserts, the transposes that reduce four keys' lane sums, and the
// gathering of block scales: scales of 16 keys are one 32-byte load. A
// tile is up to kTileTiled keys whose 16-key groups are passed one pointer
// each (they may lie on different pages); every 64-byte load also asks for
// a line of the next unit (LineCursor, kernel.h).

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_TILED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_TILED_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_TILED_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_TILED_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "attention/kernel.h"
#include "kv/tiled.h"
#include "tensor/blocks.h"
#include "tensor/qtype.h"

#include "hwy/highway.h"

#include "attention/attend_target-inl.h"
#include "attention/attend_vnni-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if SUSTAIN_ATTN_VNNI

// Compile-time facts of a tiled group-block, mirroring kv::tile_format
// (the attention tests check the kernels against the reference, which reads
// rows back through kv::untile_row).
template <QType T>
struct TiledFmt {
  static constexpr bool kMin = T == QType::Q4_1 || T == QType::Q5_1;
  static constexpr bool kHigh = T == QType::Q5_0 || T == QType::Q5_1;
  static constexpr bool kBytes = T == QType::Q8_0;  // 8-bit codes, not nibbles
  static constexpr int kOffset =
      T == QType::Q8_0 ? 128 : T == QType::Q4_0 ? 8 : T == QType::Q5_0 ? 16 : 0;
  static constexpr size_t kCodesOff = kMin ? 64 : 32;
  static constexpr size_t kHighOff = kCodesOff + (kBytes ? 512 : 256);
  static constexpr size_t kSize = kHighOff + (kHigh ? 64 : 0);
};

#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vbmi,avx512bw,avx512vl,no-avxvnni")

// The f16 values at p (16 keys) as f32, lanes at or past `n` zero (keys past
// the sequence's end hold stale bytes, which may be any f16 at all).
HWY_INLINE __m512 Half16(const uint8_t* p, __mmask16 live) {
  return _mm512_maskz_mov_ps(live,
                             _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
HWY_INLINE __mmask16 LiveKeys(int n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max(n, 0)) - 1);
}
HWY_INLINE __m512i Broadcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// Asks for every line of [p, p + bytes) at once: the tiled kernels read a
// tile's lines out of stream order, and the misses then overlap.
HWY_INLINE void TouchLines(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}
// The vpermt2b index that puts byte 1 of dwords 0..31 of (a, b) in bytes
// 0..31 and byte 0 in bytes 32..63.
struct SplitBytes {
  alignas(64) uint8_t idx[64];
};
constexpr SplitBytes MakeSplitBytes() {
  SplitBytes t{};
  for (int i = 0; i < 32; ++i) {
    t.idx[i] = uint8_t(4 * i + 1);  // < 128: dword i of a (i < 16) or of b
    t.idx[32 + i] = uint8_t(4 * i);
  }
  return t;
}
inline constexpr SplitBytes kSplitBytes = MakeSplitBytes();
// acc + the dot products of a's unsigned and b's signed bytes (vpdpbusd),
// in inline assembly: GCC 12 moves the intrinsic's accumulators between
// registers around every use in the V loop below (16 copies per 16
// instructions at four rows) and spills two of them.
HWY_INLINE __m512i DotBytes(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
HWY_INLINE uint64_t Mask64(const uint8_t* p) {
  uint64_t m;
  std::memcpy(&m, p, 8);
  return m;
}

// scores[r][16g + t] = scale · q_r · k_t for G 16-key groups, group g's
// blocks at gp[g]: per group-block, integer dots of 16 keys per vector,
// scaled once per block. Each (group, row) has two dot accumulators
// (vpdpbusd's latency is ~5 cycles: 4·G·R independent chains keep it busy).
template <int R, int G, QType T>
HWY_INLINE void ScoreGroupsTiled(const Q8Query* q, const uint8_t* const* gp, int nb,
                                 float* const* scores, int j0, LineCursor& next) {
  using F = TiledFmt<T>;
  const __m512i nib = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(16);
  __m512 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm512_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* gb[G];
    for (int g = 0; g < G; ++g) gb[g] = gp[g] + size_t(b) * F::kSize;
    __m512i dot[G][R][2];
    for (int r = 0; r < R; ++r) {
      // Q8_0: codes are +128, so 128 × sum(q) = corr comes off; the
      // 4/5-bit formats' offset likewise.
      const __m512i init = _mm512_set1_epi32(-F::kOffset * (q[r].corr[b] >> 7));
      for (int g = 0; g < G; ++g) {
        dot[g][r][0] = init;
        dot[g][r][1] = _mm512_setzero_si512();
      }
    }
    const int8_t* qb[R];
    for (int r = 0; r < R; ++r) qb[r] = q[r].qs + b * kQK;
    if constexpr (F::kBytes) {
      // Unrolled, so that c & 1 is a constant: indexed by a loop variable,
      // GCC kept dot[] on the stack (a load and a store around every
      // vpdpbusd, each waiting on the last one's store).
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        __m512i qv[R];
        for (int r = 0; r < R; ++r) qv[r] = Broadcast32(qb[r] + 4 * c);
        for (int g = 0; g < G; ++g) {
          const __m512i x = _mm512_loadu_si512(gb[g] + F::kCodesOff + 64 * c);
          next.step();
          for (int r = 0; r < R; ++r)
            dot[g][r][c & 1] = _mm512_dpbusd_epi32(dot[g][r][c & 1], x, qv[r]);
        }
      }
    } else {
      for (int i = 0; i < 4; ++i) {
        __m512i ql[R], qh[R];
        for (int r = 0; r < R; ++r) {
          ql[r] = Broadcast32(qb[r] + 4 * i);
          qh[r] = Broadcast32(qb[r] + 16 + 4 * i);
        }
        for (int g = 0; g < G; ++g) {
          const __m512i x = _mm512_loadu_si512(gb[g] + F::kCodesOff + 64 * i);
          next.step();
          __m512i lo = _mm512_and_si512(x, nib);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib);
          if constexpr (F::kHigh) {
            lo = _mm512_mask_add_epi8(lo, Mask64(gb[g] + F::kHighOff + 16 * i), lo, bit4);
            hi = _mm512_mask_add_epi8(hi, Mask64(gb[g] + F::kHighOff + 16 * i + 8), hi, bit4);
          }
          for (int r = 0; r < R; ++r) {
            dot[g][r][0] = _mm512_dpbusd_epi32(dot[g][r][0], lo, ql[r]);
            dot[g][r][1] = _mm512_dpbusd_epi32(dot[g][r][1], hi, qh[r]);
          }
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      next.step();  // the scales' line (and minimums' or high bits')
      if constexpr (F::kMin || F::kHigh) next.step();
      const __m512 kd =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb[g])));
      __m512 km = _mm512_setzero_ps();
      if constexpr (F::kMin)
        km = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb[g] + 32)));
      for (int r = 0; r < R; ++r) {
        const float dq = q[r].d[b];
        const __m512i dsum = _mm512_add_epi32(dot[g][r][0], dot[g][r][1]);
        acc[g][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dsum),
                                    _mm512_mul_ps(kd, _mm512_set1_ps(dq)), acc[g][r]);
        if constexpr (F::kMin)
          acc[g][r] = _mm512_fmadd_ps(km, _mm512_set1_ps(dq * float(q[r].corr[b] >> 7)),
                                      acc[g][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(scores[r] + j0 + 16 * g, acc[g][r]);
}

// scores[r][j] = scale · q_r · k_j for the keys of whole 16-key groups
// covering [0, n) of a tile, group g's blocks at groups[g], two groups at a
// time.
template <int R, QType T>
HWY_NOINLINE void ScoreRowsTiled(const Q8Query* q, const uint8_t* const* groups, int n, int dk,
                                 float* const* scores, const Prefetch& pf, LineCursor& cursor,
                                 bool touch) {
  LineCursor next = cursor;  // in registers (LineCursor)
  const int nb = dk / kQK;
  const size_t group_bytes = size_t(nb) * TiledFmt<T>::kSize;
  const int n_groups = (n + 15) / 16;
  if (touch) for (int g = 0; g < n_groups; ++g) TouchLines(groups[g], group_bytes);
  int j = 0;
  for (; j + 16 < n; j += 32) {
    PrefetchQ8(pf, j, 32);
    ScoreGroupsTiled<R, 2, T>(q, groups + j / 16, nb, scores, j, next);
  }
  if (j < n) {
    PrefetchQ8(pf, j, 16);
    ScoreGroupsTiled<R, 1, T>(q, groups + j / 16, nb, scores, j, next);
  }
  cursor = next;
}

// o_r += sum_j p_r[j] v_j for j < n (n <= kTileTiled), V tiled, group g's
// blocks at groups[g]: per row and block the weights w_j = p_r[j] · d_j
// are quantized to 15-bit integers W_j (against the bound max_j p_r[j] ×
// max_j |d_j|, as VScales) and split into two int8 halves, W = 256·hi + lo,
// so vpdpbusd multiplies four keys' codes by their weights per 32-bit lane:
// 64 multiply-adds per instruction, two instructions per weight, the same
// as vpdpwssd's 32 but with no widening of the codes. The nibble formats'
// codes are the unsigned factor (u8) and the halves signed; Q8_0's weights
// (>= 0) are the unsigned factor and its codes signed, which leaves no
// offset to take off. Both sums are exact in int32 (64 keys × 255 × 128 ×
// 256 < 2^31). p is 0 past each row's visible keys; d and m past n are
// masked to 0.
// `work`: R × 2 × kTileTiled bytes.
template <int R, QType T>
HWY_NOINLINE void AccumulateRowsTiled(const float* const* p, const uint8_t* const* groups, int n,
                                      int dv, float* const* o, float* work, LineCursor& cursor,
                                      bool touch, bool row_bounds) {
  LineCursor next = cursor;  // in registers (LineCursor)
  static_assert(kTileTiled == 64, "the weight bytes below are laid out for 4 groups");
  using F = TiledFmt<T>;
  const int nb = dv / kQK;
  const int n_groups = (n + 15) / 16;
  const int n_pairs = (n_groups + 1) / 2;
  if (touch) for (int g = 0; g < n_groups; ++g) TouchLines(groups[g], size_t(nb) * F::kSize);
  __mmask16 live[4];
  for (int g = 0; g < 4; ++g) live[g] = LiveKeys(n - 16 * g);
  // Per row 128 bytes: for keys 0..31, then 32..63, their 32 hi bytes then
  // their 32 lo bytes.
  auto* wbytes = reinterpret_cast<int8_t*>(work);
  const __m512i nib512 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(16);
  // Byte 1 (hi), then byte 0 (lo), of the 32 dwords of two vectors; for the
  // nibble formats bit 7 of the lo bytes flipped.
  const __m512i split = _mm512_load_si512(kSplitBytes.idx);
  const __m512i flip = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi8(char(0x80)), 1);
  // Q8_0: the weights are the unsigned operand (W >= 0: p >= 0 and Q8_0's
  // scales are amax / 127 >= 0), the codes the signed one (stored + 128,
  // bit 7 flipped back once per load for every row), so no offset term: a
  // per-row sum of the weights and its reduction per block saved.
  constexpr bool kSignedCodes = F::kBytes;
  constexpr float kWMax = kSignedCodes ? 32767.0f : 32639.0f;
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  float pmax[R];
  for (int r = 0; r < R; ++r) {
    __m512 mx = _mm512_loadu_ps(p[r]);
    for (int g = 1; g < n_groups; ++g) mx = _mm512_max_ps(mx, _mm512_loadu_ps(p[r] + 16 * g));
    pmax[r] = _mm512_reduce_max_ps(mx);
  }
  for (int b = 0; b < nb; ++b) {
    __m512 d[4], m[4];
    __m512 dabs_tile = _mm512_setzero_ps();
    for (int g = 0; g < n_groups; ++g) {
      const uint8_t* gb = groups[g] + size_t(b) * F::kSize;
      next.step();  // the scales' line (and minimums' or high bits')
      if constexpr (F::kMin || F::kHigh) next.step();
      d[g] = Half16(gb, live[g]);
      if constexpr (F::kMin) m[g] = Half16(gb + 32, live[g]);
      dabs_tile = _mm512_max_ps(dabs_tile, _mm512_abs_ps(d[g]));
    }
    const float dmax_tile = _mm512_reduce_max_ps(dabs_tile);
    float step[R], add[R];
    for (int r = 0; r < R; ++r) {
      // With row_bounds, the bound over the keys this row weighs (p > 0),
      // not every key of the tile: a row of a block is then quantized as it
      // is alone, where the tile ends at its own length (batch invariance).
      float dmax = dmax_tile;
      if (row_bounds) {
        __m512 dabs = _mm512_setzero_ps();
        for (int g = 0; g < n_groups; ++g) {
          const __mmask16 seen =
              _mm512_cmp_ps_mask(_mm512_loadu_ps(p[r] + 16 * g), _mm512_setzero_ps(), _CMP_GT_OQ);
          dabs = _mm512_mask_max_ps(dabs, seen, dabs, _mm512_abs_ps(d[g]));
        }
        dmax = _mm512_reduce_max_ps(dabs);
      }
      const float bound = pmax[r] * dmax;
      const float inv = bound > 1e-30f ? kWMax / bound : 0.0f;
      step[r] = inv > 0.0f ? bound * (1.0f / kWMax) : 0.0f;
      const __m512 vinv = _mm512_set1_ps(inv);
      __m512 pm = _mm512_setzero_ps();
      __m512i wsum = _mm512_setzero_si512();  // Σ (W + 128) over the pairs' 32 · n_pairs keys
      for (int h = 0; h < n_pairs; ++h) {
        __m512i w[2];  // W (+ 128 for the nibble formats), keys 32h + 16u + lane
        for (int u = 0; u < 2; ++u) {
          const int g = 2 * h + u;
          w[u] = kSignedCodes ? _mm512_setzero_si512() : _mm512_set1_epi32(128);
          if (g < n_groups) {
            const __m512 pg = _mm512_loadu_ps(p[r] + 16 * g);
            const __m512 wf = _mm512_mul_ps(_mm512_mul_ps(pg, d[g]), vinv);
            w[u] = _mm512_add_epi32(w[u], _mm512_cvtps_epi32(wf));
            if constexpr (F::kMin) pm = _mm512_fmadd_ps(pg, m[g], pm);
          }
        }
        // One byte permute gathers the 32 keys' hi then lo bytes. Q8_0: hi =
        // W >> 8 and lo = W & 255 are bytes 1 and 0 of W, both unsigned.
        // The others: hi = (W + 128) >> 8 is byte 1 of W + 128; lo = W - 256
        // hi, the low byte of W as int8, is byte 0 of W + 128 with bit 7
        // flipped.
        const __m512i bytes = _mm512_permutex2var_epi8(w[0], split, w[1]);
        if constexpr (kSignedCodes) {
          _mm512_storeu_si512(wbytes + 128 * r + 64 * h, bytes);
        } else {
          wsum = _mm512_add_epi32(wsum, _mm512_add_epi32(w[0], w[1]));
          _mm512_storeu_si512(wbytes + 128 * r + 64 * h, _mm512_xor_si512(bytes, flip));
        }
      }
      add[r] = 0.0f;
      if constexpr (F::kMin) add[r] = _mm512_reduce_add_ps(pm);
      if constexpr (F::kOffset != 0 && !kSignedCodes)
        add[r] -= float(F::kOffset) * step[r] *
                  float(_mm512_reduce_add_epi32(wsum) - 32 * 128 * n_pairs);
    }
    // The weights are read back from memory by broadcast loads: hidden from
    // the compiler, which otherwise extracts and broadcasts them from the
    // registers they were computed in (two shuffles per broadcast).
    const int8_t* wread = wbytes;
    asm("" : "+r"(wread));
    // acc[r][h][0]: codes × hi, acc[r][h][1]: codes × lo, elements 16h + lane.
    __m512i acc[R][2][2];
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) acc[r][h][0] = acc[r][h][1] = _mm512_setzero_si512();
    for (int s = 0; s < 4 * n_groups; ++s) {
      const uint8_t* gb = groups[s / 4] + size_t(b) * F::kSize;
      const int ss = s % 4;
      __m512i x0, x1;
      next.step();
      if constexpr (F::kBytes) {
        x0 = _mm512_xor_si512(_mm512_loadu_si512(gb + F::kCodesOff + 128 * ss), sign);
        x1 = _mm512_xor_si512(_mm512_loadu_si512(gb + F::kCodesOff + 128 * ss + 64), sign);
        next.step();
      } else {
        const __m512i x = _mm512_loadu_si512(gb + F::kCodesOff + 64 * ss);
        x0 = _mm512_and_si512(x, nib512);
        x1 = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib512);
        if constexpr (F::kHigh) {
          x0 = _mm512_mask_add_epi8(x0, Mask64(gb + F::kHighOff + 16 * ss), x0, bit4);
          x1 = _mm512_mask_add_epi8(x1, Mask64(gb + F::kHighOff + 16 * ss + 8), x1, bit4);
        }
      }
      const int8_t* wk = wread + 64 * (s / 8) + 4 * (s % 8);  // keys 4s .. 4s + 3
      for (int r = 0; r < R; ++r) {
        const __m512i wh = Broadcast32(wk + 128 * r);
        const __m512i wl = Broadcast32(wk + 128 * r + 32);
        if constexpr (kSignedCodes) {  // vpdpbusd: the first factor unsigned
          acc[r][0][0] = DotBytes(acc[r][0][0], wh, x0);
          acc[r][0][1] = DotBytes(acc[r][0][1], wl, x0);
          acc[r][1][0] = DotBytes(acc[r][1][0], wh, x1);
          acc[r][1][1] = DotBytes(acc[r][1][1], wl, x1);
        } else {
          acc[r][0][0] = DotBytes(acc[r][0][0], x0, wh);
          acc[r][0][1] = DotBytes(acc[r][0][1], x0, wl);
          acc[r][1][0] = DotBytes(acc[r][1][0], x1, wh);
          acc[r][1][1] = DotBytes(acc[r][1][1], x1, wl);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 st = _mm512_set1_ps(step[r]), ad = _mm512_set1_ps(add[r]);
      for (int h = 0; h < 2; ++h) {
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(acc[r][h][0], 8), acc[r][h][1]);
        float* dst = o[r] + b * kQK + 16 * h;
        _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst),
                                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), st, ad)));
      }
    }
  }
  cursor = next;
}

#pragma GCC pop_options

#endif  // SUSTAIN_ATTN_VNNI

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_TILED_INL_H_

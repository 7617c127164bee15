// Prefill path for AVX-512 VNNI (AVX3_DL): a tile of 16 weight rows is
// unpacked once per call into unsigned int8 codes, interleaved so that int32
// lane r of a vector is row r: vector k holds bytes 4k..4k+3 of each row.
// One vpdpbusd with 4 activation bytes broadcast then advances 16 row sums at
// once, and every per-row scale applies lane-wise — no horizontal reductions.
// The tile (16 rows x kKc elements, 32 KiB of codes) is reused by every
// token of the call, 4 tokens at a time.
//
// Integer sums stay exact as in llama.cpp: codes carry the format's offset
// (Q8_0: +128, Q4_0: +8, Q5_0: +16, Q6_K: +32), removed by starting each
// block's accumulator at -offset * sum(a) — the activation block sums (Q8_K's
// bsums; for Q8_0, sums the driver stores after each row, kernels.h).
//
// Per-target include guard: included inside a foreach_target pass, after
// quant-inl.h, inside SUSTAIN_SIMD_BEGIN / END.

#if defined(SUSTAIN_KERNELS_CPU_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_KERNELS_CPU_PACKED_INL_H_
#undef SUSTAIN_KERNELS_CPU_PACKED_INL_H_
#else
#define SUSTAIN_KERNELS_CPU_PACKED_INL_H_
#endif

#include <cstring>

#include "kernels/block_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quant-inl.h"
#include "tensor/blocks.h"

SUSTAIN_SIMD_BEGIN();
namespace sustain::kernels::cpu::HWY_NAMESPACE {
#if SUSTAIN_VNNI

inline constexpr int kPR = 16;      // rows per tile = int32 lanes
inline constexpr int kKc = 2048;    // elements per tile slice (a multiple of 256)
inline constexpr int kPackTok = 4;  // tokens per pass over the tile

struct Packed {
  alignas(64) uint32_t q[kKc / 4][kPR];   // codes, dword k of each row
  alignas(64) int32_t sc[kKc / 16][kPR];  // K-quants: integer scale per sub-block
  alignas(64) int32_t mn[kKc / 32][kPR];  // Q4_K / Q5_K: min per sub-block of 32
  alignas(64) float d[kKc / 32][kPR];     // legacy: d per block; K-quants: d per super-block
  alignas(64) float dmin[kKc / 256][kPR];
};

enum class PackKind { kLegacy, kK32, kK16 };

inline void store64(uint8_t* p, I64 v) {
  _mm512_storeu_si512(p, v.v);
}
inline __m512i bcast4(const int8_t* p) {
  return _mm512_set1_epi32(static_cast<int>(load_u32(reinterpret_cast<const uint8_t*>(p))));
}

// Packing reads 16 rows' slices one after the other and waits on memory;
// the tokens' dot products then run from the tile without touching the
// weights. Left alone the two phases alternate, so for a few tokens (a
// batched decode step, a verify block) a call costs the weights' DRAM time
// plus the arithmetic. The slices the walk packs next are asked for into L2
// while this tile's arithmetic runs, a few lines per block: a burst of all
// of them at once fills the core's miss buffers and stalls it as the loads
// did.
struct TilePrefetch {
  const char* base = nullptr;  // first row's slice
  size_t stride = 0;
  uint64_t bytes = 0;  // per row
  int rows = 0;
  int per_step = 0;  // lines per step()
  int r = 0;
  uint64_t off = 0;

  // Rows [r0, min(r0 + kPR, row1)), elements [k0, k0 + kc), spread over
  // `steps` calls of step().
  TilePrefetch(const MatmulArgs& a, int64_t r0, int64_t row1, int64_t k0, int64_t kc,
               int64_t steps) {
    rows = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(kPR, row1 - r0)));
    if (rows == 0) return;
    base = reinterpret_cast<const char*>(a.w + r0 * a.w_stride +
                                         qtype_row_bytes(a.type, static_cast<uint64_t>(k0)));
    stride = a.w_stride;
    bytes = qtype_row_bytes(a.type, static_cast<uint64_t>(kc));
    const int64_t lines = rows * static_cast<int64_t>((bytes + 63) / 64);
    per_step = static_cast<int>((lines + steps - 1) / std::max<int64_t>(1, steps));
  }
  // `bytes` contiguous bytes from `p` (a slice of row-tile group blocks),
  // spread over `steps` calls of step().
  static TilePrefetch contiguous(const void* p, uint64_t n_bytes, int64_t steps) {
    TilePrefetch pf;
    if (n_bytes == 0) return pf;
    pf.base = static_cast<const char*>(p);
    pf.bytes = n_bytes;
    pf.rows = 1;
    const auto lines = static_cast<int64_t>((n_bytes + 63) / 64);
    pf.per_step = static_cast<int>((lines + steps - 1) / std::max<int64_t>(1, steps));
    return pf;
  }
  TilePrefetch() = default;
  void step() {
    for (int i = 0; i < per_step && r < rows; ++i) {
      _mm_prefetch(base + r * stride + off, _MM_HINT_T1);
      off += 64;
      if (off >= bytes) off = 0, ++r;
    }
  }
};

// Bytes [e, e + 64) of the 16 code rows into 16 tile vectors: vector k's
// lane r is dword k of row r. A 16 x 16 transpose of dwords: pairs of rows,
// then quads, within 128-bit lanes, then the 4 x 4 blocks of lanes.
inline void interleave16(const uint8_t (*codes)[kKc], int64_t e, uint32_t (*out)[kPR]) {
  __m512i t[16], u[16];
  for (int r = 0; r < 16; r += 2) {
    const __m512i a = _mm512_load_si512(codes[r] + e);
    const __m512i b = _mm512_load_si512(codes[r + 1] + e);
    t[r] = _mm512_unpacklo_epi32(a, b);  // lane l: a[4l], b[4l], a[4l+1], b[4l+1]
    t[r + 1] = _mm512_unpackhi_epi32(a, b);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3; u[4g + m] holds dword 4l + m in lane l
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i p0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44);
    const __m512i p1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
    const __m512i p2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
    const __m512i p3 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
    _mm512_store_si512(out[m], _mm512_shuffle_i32x4(p0, p2, 0x88));
    _mm512_store_si512(out[4 + m], _mm512_shuffle_i32x4(p0, p2, 0xDD));
    _mm512_store_si512(out[8 + m], _mm512_shuffle_i32x4(p1, p3, 0x88));
    _mm512_store_si512(out[12 + m], _mm512_shuffle_i32x4(p1, p3, 0xDD));
  }
}

// Legacy formats with Q8_0 activations: sum over the slice's blocks.
template <int NT>
inline void packed_legacy(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act,
                          int64_t n_in, int offset, __m512* out, TilePrefetch& pf) {
  const BlockQ8_0* a[NT];
  const int32_t* sums[NT];
  const float* da[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(act[t]) + k0 / kQK;
    sums[t] = reinterpret_cast<const int32_t*>(act[t] + q8_0_sums_offset(n_in)) + k0 / kQK;
    da[t] = reinterpret_cast<const float*>(act[t] + q8_0_scales_offset(n_in)) + k0 / kQK;
  }
  for (int64_t b = 0; b < kc / kQK; ++b) {
    pf.step();
    __m512i acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_set1_epi32(-offset * sums[t][b]);
    for (int k = 0; k < kQK / 4; ++k) {
      const __m512i w = _mm512_load_si512(p.q[b * 8 + k]);
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_dpbusd_epi32(acc[t], w, bcast4(a[t][b].qs + 4 * k));
    }
    const __m512 d = _mm512_load_ps(p.d[b]);
    for (int t = 0; t < NT; ++t)
      out[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]),
                               _mm512_mul_ps(d, _mm512_set1_ps(da[t][b])), out[t]);
  }
}

// K-quants with Q8_K activations. K32: 8 sub-blocks of 32 with mins; K16:
// 16 sub-blocks of 16 with a code offset of 1 << kShift.
template <int NT, PackKind kKind, int kShift>
inline void packed_kquant(const Packed& p, int64_t k0, int64_t kc, const uint8_t* const* act,
                          __m512* out, TilePrefetch& pf) {
  const BlockQ8_K* a[NT];
  for (int t = 0; t < NT; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]) + k0 / kQK_K;
  constexpr int kSub = kKind == PackKind::kK32 ? 32 : 16;
  for (int64_t sb = 0; sb < kc / kQK_K; ++sb) {
    __m512i isum[NT], msum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = msum[t] = _mm512_setzero_si512();
    for (int j = 0; j < kQK_K / kSub; ++j) {
      if (kSub == 32 || j % 2 == 0) pf.step();  // one step per 32 elements
      __m512i acc[NT];
      for (int t = 0; t < NT; ++t) {
        if constexpr (kKind == PackKind::kK16 && kShift > 0) {
          acc[t] = _mm512_set1_epi32(-(a[t][sb].bsums[j] << kShift));
        } else {
          acc[t] = _mm512_setzero_si512();
        }
      }
      const int64_t kbase = (sb * kQK_K + j * kSub) / 4;
      for (int k = 0; k < kSub / 4; ++k) {
        const __m512i w = _mm512_load_si512(p.q[kbase + k]);
        for (int t = 0; t < NT; ++t)
          acc[t] = _mm512_dpbusd_epi32(acc[t], w, bcast4(a[t][sb].qs + j * kSub + 4 * k));
      }
      const __m512i sc = _mm512_load_si512(p.sc[sb * (kQK_K / kSub) + j]);
      for (int t = 0; t < NT; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(acc[t], sc));
      if constexpr (kKind == PackKind::kK32) {
        const __m512i mn = _mm512_load_si512(p.mn[sb * 8 + j]);
        for (int t = 0; t < NT; ++t) {
          const int bs = a[t][sb].bsums[2 * j] + a[t][sb].bsums[2 * j + 1];
          msum[t] = _mm512_add_epi32(msum[t], _mm512_mullo_epi32(mn, _mm512_set1_epi32(bs)));
        }
      }
    }
    const __m512 d = _mm512_load_ps(p.d[sb]);
    for (int t = 0; t < NT; ++t) {
      const __m512 da = _mm512_set1_ps(a[t][sb].d);
      out[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, da), out[t]);
      if constexpr (kKind == PackKind::kK32) {
        const __m512 dmin = _mm512_load_ps(p.dmin[sb]);
        out[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmin, da), out[t]);
      }
    }
  }
}

// Tokens [tok0, tok1) of one packed slice (elements [k0, k0 + kc) of rows
// [rt, rt + 16), `lanes` of them present), kPackTok at a time, added to what
// y holds from the slices before.
template <class Fmt>
inline void packed_tokens(const MatmulArgs& a, const Packed& p, int64_t rt, __mmask16 lanes,
                          int64_t k0, int64_t kc, int64_t tok0, int64_t tok1, TilePrefetch& pf) {
  for (int64_t t = tok0; t < tok1; t += kPackTok) {
    const int nt = static_cast<int>(std::min<int64_t>(kPackTok, tok1 - t));
    const uint8_t* act[kPackTok];
    for (int i = 0; i < kPackTok; ++i)
      act[i] = a.act + static_cast<size_t>(t + std::min(i, nt - 1)) * a.act_stride;
    __m512 out[kPackTok];
    for (int i = 0; i < kPackTok; ++i) out[i] = _mm512_setzero_ps();
    switch (nt) {
      case 4:
        Fmt::template compute<4>(p, k0, kc, act, a.n_in, out, pf);
        break;
      case 3:
        Fmt::template compute<3>(p, k0, kc, act, a.n_in, out, pf);
        break;
      case 2:
        Fmt::template compute<2>(p, k0, kc, act, a.n_in, out, pf);
        break;
      default:
        Fmt::template compute<1>(p, k0, kc, act, a.n_in, out, pf);
        break;
    }
    for (int i = 0; i < nt; ++i) {
      float* y = a.y + (t + i) * a.ldy + rt;
      if (k0 > 0) out[i] = _mm512_add_ps(out[i], _mm512_maskz_loadu_ps(lanes, y));
      _mm512_mask_storeu_ps(y, lanes, out[i]);
    }
  }
}

// Fmt::pack(row, k0, kc, codes, p, r) writes the codes of elements
// [k0, k0 + kc) of one row and that row's scales into lane r of p.
template <class Fmt>
void run_packed(const MatmulArgs& a, int64_t row0, int64_t row1, int64_t tok0, int64_t tok1) {
  Packed p;
  alignas(64) uint8_t codes[kPR][kKc];
  for (int64_t rt = row0; rt < row1; rt += kPR) {
    const int nr = static_cast<int>(std::min<int64_t>(kPR, row1 - rt));
    const __mmask16 lanes = static_cast<__mmask16>((1u << nr) - 1);
    for (int64_t k0 = 0; k0 < a.n_in; k0 += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, a.n_in - k0);
      if (nr < kPR) std::memset(&p, 0, sizeof(p) - sizeof(p.q));  // scales of absent rows: 0
      for (int r = 0; r < nr; ++r) Fmt::pack(a.w + (rt + r) * a.w_stride, k0, kc, codes[r], p, r);
      for (int r = nr; r < kPR; ++r) std::memset(codes[r], 0, static_cast<size_t>(kc));
      int64_t k = 0;
      for (; k + 16 <= kc / 4; k += 16) interleave16(codes, 4 * k, p.q + k);
      for (; k < kc / 4; ++k)
        for (int r = 0; r < kPR; ++r) p.q[k][r] = load_u32(codes[r] + 4 * k);
      // What the walk packs next: this tile's next slice, or the next tile's first.
      const int64_t steps = (tok1 - tok0 + kPackTok - 1) / kPackTok * (kc / kQK);
      TilePrefetch pf =
          k0 + kc < a.n_in
              ? TilePrefetch(a, rt, row1, k0 + kc, std::min<int64_t>(kKc, a.n_in - k0 - kc), steps)
              : TilePrefetch(a, rt + kPR, row1, 0, std::min<int64_t>(kKc, a.n_in), steps);
      packed_tokens<Fmt>(a, p, rt, lanes, k0, kc, tok0, tok1, pf);
    }
  }
}

// The same walk over repacked weights (tensor/row_tiles.h): a group of 16
// rows is already a tile, so Fmt::pack_group(gb, n_blocks, p) fills p from
// the group's blocks [k0, k0 + kc) at gb with no transpose; Fmt::kGroupBytes
// is one group block (Fmt::kBlock elements of 16 rows). row0 is a multiple
// of 16; rows past the matrix are zero in the copy, so their lanes are 0.
template <class Fmt>
void run_packed_groups(const MatmulArgs& a, int64_t row0, int64_t row1, int64_t tok0,
                       int64_t tok1) {
  Packed p;
  const size_t group_bytes = static_cast<size_t>(kPR) * a.w_stride;
  const auto at = [&](int64_t rt, int64_t k0) {
    return a.w + static_cast<size_t>(rt / kPR) * group_bytes +
           static_cast<size_t>(k0 / Fmt::kBlock) * Fmt::kGroupBytes;
  };
  for (int64_t rt = row0; rt < row1; rt += kPR) {
    const int nr = static_cast<int>(std::min<int64_t>(kPR, row1 - rt));
    const __mmask16 lanes = static_cast<__mmask16>((1u << nr) - 1);
    for (int64_t k0 = 0; k0 < a.n_in; k0 += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, a.n_in - k0);
      Fmt::pack_group(at(rt, k0), kc / Fmt::kBlock, p);
      // What the walk packs next: this group's next slice, or the next group's first.
      const int64_t steps = (tok1 - tok0 + kPackTok - 1) / kPackTok * (kc / kQK);
      int64_t next_rt = rt, next_k0 = k0 + kc;
      if (next_k0 >= a.n_in) next_rt += kPR, next_k0 = 0;
      const int64_t next_kc = std::min<int64_t>(kKc, a.n_in - next_k0);
      TilePrefetch pf =
          next_rt < row1
              ? TilePrefetch::contiguous(
                    at(next_rt, next_k0),
                    static_cast<uint64_t>(next_kc / Fmt::kBlock) * Fmt::kGroupBytes, steps)
              : TilePrefetch();
      packed_tokens<Fmt>(a, p, rt, lanes, k0, kc, tok0, tok1, pf);
    }
  }
}

#endif  // SUSTAIN_VNNI
}  // namespace sustain::kernels::cpu::HWY_NAMESPACE
SUSTAIN_SIMD_END();

#endif  // include guard

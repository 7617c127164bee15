// The f32 inner loops of the attention kernel over rows read by a row reader
// (attend_rows-inl.h) or staged to f32: scores = scale · q · k four keys at a
// time, o += p · V with accumulators in registers, and (targets without the
// AVX-512 VNNI paths) Q8_0 V read in place with its block scales folded into
// the softmax weights. Every target runs these for F32 / F16 / BF16 rows.

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_FLOAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_FLOAT_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_FLOAT_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_FLOAT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "attention/kernel.h"
#include "tensor/blocks.h"

#include "hwy/highway.h"

#include "attention/attend_target-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if SUSTAIN_ATTN_TILED
// Halves a vector of lanes until one 128-bit block of 4 lanes is left,
// adding the halves.
template <class D, class V>
HWY_INLINE auto SumBlocks(D d, V v) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return SumBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    return v;
  }
}

// [sum(a), sum(b), sum(c), sum(e)] as a 4-lane vector: a transpose-and-add
// that costs ~13 instructions instead of four full horizontal reductions.
template <class D, class V>
HWY_INLINE auto Sum4(D d, V a, V b, V c, V e) {
  const hn::Repartition<uint64_t, D> d64;
  const V ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const V ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const V sums = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, ab64, ce64)),
                         hn::BitCast(d, hn::InterleaveUpper(d64, ab64, ce64)));
  return SumBlocks(d, sums);
}
#endif

// scores[r][j] = scale · q_r · k_j for j < n. Four keys at a time (4·R
// independent accumulators), each K vector converted once for all rows.
// kCursor: step `next` (the next unit's lines, LineCursor) two lines per
// vector of each K row read.
template <int R, class KF, bool kCursor = false, class D>
HWY_INLINE void ScoreRows(D d, const float* const* q, const uint8_t* krows, size_t kstride, int n,
                          int dk, float scale, float* const* scores, const Prefetch& pf,
                          LineCursor* next = nullptr) {
  const size_t N = hn::Lanes(d);
  int j = 0;
#if SUSTAIN_ATTN_TILED
  if constexpr (hn::MaxLanes(D()) >= 4) {
    const hn::CappedTag<float, 4> d4;
    const auto vscale = hn::Set(d4, scale);
    // Keys [j, j + m) of a group of four (m < 4 only for the last: zero
    // vectors for the missing keys). Sum4's lane i sums accumulator i
    // alone, so a key's score has the same bits whatever the tile's length.
    // (The last 1-3 keys were scored one by one, summed another way, and a
    // block's shorter rows, whose tile runs to the longest row, scored
    // their last keys unlike alone: batch invariance, attention.cc.)
    const auto group = [&](int m, float* const* out) {
      pf.rows(j, m);
      const uint8_t* k0 = krows + j * kstride;
      hn::Vec<D> a0[R], a1[R], a2[R], a3[R];
      for (int r = 0; r < R; ++r) a0[r] = a1[r] = a2[r] = a3[r] = hn::Zero(d);
      for (size_t c = 0; c < size_t(dk); c += N) {
        if constexpr (kCursor) {
          next->step();
          next->step();
        }
        const auto x0 = KF::Load(d, k0, c);
        const auto x1 = m > 1 ? KF::Load(d, k0 + kstride, c) : hn::Zero(d);
        const auto x2 = m > 2 ? KF::Load(d, k0 + 2 * kstride, c) : hn::Zero(d);
        const auto x3 = m > 3 ? KF::Load(d, k0 + 3 * kstride, c) : hn::Zero(d);
        for (int r = 0; r < R; ++r) {
          const auto qv = hn::LoadU(d, q[r] + c);
          a0[r] = hn::MulAdd(qv, x0, a0[r]);
          a1[r] = hn::MulAdd(qv, x1, a1[r]);
          a2[r] = hn::MulAdd(qv, x2, a2[r]);
          a3[r] = hn::MulAdd(qv, x3, a3[r]);
        }
      }
      for (int r = 0; r < R; ++r)
        hn::StoreU(hn::Mul(Sum4(d, a0[r], a1[r], a2[r], a3[r]), vscale), d4, out[r]);
    };
    float* dst[R];
    for (; j + 4 <= n; j += 4) {
      for (int r = 0; r < R; ++r) dst[r] = scores[r] + j;
      group(4, dst);
    }
    if (j < n) {
      alignas(16) float four[R][4];
      for (int r = 0; r < R; ++r) dst[r] = four[r];
      group(n - j, dst);
      for (int r = 0; r < R; ++r)
        for (int k = 0; k < n - j; ++k) scores[r][j + k] = four[r][k];
      j = n;
    }
  }
#endif
  for (; j < n; ++j) {
    pf.rows(j, 1);
    const uint8_t* k0 = krows + j * kstride;
    for (int r = 0; r < R; ++r) {
      auto acc = hn::Zero(d);
      for (size_t c = 0; c < size_t(dk); c += N)
        acc = hn::MulAdd(hn::LoadU(d, q[r] + c), KF::Load(d, k0, c), acc);
      scores[r][j] = hn::GetLane(hn::SumOfLanes(d, acc)) * scale;
    }
  }
}

// o_r[c .. c + CC·N) += sum_j p_r[j] v_j[c ..] for j < n, accumulators in registers.
template <int R, int CC, class VF, bool kCursor, class D>
HWY_INLINE void AccumulatePass(D d, const float* const* p, const uint8_t* vrows, size_t vstride,
                               int n, size_t c, float* const* o, LineCursor* next) {
  const size_t N = hn::Lanes(d);
#if HWY_HAVE_SCALABLE
  auto acc = hn::LoadU(d, o[0] + c);
  for (int j = 0; j < n; ++j)
    acc = hn::MulAdd(hn::Set(d, p[0][j]), VF::Load(d, vrows + j * vstride, c), acc);
  hn::StoreU(acc, d, o[0] + c);
#else
  hn::Vec<D> acc[R][CC];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < CC; ++k) acc[r][k] = hn::LoadU(d, o[r] + c + k * N);
  for (int j = 0; j < n; ++j) {
    if constexpr (kCursor) {
      next->step();
      next->step();
    }
    const uint8_t* vr = vrows + j * vstride;
    hn::Vec<D> v[CC];
    for (int k = 0; k < CC; ++k) v[k] = VF::Load(d, vr, c + k * N);
    for (int r = 0; r < R; ++r) {
      const auto pr = hn::Set(d, p[r][j]);
      for (int k = 0; k < CC; ++k) acc[r][k] = hn::MulAdd(pr, v[k], acc[r][k]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < CC; ++k) hn::StoreU(acc[r][k], d, o[r] + c + k * N);
#endif
}

// kCursor: as ScoreRows', two lines per V row a pass reads.
template <int R, class VF, bool kCursor = false, class D>
HWY_INLINE void AccumulateRows(D d, const float* const* p, const uint8_t* vrows, size_t vstride,
                               int n, int dv, float* const* o, LineCursor* next = nullptr) {
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  for (; c + kVChunks * N <= size_t(dv); c += kVChunks * N)
    AccumulatePass<R, kVChunks, VF, kCursor>(d, p, vrows, vstride, n, c, o, next);
  for (; c < size_t(dv); c += N)
    AccumulatePass<R, 1, VF, kCursor>(d, p, vrows, vstride, n, c, o, next);
}

// o_r += sum_j p_r[j] v_j for j < n with Q8_0 V read in place: the int8
// codes are converted to f32 and multiplied by p_r[j] × the block's scale,
// formed a tile at a time in pd ([block][row][key]: dv / 32 × R × kTile
// floats, then dv / 32 × kTile for the scales), so no per-element
// dequantization. kAligned: c is a multiple of 32 and the vector count is
// compile-time, so every pd address is one pointer plus a constant.
template <int R, int CC, bool kAligned, class D>
HWY_INLINE void AccumulatePassQ8(D d, const float* pd, const uint8_t* vrows, size_t vstride,
                                 int n, size_t c, float* const* o) {
  const size_t N = hn::Lanes(d);
  const hn::Rebind<int8_t, D> d8;
  const hn::Rebind<int32_t, D> d32;
  hn::Vec<D> acc[R][CC];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < CC; ++k) acc[r][k] = hn::LoadU(d, o[r] + c + k * N);
  const float* base = kAligned ? pd + (c / kQK) * R * kTile : pd;
  for (int j = 0; j < n; ++j) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(vrows + j * vstride);
    hn::Vec<D> v[CC];
    for (int k = 0; k < CC; ++k) {
      const size_t e = c + k * N;
      v[k] = hn::ConvertTo(d, hn::PromoteTo(d32, hn::LoadU(d8, blk[e / kQK].qs + e % kQK)));
    }
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < CC; ++k) {
        size_t b;
        if constexpr (kAligned)
          b = k * hn::MaxLanes(D()) / kQK;
        else
          b = (c + k * N) / kQK;
        const auto pr = hn::Set(d, base[(b * R + r) * kTile + j]);
        acc[r][k] = hn::MulAdd(pr, v[k], acc[r][k]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < CC; ++k) hn::StoreU(acc[r][k], d, o[r] + c + k * N);
}

template <int R, class D>
HWY_INLINE void AccumulateRowsQ8(D d, const float* const* p, const uint8_t* vrows, size_t vstride,
                                 int n, int dv, float* const* o, float* pd) {
  const size_t N = hn::Lanes(d);
  const int nb = dv / kQK;
  // The blocks' f16 scales gathered ([block][key]), then converted in vectors.
  auto* vh = reinterpret_cast<uint16_t*>(pd + size_t(R) * nb * kTile);
  for (int j = 0; j < n; ++j) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(vrows + j * vstride);
    for (int b = 0; b < nb; ++b) vh[b * kTile + j] = blk[b].d;
  }
  for (int b = 0; b < nb; ++b) std::fill(vh + b * kTile + n, vh + (b + 1) * kTile, uint16_t(0));
  const hn::CappedTag<float, kTile> dt;
  const hn::Rebind<hwy::float16_t, decltype(dt)> dth;
  const size_t NT = hn::Lanes(dt);
  for (int b = 0; b < nb; ++b)
    for (size_t j = 0; j < size_t(kTile); j += NT) {
      const auto vd = hn::PromoteTo(
          dt, hn::LoadU(dth, reinterpret_cast<const hwy::float16_t*>(vh + b * kTile + j)));
      for (int r = 0; r < R; ++r)
        hn::StoreU(hn::Mul(hn::LoadU(dt, p[r] + j), vd), dt, pd + (size_t(b) * R + r) * kTile + j);
    }
  size_t c = 0;
#if !HWY_HAVE_SCALABLE
  constexpr size_t kPass = kVChunks * hn::MaxLanes(D());
  if (N == hn::MaxLanes(D())) {
    for (; c + kPass <= size_t(dv); c += kPass)
      AccumulatePassQ8<R, kVChunks, kPass % kQK == 0>(d, pd, vrows, vstride, n, c, o);
  }
#endif
  for (; c < size_t(dv); c += N) AccumulatePassQ8<R, 1, false>(d, pd, vrows, vstride, n, c, o);
}

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_FLOAT_INL_H_

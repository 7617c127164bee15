// The attention work-item kernel (kernel.h) in Highway, compiled for every
// target and picked at run time. K and V rows stored as F32, F16, BF16,
// FP8_E4M3, Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 are read in place and converted
// in registers (on every target, AVX2 included). On AVX-512 VNNI the block
// formats go integer: K dotted with a once-quantized int8 q (vpdpbusd), V
// accumulated as codes × integer softmax weights; pages in the tiled layout
// (kv/tiled.h) by the 16-keys-per-vector kernels of attend_tiled-inl.h, on
// other targets put back into rows a tile at a time. Other formats (and
// mixed K/V formats' V) are converted a tile of rows at a time into a small
// f32 buffer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/kernel.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"

// Highway's dynamic dispatch re-includes this file once per target; the
// order below is required (clang-format must not sort it).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attend_kernel.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "attention/attend_target-inl.h"
#include "attention/attend_vnni-inl.h"
#include "attention/attend_tiled-inl.h"
#include "attention/attend_fp8-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How K / V rows are read: Load(d, row, c) returns elements [c, c + Lanes)
// of the row at `row` as f32. F32Rows also reads staged tiles.
struct F32Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + c);
  }
};
struct F16Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + c));
  }
};
struct BF16Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const hn::Rebind<hwy::bfloat16_t, D> db;
    return hn::PromoteTo(d, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(row) + c));
  }
};
// Q8_0 dequantized in registers: int8 lanes widened and scaled by their
// block's f16 scale (needs Lanes <= 32, so a vector never spans two blocks).
struct Q8Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const hn::Rebind<int8_t, D> d8;
    const hn::Rebind<int32_t, D> d32;
    const hn::Rebind<uint16_t, D> du16;
    const hn::Rebind<hwy::float16_t, D> dh;
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + c / kQK;
    const auto scale = hn::PromoteTo(d, hn::BitCast(dh, hn::Set(du16, b->d)));
    const auto qi = hn::PromoteTo(d32, hn::LoadU(d8, b->qs + c % kQK));
    return hn::Mul(hn::ConvertTo(d, qi), scale);
  }
};

// The f16 scale `h` broadcast to every lane as f32 (F16C / vector convert,
// not the scalar f16_to_f32).
template <class D>
HWY_INLINE hn::Vec<D> F16Scale(D d, uint16_t h) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::BitCast(dh, hn::Set(du16, h)));
}

// The 4-bit codes of elements [e, e + Lanes) of a 32-element block (e % 32
// + Lanes <= 16 or e >= 16 within the block: a vector never spans the low
// and high nibble halves) as u32 lanes: low nibbles hold elements 0..15,
// high nibbles 16..31 (tensor/quant_legacy.cc unpack_codes).
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<uint32_t, D>> Nibbles(D, const uint8_t* qs, size_t e) {
  const hn::Rebind<uint8_t, D> du8;
  const hn::Rebind<uint32_t, D> du32;
  auto x = hn::PromoteTo(du32, hn::LoadU(du8, qs + (e & 15)));
  if (e >= 16) x = hn::ShiftRight<4>(x);
  return hn::And(x, hn::Set(du32, 15u));
}
// Bit 4 of elements [e, e + Lanes) of a Q5 block: bit j of the block's qh.
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<uint32_t, D>> HighBits(D, const uint8_t* qh, size_t e) {
  const hn::Rebind<uint32_t, D> du32;
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  const auto v = hn::Shr(hn::Set(du32, bits >> e), hn::Iota(du32, 0));
  return hn::ShiftLeft<4>(hn::And(v, hn::Set(du32, 1u)));
}
template <class D>
HWY_INLINE hn::Vec<D> CodesToF32(D d, hn::Vec<hn::Rebind<uint32_t, D>> u) {
  const hn::Rebind<int32_t, D> di32;
  return hn::ConvertTo(d, hn::BitCast(di32, u));
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 dequantized in registers (Lanes <= 16).
struct Q4_0Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + c / kQK;
    const auto sc = F16Scale(d, b->d);
    const auto x = CodesToF32(d, Nibbles(d, b->qs, c % kQK));
    return hn::Mul(hn::Sub(x, hn::Set(d, 8.0f)), sc);
  }
};
struct Q4_1Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(row) + c / kQK;
    const auto x = CodesToF32(d, Nibbles(d, b->qs, c % kQK));
    return hn::MulAdd(x, F16Scale(d, b->d), F16Scale(d, b->m));
  }
};
struct Q5_0Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const auto* b = reinterpret_cast<const BlockQ5_0*>(row) + c / kQK;
    const size_t e = c % kQK;
    const auto x = CodesToF32(d, hn::Or(Nibbles(d, b->qs, e), HighBits(d, b->qh, e)));
    return hn::Mul(hn::Sub(x, hn::Set(d, 16.0f)), F16Scale(d, b->d));
  }
};
struct Q5_1Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const auto* b = reinterpret_cast<const BlockQ5_1*>(row) + c / kQK;
    const size_t e = c % kQK;
    const auto x = CodesToF32(d, hn::Or(Nibbles(d, b->qs, e), HighBits(d, b->qh, e)));
    return hn::MulAdd(x, F16Scale(d, b->d), F16Scale(d, b->m));
  }
};
// FP8 E4M3 (bias 7, no infinities, 0x7f / 0xff NaN): the exponent and
// mantissa bits moved into an f32's (e << 23 | m << 20) and scaled by 2^120,
// which also gives subnormals (m · 2^-9) exactly.
struct Fp8Rows {
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t c) {
    const hn::Rebind<uint8_t, D> du8;
    const hn::Rebind<uint32_t, D> du32;
    const auto x = hn::PromoteTo(du32, hn::LoadU(du8, row + c));
    const auto em = hn::And(x, hn::Set(du32, 0x7fu));
    const auto mag = hn::Mul(hn::BitCast(d, hn::ShiftLeft<20>(em)), hn::Set(d, 0x1p120f));
    const auto sign = hn::BitCast(d, hn::ShiftLeft<24>(hn::And(x, hn::Set(du32, 0x80u))));
    const auto v = hn::Or(mag, sign);
    const auto nan = hn::RebindMask(d, hn::Eq(em, hn::Set(du32, 0x7fu)));
    return hn::IfThenElse(nan, hn::Set(d, std::numeric_limits<float>::quiet_NaN()), v);
  }
};

// K / V pages in the tiled layout of a block format (kv/tiled.h), read by
// the VNNI kernels of attend_tiled-inl.h. Elsewhere a tiled tile is first
// put back into rows (kv::untile_row) and read by the format's row reader.
template <QType T>
struct TiledRows {
  static constexpr QType kType = T;
};
template <class RF>
inline constexpr bool kIsTiled = false;
template <QType T>
inline constexpr bool kIsTiled<TiledRows<T>> = true;

// Calls fn(RowsType) for the row reader of `type` (F32Rows for formats
// without one: they are staged through the generic dequantizer).
template <class Fn>
HWY_INLINE void WithRows(QType type, Fn&& fn) {
  switch (type) {
    case QType::F16: return fn(F16Rows());
    case QType::BF16: return fn(BF16Rows());
    case QType::Q8_0: return fn(Q8Rows());
    case QType::Q4_0: return fn(Q4_0Rows());
    case QType::Q4_1: return fn(Q4_1Rows());
    case QType::Q5_0: return fn(Q5_0Rows());
    case QType::Q5_1: return fn(Q5_1Rows());
    case QType::FP8_E4M3: return fn(Fp8Rows());
    default: return fn(F32Rows());
  }
}

// Rows of a format with a row reader converted to f32, n rows of dim.
template <class RF, class D>
void StageWith(D d, const uint8_t* src, size_t row_bytes, int n, int dim, float* dst) {
  const size_t N = hn::Lanes(d);
  for (int j = 0; j < n; ++j)
    for (size_t c = 0; c < size_t(dim); c += N)
      hn::StoreU(RF::Load(d, src + j * row_bytes, c), d, dst + size_t(j) * dim + c);
}

// Converts n rows of `dim` elements of `type` (row_bytes apart) to f32 rows
// of `dim` floats: the tile buffer for formats not read in place.
template <class D>
void StageRows(D d, QType type, const uint8_t* src, size_t row_bytes, int n, int dim, float* dst) {
  const size_t N = hn::Lanes(d);
  if (hn::MaxLanes(d) <= 16 && type != QType::F32) {
    bool done = false;
    WithRows(type, [&](auto rows) {
      using RF = decltype(rows);
      if constexpr (!std::is_same_v<RF, F32Rows>) {
        StageWith<RF>(d, src, row_bytes, n, dim, dst);
        done = true;
      }
    });
    if (done) return;
  }
  if (type == QType::BF16) {
    const hn::Rebind<hwy::bfloat16_t, D> db;
    for (int j = 0; j < n; ++j) {
      const auto* row = reinterpret_cast<const hwy::bfloat16_t*>(src + j * row_bytes);
      for (size_t c = 0; c < size_t(dim); c += N)
        hn::StoreU(hn::PromoteTo(d, hn::LoadU(db, row + c)), d, dst + size_t(j) * dim + c);
    }
    return;
  }
  if (type == QType::Q8_0 && N <= size_t(kQK)) {
    const hn::Rebind<int8_t, D> d8;
    const hn::Rebind<int32_t, D> d32;
    for (int j = 0; j < n; ++j) {
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(src + j * row_bytes);
      float* out = dst + size_t(j) * dim;
      for (int b = 0; b < dim / kQK; ++b) {
        const auto scale = hn::Set(d, f16_to_f32(blocks[b].d));
        for (size_t c = 0; c < size_t(kQK); c += N) {
          const auto qi = hn::PromoteTo(d32, hn::LoadU(d8, blocks[b].qs + c));
          hn::StoreU(hn::Mul(hn::ConvertTo(d, qi), scale), d, out + b * kQK + c);
        }
      }
    }
    return;
  }
  const DequantizeFn deq = qtype_traits(type).dequantize;
  for (int j = 0; j < n; ++j) deq(src + j * row_bytes, dst + size_t(j) * dim, dim);
}

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
template <int R, class KF, class D>
HWY_INLINE void ScoreRows(D d, const float* const* q, const uint8_t* krows, size_t kstride, int n,
                          int dk, float scale, float* const* scores, const Prefetch& pf) {
  const size_t N = hn::Lanes(d);
  int j = 0;
#if SUSTAIN_ATTN_TILED
  if constexpr (hn::MaxLanes(D()) >= 4) {
    const hn::CappedTag<float, 4> d4;
    const auto vscale = hn::Set(d4, scale);
    for (; j + 4 <= n; j += 4) {
      pf.rows(j, 4);
      const uint8_t* k0 = krows + j * kstride;
      hn::Vec<D> a0[R], a1[R], a2[R], a3[R];
      for (int r = 0; r < R; ++r) a0[r] = a1[r] = a2[r] = a3[r] = hn::Zero(d);
      for (size_t c = 0; c < size_t(dk); c += N) {
        const auto x0 = KF::Load(d, k0, c);
        const auto x1 = KF::Load(d, k0 + kstride, c);
        const auto x2 = KF::Load(d, k0 + 2 * kstride, c);
        const auto x3 = KF::Load(d, k0 + 3 * kstride, c);
        for (int r = 0; r < R; ++r) {
          const auto qv = hn::LoadU(d, q[r] + c);
          a0[r] = hn::MulAdd(qv, x0, a0[r]);
          a1[r] = hn::MulAdd(qv, x1, a1[r]);
          a2[r] = hn::MulAdd(qv, x2, a2[r]);
          a3[r] = hn::MulAdd(qv, x3, a3[r]);
        }
      }
      for (int r = 0; r < R; ++r)
        hn::StoreU(hn::Mul(Sum4(d, a0[r], a1[r], a2[r], a3[r]), vscale), d4, scores[r] + j);
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
template <int R, int CC, class VF, class D>
HWY_INLINE void AccumulatePass(D d, const float* const* p, const uint8_t* vrows, size_t vstride,
                               int n, size_t c, float* const* o) {
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

template <int R, class VF, class D>
HWY_INLINE void AccumulateRows(D d, const float* const* p, const uint8_t* vrows, size_t vstride,
                               int n, int dv, float* const* o) {
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  for (; c + kVChunks * N <= size_t(dv); c += kVChunks * N)
    AccumulatePass<R, kVChunks, VF>(d, p, vrows, vstride, n, c, o);
  for (; c < size_t(dv); c += N) AccumulatePass<R, 1, VF>(d, p, vrows, vstride, n, c, o);
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

// Tiled FP8 K is dotted with a bf16 copy of q; the block formats with an
// int8 copy (VNNI targets).
template <class KF>
inline constexpr bool kBf16Query = false;
template <>
inline constexpr bool kBf16Query<TiledRows<QType::FP8_E4M3>> = true;
template <class KF>
inline constexpr bool kIntQuery =
    (kIsTiled<KF> && !kBf16Query<KF>) || std::is_same_v<KF, Q8Rows> ||
    std::is_same_v<KF, Q4_0Rows> || std::is_same_v<KF, Q4_1Rows> || std::is_same_v<KF, Q5_0Rows> ||
    std::is_same_v<KF, Q5_1Rows>;

// exp(x) for the softmax's x = score - running maximum (x <= 0, -inf for a
// masked key), in 15 vector ops where hn::Exp takes about 27 (a two-part
// ln 2 reduction, 2^q split in two factors and a range check, for any x):
// softmax was ~15% of decode time on the integer K/V paths. 2^t with
// t = x·log2(e), split into n = round(t) and f = t - n in [-0.5, 0.5]; 2^f
// by its Taylor polynomial of degree 7 (truncation < 5e-9 relative), 2^n
// put into the exponent bits. t is first raised to at least -127, where
// those bits are 0: results below ~1e-38 (and a masked key's) come out as
// exactly +0. Rounding t in f32 costs |x|·6e-8 relative, i.e. at most
// 2.2e-8 of the tile's largest term (1), below the scores' own rounding. On
// x86 a NaN score stays NaN (vmaxps returns its second operand, t, then).
//
// round(t) and its integer come from one add: t + 1.5·2^23 rounds t to an
// integer in the float's low mantissa bits (to nearest even, as Round
// would), and the float's bits are then 0x4B400000 + n; this replaces
// Round and a float-to-int conversion (which Highway makes saturating, at
// four more ops) by three adds.
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto t = hn::Max(hn::Set(d, -127.0f), hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  const auto magic = hn::Set(d, 12582912.0f);  // 1.5 · 2^23
  const auto shifted = hn::Add(t, magic);
  const auto n = hn::Sub(shifted, magic);
  const auto f = hn::Sub(t, n);
  auto y = hn::Set(d, 1.5252733804059841e-05f);
  y = hn::MulAdd(y, f, hn::Set(d, 1.5403530393381608e-04f));
  y = hn::MulAdd(y, f, hn::Set(d, 1.3333558146428443e-03f));
  y = hn::MulAdd(y, f, hn::Set(d, 9.6181291076284772e-03f));
  y = hn::MulAdd(y, f, hn::Set(d, 5.5504108664821580e-02f));
  y = hn::MulAdd(y, f, hn::Set(d, 2.4022650695910071e-01f));
  y = hn::MulAdd(y, f, hn::Set(d, 6.9314718055994531e-01f));
  y = hn::MulAdd(y, f, hn::Set(d, 1.0f));
  const auto scale = hn::BitCast(
      d, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, shifted), hn::Set(di, 127 - 0x4B400000))));
  return hn::Mul(y, scale);
}

// The online-softmax update of one row for a tile whose scores (masked
// entries -inf, at least one visible) are in s[0, NK): s becomes the
// probabilities exp(s - m_new); l and o are rescaled when the maximum grows.
// l is kept as lv[0, Lanes) partial sums (kLsumLanes floats, Lanes of a
// kTile-capped vector whatever NK).
template <int NK, class D>
HWY_INLINE void SoftmaxRow(D d, float* s, float& m, float* lv, float* o, int dv) {
  const hn::CappedTag<float, kTile> dt;
  const size_t NT = hn::Lanes(dt);
  auto vmax = hn::LoadU(dt, s);
  for (size_t j = NT; j < size_t(NK); j += NT) vmax = hn::Max(vmax, hn::LoadU(dt, s + j));
  const float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(dt, vmax)));
  const auto vm = hn::Set(dt, m_new);
  auto vsum = hn::Zero(dt);
  for (size_t j = 0; j < size_t(NK); j += NT) {
    const auto e = ExpNonPositive(dt, hn::Sub(hn::LoadU(dt, s + j), vm));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, dt, s + j);
  }
  // 0 on the first visible tile (m = -inf); 1 without a call to exp when the
  // maximum stays (most tiles of a long context).
  const float corr = m_new == m ? 1.0f : std::exp(m - m_new);
  hn::StoreU(hn::MulAdd(hn::LoadU(dt, lv), hn::Set(dt, corr), vsum), dt, lv);
  m = m_new;
  if (corr != 1.0f) {
    const size_t N = hn::Lanes(d);
    const auto vc = hn::Set(d, corr);
    for (size_t c = 0; c < size_t(dv); c += N)
      hn::StoreU(hn::Mul(hn::LoadU(d, o + c), vc), d, o + c);
  }
}

// One tile of up to NK keys for a group of R rows: scores, softmax update,
// o += p · V. q[k]: row k's query; idx[k]: its state row; nv[k]: keys of the
// tile it may see (0..n). krows / vrows: the tile's rows (row readers);
// kgroups / vgroups: its 16-key groups (the tiled kernels).
// qbuf: the item's int8 queries where K is Q8_0 on a VNNI target (else
// unused); vwork: room for AccumulateRowsQ8's pd where V is Q8_0 in place.
template <int R, int NK, class KF, class VF, class D>
HWY_INLINE void TileRows(D d, const Item& it, const float* const* q, const int* idx, const int* nv,
                         const uint8_t* krows, size_t kstride, const uint8_t* vrows, size_t vstride,
                         const uint8_t* const* kgroups, const uint8_t* const* vgroups,
                         float* scores, const Prefetch& pf, float* qbuf, float* vwork,
                         float* lsum, LineCursor& next, bool touch) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float* s[R];
  float* o[R];
  int n_max = 0;
  for (int k = 0; k < R; ++k) {
    s[k] = scores + size_t(k) * kTileMax;
    o[k] = it.o + size_t(idx[k]) * it.dv;
    n_max = std::max(n_max, nv[k]);
  }
#if SUSTAIN_ATTN_VNNI
  if constexpr (kBf16Query<KF>) {
    const uint16_t* qb[R];
    for (int k = 0; k < R; ++k)
      qb[k] = reinterpret_cast<const uint16_t*>(qbuf + size_t(idx[k]) * int_query_floats(it.dk));
    ScoreRowsFp8Tiled<R>(qb, kgroups, n_max, it.dk, s, next, touch);
  } else if constexpr (kIntQuery<KF>) {
    Q8Query qq[R];
    for (int k = 0; k < R; ++k)
      qq[k] = Q8QueryAt(qbuf + size_t(idx[k]) * int_query_floats(it.dk), it.dk);
    if constexpr (kIsTiled<KF>)
      ScoreRowsTiled<R, KF::kType>(qq, kgroups, n_max, it.dk, s, pf, next, touch);
    else if constexpr (std::is_same_v<KF, Q8Rows>)
      ScoreRowsQ8<R>(qq, krows, kstride, n_max, it.dk, s, pf);
    else if constexpr (std::is_same_v<KF, Q4_0Rows>)
      ScoreRowsQ4<R, BlockQ4_0, 8, false, false>(qq, krows, kstride, n_max, it.dk, s, pf);
    else if constexpr (std::is_same_v<KF, Q4_1Rows>)
      ScoreRowsQ4<R, BlockQ4_1, 0, true, false>(qq, krows, kstride, n_max, it.dk, s, pf);
    else if constexpr (std::is_same_v<KF, Q5_0Rows>)
      ScoreRowsQ4<R, BlockQ5_0, 16, false, true>(qq, krows, kstride, n_max, it.dk, s, pf);
    else
      ScoreRowsQ4<R, BlockQ5_1, 0, true, true>(qq, krows, kstride, n_max, it.dk, s, pf);
  } else
#endif
  {
    ScoreRows<R, KF>(d, q, krows, kstride, n_max, it.dk, it.scale, s, pf);
  }
  for (int k = 0; k < R; ++k) {
    std::fill(s[k] + nv[k], s[k] + NK, kNegInf);
    if (nv[k] > 0)
      SoftmaxRow<NK>(d, s[k], it.m[idx[k]], lsum + size_t(idx[k]) * kLsumLanes, o[k], it.dv);
    // A row that sees nothing here keeps its state; its p stay 0 below.
    else
      std::fill(s[k], s[k] + NK, 0.0f);
  }
#if SUSTAIN_ATTN_VNNI
  if constexpr (std::is_same_v<VF, TiledRows<QType::FP8_E4M3>>)
    AccumulateRowsFp8Tiled<R>(s, vgroups, n_max, it.dv, o, vwork, next, touch);
  else if constexpr (kIsTiled<VF>)
    AccumulateRowsTiled<R, VF::kType>(s, vgroups, n_max, it.dv, o, vwork, next, touch);
  else if constexpr (std::is_same_v<VF, Q8Rows>)
    AccumulateRowsQ8Int<R>(s, vrows, vstride, n_max, it.dv, o, vwork);
  else if constexpr (std::is_same_v<VF, Q4_0Rows>)
    AccumulateRowsQ4Int<R, BlockQ4_0, 8, false, false>(s, vrows, vstride, n_max, it.dv, o, vwork);
  else if constexpr (std::is_same_v<VF, Q4_1Rows>)
    AccumulateRowsQ4Int<R, BlockQ4_1, 0, true, false>(s, vrows, vstride, n_max, it.dv, o, vwork);
  else if constexpr (std::is_same_v<VF, Q5_0Rows>)
    AccumulateRowsQ4Int<R, BlockQ5_0, 16, false, true>(s, vrows, vstride, n_max, it.dv, o, vwork);
  else if constexpr (std::is_same_v<VF, Q5_1Rows>)
    AccumulateRowsQ4Int<R, BlockQ5_1, 0, true, true>(s, vrows, vstride, n_max, it.dv, o, vwork);
  else
#else
  if constexpr (std::is_same_v<VF, Q8Rows>)
    AccumulateRowsQ8<R>(d, s, vrows, vstride, n_max, it.dv, o, vwork);
  else
#endif
    AccumulateRows<R, VF>(d, s, vrows, vstride, n_max, it.dv, o);
}

// KF / VF: how K / V rows are read (F16Rows, Q8Rows in place; F32Rows for
// F32 in place or a staged tile of any other format).
template <class D, class KF, class VF>
void RunItemT(D d, const Item& it) {
  const kv::KvCache& cache = *it.cache;
  const kv::KvGeometry& g = cache.geometry();
  const int pt = g.page_tokens;
  const int head_rows = it.n_queries * it.group;  // state rows per KV head
  const int rows = head_rows * (it.head_end - it.head_begin);
  const int dk = it.dk, dv = it.dv;
  const size_t krb = g.k_row_bytes(), vrb = g.v_row_bytes();
  const bool stage_k = std::is_same_v<KF, F32Rows> && g.k_type != QType::F32;
  const bool stage_v = std::is_same_v<VF, F32Rows> && g.v_type != QType::F32;
  // Tiled pages read by a row reader are put back into rows a tile at a time.
  const bool untile_k = g.k_tiled() && !kIsTiled<KF>;
  const bool untile_v = g.v_tiled() && !kIsTiled<VF>;

  float* scores = it.work;  // [kScoreRows][kTileMax]
  float* kbuf = scores + round_up_floats(size_t(kScoreRows) * kTileMax);
  float* vbuf = kbuf + round_up_floats(size_t(kTile) * dk);
  auto* ubuf = reinterpret_cast<uint8_t*>(vbuf + round_up_floats(size_t(kTile) * dv));
  float* qbuf = vbuf + round_up_floats(size_t(kTile) * dv) + untiled_floats(dk, dv);
  float* lsum = qbuf + round_up_floats(size_t(rows) * int_query_floats(dk));

  for (int r = 0; r < rows; ++r) {
    it.m[r] = -std::numeric_limits<float>::infinity();
    it.l[r] = 0.0f;
  }
  std::fill(lsum, lsum + size_t(rows) * kLsumLanes, 0.0f);
  std::fill(it.o, it.o + size_t(rows) * dv, 0.0f);
#if SUSTAIN_ATTN_VNNI
  // q quantized once per item, not per tile (state row order, as below).
  if constexpr (kIntQuery<KF> || kBf16Query<KF>) {
    for (int hk = it.head_begin; hk < it.head_end; ++hk)
      for (int x = 0; x < head_rows; ++x) {
        const int b = x / it.group, i = x % it.group;
        const float* qr = it.q + b * it.q_stride + (size_t(hk) * it.group + i) * dk;
        float* row = qbuf + size_t((hk - it.head_begin) * head_rows + x) * int_query_floats(dk);
        if constexpr (kBf16Query<KF>)
          Bf16Query(qr, dk, it.scale, row);
        else
          QuantizeQuery(qr, dk, it.scale, row);
      }
  }
#endif

  // Where both K and V are read by the tiled kernels, a tile is up to
  // kTileTiled keys in 16-key groups, which may lie on different pages (item
  // boundaries are page-aligned and tiled pages hold whole groups, so every
  // group starts at a group boundary), and each (tile, KV head) unit asks
  // for the next unit's lines as it loads its own (LineCursor). Otherwise a
  // tile is up to kTile rows of one page, its lines asked for at its start.
  constexpr bool kGroupTiles = kIsTiled<KF> && kIsTiled<VF>;
  constexpr int NK = kGroupTiles ? kTileTiled : kTile;
  constexpr int kMaxGroups = kTileTiled / kv::kTileKeys;
  for (int64_t key = it.k_begin; key < it.k_end;) {
    const int32_t page = it.pages[key / pt];
    const int slot = static_cast<int>(key % pt);
    const int64_t left = it.k_end - key;
    const int n = static_cast<int>(kGroupTiles ? std::min<int64_t>(NK, left)
                                               : std::min<int64_t>({NK, pt - slot, left}));
    // The page and slot of each 16-key group, for the tiled kernels.
    int32_t group_page[kMaxGroups];
    int group_slot[kMaxGroups];
    const int n_groups = kIsTiled<KF> || kIsTiled<VF> ? (n + kv::kTileKeys - 1) / kv::kTileKeys : 0;
    for (int g = 0; g < n_groups; ++g) {
      const int64_t kg = key + int64_t(g) * kv::kTileKeys;
      group_page[g] = it.pages[kg / pt];
      group_slot[g] = static_cast<int>(kg % pt);
    }
    // Where the next tile is on a page that does not follow this tile's last
    // in memory, its rows are prefetched while this tile is computed: the
    // hardware prefetcher follows a contiguous stream, not a jump.
    const int32_t last_page = it.pages[(key + n - 1) / pt];
    int32_t jump_page = -1;
    int jump_slot = 0, jump_n = 0;
    // (The group tiles' cursor covers the next tile wherever it is.)
    if (const int64_t next = key + n; !kGroupTiles && next < it.k_end &&
                                      it.pages[next / pt] != last_page &&
                                      it.pages[next / pt] != last_page + 1) {
      jump_page = it.pages[next / pt];
      jump_slot = static_cast<int>(next % pt);
      jump_n = static_cast<int>(std::min<int64_t>({NK, pt - jump_slot, it.k_end - next}));
    }

    for (int hk = it.head_begin; hk < it.head_end; ++hk) {
      const uint8_t* ksrc = cache.k_block(page, it.layer, hk) + slot * krb;
      const uint8_t* vsrc = cache.v_block(page, it.layer, hk) + slot * vrb;
      const uint8_t* kgroups[kMaxGroups];
      const uint8_t* vgroups[kMaxGroups];
      for (int g = 0; g < n_groups; ++g) {
        if constexpr (kIsTiled<KF>)
          kgroups[g] = cache.k_block(group_page[g], it.layer, hk) + group_slot[g] * krb;
        if constexpr (kIsTiled<VF>)
          vgroups[g] = cache.v_block(group_page[g], it.layer, hk) + group_slot[g] * vrb;
      }
      // The next unit's lines: this tile's next head, or the next tile's
      // first head.
      const bool covered = kGroupTiles && (key != it.k_begin || hk != it.head_begin);
      LineCursor next;
      if constexpr (kGroupTiles) {
        int64_t nkey = key;
        int nhk = hk + 1;
        if (nhk == it.head_end) {
          nkey = key + n;
          nhk = it.head_begin;
        }
        if (nkey < it.k_end) {
          const int nn = static_cast<int>(std::min<int64_t>(NK, it.k_end - nkey));
          const int ng = (nn + kv::kTileKeys - 1) / kv::kTileKeys;
          const size_t kbytes = size_t(kv::kTileKeys) * krb, vbytes = size_t(kv::kTileKeys) * vrb;
          // The same tile's groups where only the head changes.
          int32_t np_next[kMaxGroups];
          int ns_next[kMaxGroups];
          const int32_t* np = group_page;
          const int* ns = group_slot;
          if (nkey != key) {
            for (int gi = 0; gi < ng; ++gi) {
              const int64_t kg = nkey + int64_t(gi) * kv::kTileKeys;
              np_next[gi] = it.pages[kg / pt];
              ns_next[gi] = static_cast<int>(kg % pt);
            }
            np = np_next;
            ns = ns_next;
          }
          for (int gi = 0; gi < ng; ++gi)
            next.add(cache.k_block(np[gi], it.layer, nhk) + ns[gi] * krb, kbytes);
          for (int gi = 0; gi < ng; ++gi)
            next.add(cache.v_block(np[gi], it.layer, nhk) + ns[gi] * vrb, vbytes);
        }
      }
      Prefetch pf;
      if (jump_page >= 0) {
        pf.k = cache.k_block(jump_page, it.layer, hk) + jump_slot * krb;
        pf.v = cache.v_block(jump_page, it.layer, hk) + jump_slot * vrb;
        pf.k_row = krb;
        pf.v_row = vrb;
        pf.n = jump_n;
      }
      size_t kstride = krb, vstride = vrb;
      if (untile_k) {
        const uint8_t* block = cache.k_block(page, it.layer, hk);
        for (int j = 0; j < n; ++j)
          kv::untile_row(g.k_type, kv::TileRole::kKey, dk, block, slot + j, ubuf + j * krb);
        ksrc = ubuf;
      }
      if (untile_v) {
        const uint8_t* block = cache.v_block(page, it.layer, hk);
        // After the untiled K rows, where K is untiled too (untiled_floats
        // holds block-format K and V; a K read in place, such as F16, has
        // rows of any size and takes no room here).
        uint8_t* dst = ubuf + (untile_k ? size_t(kTile) * krb : 0);
        for (int j = 0; j < n; ++j)
          kv::untile_row(g.v_type, kv::TileRole::kValue, dv, block, slot + j, dst + j * vrb);
        vsrc = dst;
      }
      if (stage_k) {
        StageRows(d, g.k_type, ksrc, krb, n, dk, kbuf);
        ksrc = reinterpret_cast<const uint8_t*>(kbuf);
        kstride = sizeof(float) * dk;
      }
      if (stage_v) {
        StageRows(d, g.v_type, vsrc, vrb, n, dv, vbuf);
        vsrc = reinterpret_cast<const uint8_t*>(vbuf);
        vstride = sizeof(float) * dv;
      }

      // This head's rows (block queries × group heads) in groups of up to
      // kMaxGroupRows; a group may span queries.
      const int row0 = (hk - it.head_begin) * head_rows;
      for (int x0 = 0; x0 < head_rows; x0 += kMaxGroupRows) {
        const int cnt = std::min(kMaxGroupRows, head_rows - x0);
        const float* q[kMaxGroupRows];
        int idx[kMaxGroupRows], nv[kMaxGroupRows];
        for (int k = 0; k < cnt; ++k) {
          const int b = (x0 + k) / it.group, i = (x0 + k) % it.group;
          q[k] = it.q + b * it.q_stride + (size_t(hk) * it.group + i) * dk;
          idx[k] = row0 + x0 + k;
          nv[k] = static_cast<int>(std::clamp<int64_t>(it.queries[b].n_visible - key, 0, n));
        }
        const Prefetch& p = x0 == 0 ? pf : Prefetch();
        // The kernels ask for the unit's lines at once unless the previous
        // unit's cursor already did (or an earlier row group of this one).
        const bool touch = x0 == 0 && !covered;
        switch (cnt) {
#if !HWY_HAVE_SCALABLE
          case 4:
            TileRows<4, NK, KF, VF>(d, it, q, idx, nv, ksrc, kstride, vsrc, vstride, kgroups,
                                     vgroups, scores, p, qbuf, vbuf, lsum, next, touch);
            break;
          case 3:
            TileRows<3, NK, KF, VF>(d, it, q, idx, nv, ksrc, kstride, vsrc, vstride, kgroups,
                                     vgroups, scores, p, qbuf, vbuf, lsum, next, touch);
            break;
          case 2:
            TileRows<2, NK, KF, VF>(d, it, q, idx, nv, ksrc, kstride, vsrc, vstride, kgroups,
                                     vgroups, scores, p, qbuf, vbuf, lsum, next, touch);
            break;
#endif
          default:
            TileRows<1, NK, KF, VF>(d, it, q, idx, nv, ksrc, kstride, vsrc, vstride, kgroups,
                                    vgroups, scores, p, qbuf, vbuf, lsum, next, touch);
        }
      }
    }
    key += n;
  }
  const size_t NT = hn::Lanes(hn::CappedTag<float, kTile>());
  for (int r = 0; r < rows; ++r) {
    float l = 0.0f;
    for (size_t j = 0; j < NT; ++j) l += lsum[size_t(r) * kLsumLanes + j];
    it.l[r] = l;
  }
}

// Formats read in place; others are staged a tile at a time. Quantized and
// BF16 / FP8 rows are read in place only at full width (head dims are
// multiples of 32 there in practice), and V in place only in K's format,
// F16 or Q8_0 (mixed formats are staged), which keeps the number of
// instantiations down.
template <bool kFull, class D, class KF>
void RunItemV(D d, const Item& it) {
  const kv::KvGeometry& g = it.cache->geometry();
  const QType vt = g.v_type;
  if (vt == QType::F16) return RunItemT<D, KF, F16Rows>(d, it);
#if SUSTAIN_ATTN_VNNI
  // Tiled V beside tiled or F16 K: Q8_0, or K's own format; FP8 (with
  // AVX512_BF16) beside FP8 or F16 K.
  if constexpr (kFull && (kIsTiled<KF> || std::is_same_v<KF, F16Rows>)) {
    if (g.v_tiled()) {
      if (vt == QType::Q8_0) return RunItemT<D, KF, TiledRows<QType::Q8_0>>(d, it);
      if constexpr (kBf16Query<KF> || std::is_same_v<KF, F16Rows>) {
        if (vt == QType::FP8_E4M3 && Fp8TiledCpu())
          return RunItemT<D, KF, TiledRows<QType::FP8_E4M3>>(d, it);
      }
      if constexpr (kIsTiled<KF>) {
        if (vt == KF::kType) return RunItemT<D, KF, KF>(d, it);
      }
    }
  }
#endif
  if constexpr (kFull && !std::is_same_v<KF, F32Rows> && !std::is_same_v<KF, F16Rows> &&
                !kIsTiled<KF>) {
    if (vt == g.k_type) return RunItemT<D, KF, KF>(d, it);
  }
  if constexpr (kFull) {
    if (vt == QType::Q8_0) return RunItemT<D, KF, Q8Rows>(d, it);
  }
  return RunItemT<D, KF, F32Rows>(d, it);
}

template <bool kFull, class D>
void RunItemD(D d, const Item& it) {
  const kv::KvGeometry& g = it.cache->geometry();
  const QType kt = g.k_type;
  if (kt == QType::F16) return RunItemV<kFull, D, F16Rows>(d, it);
#if SUSTAIN_ATTN_VNNI
  if constexpr (kFull) {
    if (g.k_tiled()) {
      switch (kt) {
        case QType::Q8_0: return RunItemV<kFull, D, TiledRows<QType::Q8_0>>(d, it);
        case QType::Q4_0: return RunItemV<kFull, D, TiledRows<QType::Q4_0>>(d, it);
        case QType::Q4_1: return RunItemV<kFull, D, TiledRows<QType::Q4_1>>(d, it);
        case QType::Q5_0: return RunItemV<kFull, D, TiledRows<QType::Q5_0>>(d, it);
        case QType::Q5_1: return RunItemV<kFull, D, TiledRows<QType::Q5_1>>(d, it);
        case QType::FP8_E4M3:
          if (Fp8TiledCpu()) return RunItemV<kFull, D, TiledRows<QType::FP8_E4M3>>(d, it);
          break;
        default: break;
      }
    }
  }
#endif
  if constexpr (kFull) {
    WithRows(kt, [&](auto rows) { RunItemV<kFull, D, decltype(rows)>(d, it); });
  } else {
    RunItemV<kFull, D, F32Rows>(d, it);
  }
}

void RunItem(const Item& it) {
  // The widest vector whose lane count divides both head dims.
  const auto fits = [&](size_t n) { return it.dk % n == 0 && it.dv % n == 0; };
  const hn::ScalableTag<float> d_full;
  // The block readers need vectors within one half (16 elements) of a block.
  constexpr bool kFits = HWY_MAX_BYTES / sizeof(float) <= kQK / 2;
  if (fits(hn::Lanes(d_full))) return RunItemD<kFits>(d_full, it);
  const hn::CappedTag<float, 8> d8;
  if (fits(hn::Lanes(d8))) return RunItemD<false>(d8, it);
  return RunItemD<false>(hn::CappedTag<float, 1>(), it);
}

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sustain::attention::detail {
HWY_EXPORT(RunItem);
void run_item(const Item& it) {
  HWY_DYNAMIC_DISPATCH(RunItem)(it);
}
}  // namespace sustain::attention::detail
#endif

// How K / V rows stored in the row layout are read by the f32 kernels
// (attend_float-inl.h): one reader per format that converts elements to f32
// in registers (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, FP8 E4M3), the
// tag of pages in the tiled layout (kv/tiled.h), and the staging of a tile of
// rows into an f32 buffer for formats (or widths) no reader takes in place.

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_ROWS_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_ROWS_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_ROWS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"

#include "hwy/highway.h"

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

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_ROWS_INL_H_

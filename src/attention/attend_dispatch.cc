// The attention work-item kernel (kernel.h run_item) in Highway, compiled for
// every target and picked at run time: which K / V reader pair runs an item
// (attend_item-inl.h) for the cache's formats and layouts and the vector
// width the head dims allow. K and V rows stored as F32, F16, BF16,
// FP8_E4M3, Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 are read in place and converted
// in registers (on every target, AVX2 included). On AVX-512 VNNI the block
// formats go integer: K dotted with a once-quantized int8 q (vpdpbusd), V
// accumulated as codes × integer softmax weights; pages in the tiled layout
// (kv/tiled.h) by the 16-keys-per-vector kernels of attend_tiled-inl.h, on
// other targets put back into rows a tile at a time. Other formats (and
// mixed K/V formats' V) are converted a tile of rows at a time into a small
// f32 buffer.
#include <type_traits>

#include "attention/kernel.h"
#include "kv/kv_cache.h"
#include "tensor/blocks.h"
#include "tensor/qtype.h"

// Highway's dynamic dispatch re-includes this file once per target; the
// order below is required (clang-format must not sort it).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attend_dispatch.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "attention/attend_fp8-inl.h"
#include "attention/attend_item-inl.h"
#include "attention/attend_rows-inl.h"
#include "attention/attend_target-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

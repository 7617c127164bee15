// The online-softmax update of the attention kernel, one row and one tile of
// scores at a time: a cheap exp for non-positive arguments, the running
// maximum, the sums l kept as vectors, and o rescaled when the maximum grows.

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_SOFTMAX_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_SOFTMAX_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "attention/kernel.h"

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_SOFTMAX_INL_H_

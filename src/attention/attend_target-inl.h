// Per-target facts of the attention kernels (attend_dispatch.cc), shared by
// the -inl.h files of this directory: whether the target takes the AVX-512
// VNNI paths, whether it has arrays of vectors for the multi-key loops, how
// many rows and V chunks fit its registers, and the prefetch of the next
// tile's rows for the row-layout kernels.

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_TARGET_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_TARGET_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_TARGET_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_TARGET_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "attention/kernel.h"

#include "hwy/cache_control.h"
#include "hwy/highway.h"

// On AVX3_DL (and AVX3_ZEN4 where Highway has it) Q8_0 K is dotted with an
// int8 copy of q by AVX-512 VNNI, which Highway 1.0.3's AVX3_DL target string
// omits (it names the VEX "avxvnni", off here: Zen 4 lacks it); see
// kernels/cpu/quant-inl.h.
#undef SUSTAIN_ATTN_VNNI
#if HWY_TARGET == HWY_AVX3_DL || (defined(HWY_AVX3_ZEN4) && HWY_TARGET == HWY_AVX3_ZEN4)
#define SUSTAIN_ATTN_VNNI 1
#else
#define SUSTAIN_ATTN_VNNI 0
#endif

// Scalable and scalar targets lack arrays of vectors or the interleaves:
// they take the one-key-one-row path.
#define SUSTAIN_ATTN_TILED (!HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR)

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_HAVE_SCALABLE
// Sizeless vectors cannot live in arrays: one row at a time.
inline constexpr int kMaxGroupRows = 1;
inline constexpr int kVChunks = 1;
#else
// Rows processed together: each K/V element loaded once feeds kMaxGroupRows
// rows (× 4 keys: independent FMA chains that hide the latency). 4 rows × 4
// keys of accumulators fit AVX-512's 32 registers; 2 rows fit 16.
inline constexpr int kMaxGroupRows = HWY_TARGET <= HWY_AVX3 ? kScoreRows : 2;
// V chunks (vectors of head_dim_v) accumulated in registers per pass: 4 rows
// × 4 chunks fill 16 of AVX-512's 32 registers; half that elsewhere.
inline constexpr int kVChunks = HWY_TARGET <= HWY_AVX3 ? 4 : 2;
#endif

// K and V rows of the next tile, fetched a few rows at a time while the
// current tile is computed (spread out, so the fill buffers never overflow).
struct Prefetch {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t k_row = 0, v_row = 0;
  int n = 0;  // rows in the next tile

  HWY_INLINE void rows(int j, int count) const {
    if (j >= n) return;
    const int end = std::min(n, j + count);
    for (size_t off = j * k_row; off < end * k_row; off += 64) hwy::Prefetch(k + off);
    for (size_t off = j * v_row; off < end * v_row; off += 64) hwy::Prefetch(v + off);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_TARGET_INL_H_

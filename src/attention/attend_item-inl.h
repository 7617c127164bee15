// One work item of the attention kernel (kernel.h Item) for a pair of K / V
// readers: the walk over the item's tiles of keys and KV heads (pages,
// prefetch, untiling and staging), and per tile and group of rows the
// scores, the softmax update and o += p · V by the kernels of the format
// families (attend_float-inl.h, attend_vnni-inl.h, attend_tiled-inl.h,
// attend_fp8-inl.h). Which pair runs is chosen in attend_dispatch.cc.

// Per-target include guard (Highway's -inl.h convention): the body is
// compiled once per target pass of attend_dispatch.cc's foreach_target.
#if defined(SUSTAIN_ATTENTION_ATTEND_ITEM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SUSTAIN_ATTENTION_ATTEND_ITEM_INL_H_
#undef SUSTAIN_ATTENTION_ATTEND_ITEM_INL_H_
#else
#define SUSTAIN_ATTENTION_ATTEND_ITEM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attention/kernel.h"
#include "kv/kv_cache.h"
#include "tensor/blocks.h"
#include "tensor/qtype.h"

#include "hwy/highway.h"

#include "attention/attend_float-inl.h"
#include "attention/attend_fp8-inl.h"
#include "attention/attend_rows-inl.h"
#include "attention/attend_softmax-inl.h"
#include "attention/attend_target-inl.h"
#include "attention/attend_tiled-inl.h"
#include "attention/attend_vnni-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sustain::attention::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

// F16 K and V read in place: each (tile, KV head) unit asks for the next
// unit's rows from inside its loops (LineCursor), as the tiled kernels do.
// Measured with bench_attention's BM_DecodeAttentionWide at 32K
// (docs/long_context.md): 16.5 -> 41 GB/s over 256-wide heads, 21 -> 38
// over 128-wide; over 64-wide heads, where the hardware prefetcher alone
// reaches 36-38 GB/s, no change.
template <class KF, class VF>
inline constexpr bool kRowCursor = std::is_same_v<KF, F16Rows>&& std::is_same_v<VF, F16Rows>;

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
    if constexpr (kRowCursor<KF, VF>)
      ScoreRows<R, KF, true>(d, q, krows, kstride, n_max, it.dk, it.scale, s, pf, &next);
    else
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
    AccumulateRowsTiled<R, VF::kType>(s, vgroups, n_max, it.dv, o, vwork, next, touch,
                                      it.row_bounds);
  else if constexpr (std::is_same_v<VF, Q8Rows>)
    AccumulateRowsQ8Int<R>(s, vrows, vstride, n_max, it.dv, o, vwork, it.row_bounds);
  else if constexpr (std::is_same_v<VF, Q4_0Rows>)
    AccumulateRowsQ4Int<R, BlockQ4_0, 8, false, false>(s, vrows, vstride, n_max, it.dv, o, vwork,
                                                       it.row_bounds);
  else if constexpr (std::is_same_v<VF, Q4_1Rows>)
    AccumulateRowsQ4Int<R, BlockQ4_1, 0, true, false>(s, vrows, vstride, n_max, it.dv, o, vwork,
                                                      it.row_bounds);
  else if constexpr (std::is_same_v<VF, Q5_0Rows>)
    AccumulateRowsQ4Int<R, BlockQ5_0, 16, false, true>(s, vrows, vstride, n_max, it.dv, o, vwork,
                                                       it.row_bounds);
  else if constexpr (std::is_same_v<VF, Q5_1Rows>)
    AccumulateRowsQ4Int<R, BlockQ5_1, 0, true, true>(s, vrows, vstride, n_max, it.dv, o, vwork,
                                                     it.row_bounds);
  else
#else
  if constexpr (std::is_same_v<VF, Q8Rows>)
    AccumulateRowsQ8<R>(d, s, vrows, vstride, n_max, it.dv, o, vwork);
  else
#endif
      if constexpr (kRowCursor<KF, VF>)
    AccumulateRows<R, VF, true>(d, s, vrows, vstride, n_max, it.dv, o, &next);
  else
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
    // (The group tiles' and f16 rows' cursors cover the next unit wherever
    // it is.)
    if (const int64_t next = key + n; !kGroupTiles && !kRowCursor<KF, VF> && next < it.k_end &&
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
      [[maybe_unused]] int64_t nkey = key;
      [[maybe_unused]] int nhk = hk + 1;
      if (nhk == it.head_end) {
        nkey = key + n;
        nhk = it.head_begin;
      }
      if constexpr (kGroupTiles) {
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
      if constexpr (kRowCursor<KF, VF>) {
        if (nkey < it.k_end) {
          const int32_t npage = it.pages[nkey / pt];
          const int nslot = static_cast<int>(nkey % pt);
          const int nn = static_cast<int>(std::min<int64_t>({NK, pt - nslot, it.k_end - nkey}));
          next.add(cache.k_block(npage, it.layer, nhk) + nslot * krb, size_t(nn) * krb);
          next.add(cache.v_block(npage, it.layer, nhk) + nslot * vrb, size_t(nn) * vrb);
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

}  // namespace HWY_NAMESPACE
}  // namespace sustain::attention::detail
HWY_AFTER_NAMESPACE();

#endif  // SUSTAIN_ATTENTION_ATTEND_ITEM_INL_H_

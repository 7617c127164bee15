// attend() against the double reference on random data with awkward shapes:
// contexts around tile and page edges, GQA ratios, head dims, mixed batches,
// prefill chunks, K/V formats, 1–3 threads with split-KV off, forced and auto.
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include "attn_test_util.h"

namespace sustain::attention::test {
namespace {

// F32/F16 rows: attend() does the reference's arithmetic in f32.
constexpr double kTol = 1e-5;
// Q8_0 K: on AVX-512 VNNI targets q is quantized once per row to int8 in
// blocks of 32 (scale amax / 127) and dotted with the K codes in integers.
// Each q element then errs by up to amax / 254, uniformly: rms ≈ amax / 440,
// ≈ 0.006 for the N(0, 1) queries here (amax of 32 normals ≈ 2.5). A score
// (scale · q · k over dk elements) errs by ≈ scale · sqrt(dk) · 0.006 ·
// rms(k), ~0.5% of the scores' spread, and the output, a softmax-weighted
// average of V, moves by about that fraction of max |o| (measured: 1.8%
// worst over rows and columns at d64, 1000 keys). 5e-2 leaves room for other
// seeds and shapes while a wrong block, scale or offset (errors of order 1)
// still fails.
constexpr double kTolQ8K = 5e-2;

// Q8_0 V on VNNI targets: the softmax weights × block scales are quantized
// to int16 per tile (step = the tile's largest / 32767), a relative error
// per weight of at most 1.5e-5 of the largest; summed over ~1000 keys it
// moves the output by a few 1e-5 of max |o|. 2e-4 still fails a wrong
// scale, lane order or pairing (errors of order 1).
constexpr double kTolQ8V = 2e-4;

// FP8 V stored tiled, on CPUs with AVX512_BF16: the softmax weights are
// rounded to bf16 (8 significant bits), a relative error of at most 2^-9
// per weight that averages down over the keys (measured: below 1e-3 of max
// |o|). 5e-3 still fails a wrong lane, key pair or table entry.
constexpr double kTolBf16V = 5e-3;

// K formats whose scores may be computed with an int8 copy of q (Q8_0 and
// the 4/5-bit formats on VNNI targets) or a bf16 copy (FP8 stored tiled,
// 2^-9 per element, below the int8 copy's error): kTolQ8K; the rest kTol.
bool int8_query(QType k) {
  return k == QType::Q8_0 || k == QType::Q4_0 || k == QType::Q4_1 || k == QType::Q5_0 ||
         k == QType::Q5_1;
}
double tolerance(const kv::KvGeometry& g) {
  if (int8_query(g.k_type) || (g.k_type == QType::FP8_E4M3 && g.k_tiled())) return kTolQ8K;
  if (g.v_type == QType::Q8_0) return kTolQ8V;
  if (g.v_type == QType::FP8_E4M3 && g.v_tiled()) return kTolBf16V;
  return kTol;
}

// Runs attend() with 1, 2 and 3 threads and every split mode; the reference
// is computed once. Returns the worst error.
double worst_over_runs(const kv::KvCache& cache, int layer, AttnParams p,
                       const std::vector<QueryInfo>& queries, uint32_t seed) {
  const size_t n_q = queries.size();
  const std::vector<float> q = random_q(n_q * p.n_head * p.head_dim_k, seed);
  std::vector<double> ref(n_q * p.n_head * p.head_dim_v);
  attend_ref(cache, layer, p, queries, q.data(), ref.data());
  double worst = 0.0;
  for (int threads : {1, 2, 3}) {
    for (SplitKv split : {SplitKv::kOff, SplitKv::kAuto, SplitKv::kForce}) {
      p.split_kv = split;
      ThreadPool& tp = pool(threads);
      auto scratch = aligned_scratch(attention_scratch_bytes(p, int64_t(n_q), tp.size()));
      std::vector<float> out(ref.size(), std::nanf(""));
      attend(cache, layer, p, queries, q.data(), out.data(), tp, scratch.get());
      double err = INFINITY;
      if (std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
        err = max_rel_error(out, ref, p.head_dim_v);
      EXPECT_LE(err, tolerance(cache.geometry()))
          << "threads " << threads << " split " << int(split);
      worst = std::max(worst, err);
    }
  }
  return worst;
}

kv::KvGeometry geometry(int n_head_kv, int dim, int page_tokens, QType kt = QType::F16,
                        QType vt = QType::F16) {
  kv::KvGeometry g;
  g.n_layer = 2;
  g.n_head_kv = n_head_kv;
  g.head_dim_k = dim;
  g.head_dim_v = dim;
  g.k_type = kt;
  g.v_type = vt;
  g.page_tokens = page_tokens;
  return g;
}

// One decode query over a whole sequence.
using DecodeCase = std::tuple<int64_t, int, int, int>;  // context, group, head dim, page tokens
class DecodeSweep : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeSweep, MatchesReference) {
  const auto [ctx, group, dim, page] = GetParam();
  const kv::KvGeometry g = geometry(2, dim, page);
  Filled f = make_filled(g, {ctx}, uint32_t(ctx * 131 + dim));
  const AttnParams p = params_for(g, group, SplitKv::kAuto);
  const std::vector<QueryInfo> queries = {{&f.seqs[0], ctx}};
  worst_over_runs(*f.cache, 1, p, queries, uint32_t(group * 7 + dim));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeSweep,
                         ::testing::Combine(::testing::Values(1, 2, 31, 32, 33, 100, 1000, 4097),
                                            ::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(8, 16, 32, 64, 128, 256),
                                            ::testing::Values(16, 32)),
                         [](const auto& info) {
                           return "ctx" + std::to_string(std::get<0>(info.param)) + "_g" +
                                  std::to_string(std::get<1>(info.param)) + "_d" +
                                  std::to_string(std::get<2>(info.param)) + "_p" +
                                  std::to_string(std::get<3>(info.param));
                         });

// Several sequences of different lengths decoding in one batch, plus a query
// that sees nothing (zeros).
class MixedBatch : public ::testing::TestWithParam<int> {};

TEST_P(MixedBatch, MatchesReference) {
  const int group = GetParam();
  const kv::KvGeometry g = geometry(3, 64, 16);
  Filled f = make_filled(g, {1, 33, 1000, 100, 2048, 5}, 7);
  const AttnParams p = params_for(g, group, SplitKv::kAuto);
  std::vector<QueryInfo> queries;
  for (const kv::PageTable& t : f.seqs) queries.push_back({&t, t.n_tokens});
  queries.push_back({&f.seqs[2], 0});
  worst_over_runs(*f.cache, 0, p, queries, 11);
}

INSTANTIATE_TEST_SUITE_P(Groups, MixedBatch, ::testing::Values(1, 2, 3, 4, 8));

// A prefill chunk: consecutive queries of one sequence with increasing
// n_visible (causal), beside another sequence's chunk and a decode query.
using PrefillCase = std::tuple<int, int>;  // group, page tokens
class PrefillChunk : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(PrefillChunk, MatchesReference) {
  const auto [group, page] = GetParam();
  const kv::KvGeometry g = geometry(2, 32, page);
  Filled f = make_filled(g, {90, 700, 37}, 3);
  const AttnParams p = params_for(g, group, SplitKv::kAuto);
  std::vector<QueryInfo> queries;
  for (int64_t pos = 43; pos < 90; ++pos) queries.push_back({&f.seqs[0], pos + 1});
  queries.push_back({&f.seqs[2], 37});
  for (int64_t pos = 0; pos < 20; ++pos) queries.push_back({&f.seqs[1], pos + 1});
  for (int64_t pos = 680; pos < 700; ++pos) queries.push_back({&f.seqs[1], pos + 1});
  worst_over_runs(*f.cache, 1, p, queries, 5);
}

INSTANTIATE_TEST_SUITE_P(Groups, PrefillChunk,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(16, 32)));

// A prefill chunk short enough for split-KV: forced splits must merge
// partial states of blocks of several queries.
TEST(PrefillChunk, ForcedSplitOfAShortChunk) {
  const kv::KvGeometry g = geometry(1, 64, 16);
  Filled f = make_filled(g, {300}, 9);
  const AttnParams p = params_for(g, 4, SplitKv::kAuto);
  std::vector<QueryInfo> queries;
  for (int64_t pos = 290; pos < 300; ++pos) queries.push_back({&f.seqs[0], pos + 1});
  worst_over_runs(*f.cache, 0, p, queries, 13);
}

// Sliding window (gemma3's local layers): each query sees its last `window`
// keys. Windows of 1, a page, and more than the context; queries before,
// at and past the window's length; f16, q8_0 and tiled q4_0 K/V, which the
// window path dequantizes row by row.
TEST(SlidingWindow, MatchesReference) {
  for (QType t : {QType::F16, QType::Q8_0, QType::Q4_0}) {
    for (int window : {1, 16, 37, 5000}) {
      SCOPED_TRACE(std::string(qtype_name(t)) + " window " + std::to_string(window));
      const kv::KvGeometry g = geometry(2, 32, 16, t, t);
      Filled f = make_filled(g, {90, 300}, 21);
      AttnParams p = params_for(g, 2, SplitKv::kAuto);
      p.window = window;
      std::vector<QueryInfo> queries;
      for (int64_t pos = 0; pos < 90; pos += 7) queries.push_back({&f.seqs[0], pos + 1});
      for (int64_t pos = 250; pos < 300; ++pos) queries.push_back({&f.seqs[1], pos + 1});
      queries.push_back({&f.seqs[1], 0});  // sees nothing: zeros
      // Row by row in f32, so the float tolerance holds for every format
      // once the context passes the window; shorter contexts take the fused
      // kernel and its format's tolerance.
      worst_over_runs(*f.cache, 1, p, queries, 17);
    }
  }
}

// Batched decode past the window (one query per sequence, as Gemma 3's local
// layers decode): the fused kernel takes each query's keys from its window's
// first key, which lies anywhere in a page; split over threads it cuts
// [first, n_visible) into chunks, the first from that key. Windows shorter
// than a page, across pages and longer than the split threshold; contexts
// at, just past and far past the window; f16, and q8_0 stored tiled (the
// range then starts at the next 16-key group and the keys before it are
// folded in afterwards) and untiled; sharp scores so that a key wrongly kept
// or dropped shows.
TEST(SlidingWindow, DecodeQueriesPastTheWindowMatchReference) {
  for (QType t : {QType::F16, QType::Q8_0}) {
    for (bool tiled : {true, false}) {
      for (int window : {5, 37, 600}) {
        SCOPED_TRACE(std::string(qtype_name(t)) + (tiled ? " tiled" : " rows") + " window " +
                     std::to_string(window));
        kv::KvGeometry g = geometry(2, 32, 16, t, t);
        g.tiled = tiled;
        Filled f = make_filled(g, {1500, 700, 41, 603}, 31, /*k_sigma=*/3.0f);
        AttnParams p = params_for(g, 2, SplitKv::kAuto);
        p.window = window;
        const std::vector<QueryInfo> queries = {
            {&f.seqs[0], 1500}, {&f.seqs[1], 700}, {&f.seqs[2], 41}, {&f.seqs[3], 603},
            {&f.seqs[0], 1237}};
        worst_over_runs(*f.cache, 1, p, queries, 37);
        // One sequence alone: a single block, the case split-KV cuts.
        worst_over_runs(*f.cache, 0, p, {{&f.seqs[0], 1499}}, 41);
      }
    }
  }
}

// Prefill and verify blocks past the window (consecutive positions of one
// sequence, as Gemma 3's local layers prefill): the fused kernel takes the
// block's keys from its latest window start (the next 16-key group where
// K/V are tiled) and folds each row's earlier window keys in afterwards.
// Windows shorter than a block, than a page, across pages and longer than
// the split threshold; chunks starting in and past the window, one longer
// than a block; f16 and q8_0, tiled and untiled; sharp scores, so a key
// wrongly kept or dropped at either end of a row's window shows.
TEST(SlidingWindow, PrefillBlocksPastTheWindowMatchReference) {
  for (QType t : {QType::F16, QType::Q8_0}) {
    for (bool tiled : {true, false}) {
      for (int window : {3, 37, 600}) {
        SCOPED_TRACE(std::string(qtype_name(t)) + (tiled ? " tiled" : " rows") + " window " +
                     std::to_string(window));
        kv::KvGeometry g = geometry(2, 32, 16, t, t);
        g.tiled = tiled;
        Filled f = make_filled(g, {1500, 120}, 43, /*k_sigma=*/3.0f);
        AttnParams p = params_for(g, 2, SplitKv::kAuto);
        p.window = window;
        std::vector<QueryInfo> queries;
        for (int64_t pos = 1400; pos < 1437; ++pos) queries.push_back({&f.seqs[0], pos + 1});
        for (int64_t pos = 30; pos < 47; ++pos) queries.push_back({&f.seqs[1], pos + 1});
        worst_over_runs(*f.cache, 1, p, queries, 47);
        // A verify block alone (few blocks: split-KV cuts its keys).
        std::vector<QueryInfo> verify;
        for (int64_t pos = 1483; pos < 1500; ++pos) verify.push_back({&f.seqs[0], pos + 1});
        worst_over_runs(*f.cache, 0, p, verify, 53);
      }
    }
  }
}

// A non-causal block (Gemma 3's image tokens) on a sliding-window layer:
// each query of the block sees every key of the block, later ones included,
// while its window still counts back from its own position. Such a window
// holds more than `window` keys, which the window path takes in chunks of
// `window` through an online softmax. Blocks before, across and past the
// window's length; sharper scores than the default, so the running maximum
// moves.
TEST(SlidingWindow, NonCausalBlockMatchesReference) {
  for (QType t : {QType::F16, QType::Q8_0}) {
    for (int window : {1, 16, 37, 600}) {
      SCOPED_TRACE(std::string(qtype_name(t)) + " window " + std::to_string(window));
      const kv::KvGeometry g = geometry(2, 32, 16, t, t);
      Filled f = make_filled(g, {300, 90}, 23, /*k_sigma=*/2.0f);
      AttnParams p = params_for(g, 2, SplitKv::kAuto);
      p.window = window;
      std::vector<QueryInfo> queries;
      // A block of 64 at 200..263 of the first sequence, one of 40 at 10..49
      // of the second, and a causal query beside them.
      for (int64_t pos = 200; pos < 264; ++pos) queries.push_back({&f.seqs[0], 264, pos + 1});
      for (int64_t pos = 10; pos < 50; ++pos) queries.push_back({&f.seqs[1], 50, pos + 1});
      queries.push_back({&f.seqs[0], 300});
      worst_over_runs(*f.cache, 1, p, queries, 29);
    }
  }
}

// Peaked softmax (large scores): the running maximum changes often, so the
// rescaling of earlier tiles is exercised.
TEST(Attention, PeakedScores) {
  const kv::KvGeometry g = geometry(2, 64, 32);
  Filled f = make_filled(g, {1000, 77}, 21, /*k_sigma=*/25.0f);
  const AttnParams p = params_for(g, 4, SplitKv::kAuto);
  worst_over_runs(*f.cache, 0, p, {{&f.seqs[0], 1000}, {&f.seqs[1], 77}, {&f.seqs[0], 500}}, 4);
}

// K and V in every kind of stored format (read in place, staged bf16 / q8_0,
// and the generic dequantize path); the reference reads the same values.
using FormatCase = std::tuple<QType, QType, int>;  // K type, V type, head dim
class Formats : public ::testing::TestWithParam<FormatCase> {};

TEST_P(Formats, MatchesReference) {
  const auto [kt, vt, dim] = GetParam();
  const kv::KvGeometry g = geometry(2, dim, 32, kt, vt);
  Filled f = make_filled(g, {1000, 45}, 17);
  const AttnParams p = params_for(g, 3, SplitKv::kAuto);
  std::vector<QueryInfo> queries = {{&f.seqs[0], 1000}, {&f.seqs[1], 45}};
  for (int64_t pos = 30; pos < 45; ++pos) queries.push_back({&f.seqs[1], pos + 1});
  worst_over_runs(*f.cache, 1, p, queries, 8);
}

INSTANTIATE_TEST_SUITE_P(
    Types, Formats,
    ::testing::Values(
        FormatCase{QType::F32, QType::F32, 64}, FormatCase{QType::F32, QType::F32, 8},
        FormatCase{QType::BF16, QType::BF16, 64}, FormatCase{QType::BF16, QType::F16, 16},
        FormatCase{QType::F16, QType::F32, 32}, FormatCase{QType::Q8_0, QType::Q8_0, 64},
        FormatCase{QType::Q8_0, QType::Q8_0, 128}, FormatCase{QType::F16, QType::Q8_0, 64},
        FormatCase{QType::Q8_0, QType::F16, 32}, FormatCase{QType::Q4_0, QType::Q4_0, 64},
        FormatCase{QType::Q5_1, QType::Q4_1, 32}, FormatCase{QType::FP8_E4M3, QType::FP8_E4M3, 64},
        FormatCase{QType::Q4_K, QType::Q6_K, 256}, FormatCase{QType::Q4_0, QType::F16, 64},
        FormatCase{QType::Q5_0, QType::Q8_0, 64}, FormatCase{QType::F16, QType::Q4_1, 64},
        FormatCase{QType::FP8_E4M3, QType::F16, 32}, FormatCase{QType::Q5_1, QType::Q5_1, 128}),
    [](const auto& info) {
      return std::string(qtype_name(std::get<0>(info.param))) + "_" +
             std::string(qtype_name(std::get<1>(info.param))) + "_d" +
             std::to_string(std::get<2>(info.param));
    });

// Every KV format (K and V the same, as -ctk X -ctv X stores them) on
// awkward shapes: contexts off tile and page edges, GQA ratios 1–8, a
// prefill chunk (causal) beside decode queries, 1–3 threads with split-KV
// off, automatic and forced (pages split across threads); the block formats
// in both page layouts (tiled, read 16 keys per vector, and row by row).
using FormatShapeCase = std::tuple<QType, int, int, bool>;  // K/V type, group, head dim, tiled
class FormatShapes : public ::testing::TestWithParam<FormatShapeCase> {};

TEST_P(FormatShapes, MatchesReference) {
  const auto [type, group, dim, tiled] = GetParam();
  kv::KvGeometry g = geometry(2, dim, 16, type, type);
  g.tiled = tiled;
  EXPECT_EQ(g.k_tiled(), tiled && kv::tileable(type));
  Filled f = make_filled(g, {517, 33, 1}, 41 + group);
  const AttnParams p = params_for(g, group, SplitKv::kAuto);
  std::vector<QueryInfo> queries = {{&f.seqs[0], 517}, {&f.seqs[1], 33}, {&f.seqs[2], 1}};
  for (int64_t pos = 2; pos < 33; pos += 3) queries.push_back({&f.seqs[1], pos + 1});
  for (int64_t pos = 490; pos < 517; ++pos) queries.push_back({&f.seqs[0], pos + 1});
  worst_over_runs(*f.cache, 1, p, queries, uint32_t(group * 13 + dim));
}

std::vector<FormatShapeCase> format_shape_cases() {
  std::vector<FormatShapeCase> out;
  for (QType t : {QType::F32, QType::F16, QType::BF16, QType::Q8_0, QType::Q4_0, QType::Q4_1,
                  QType::Q5_0, QType::Q5_1, QType::FP8_E4M3})
    for (int group : {1, 3, 8})
      for (int dim : {32, 64, 128}) {
        out.emplace_back(t, group, dim, true);
        if (kv::tileable(t)) out.emplace_back(t, group, dim, false);
      }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Types, FormatShapes, ::testing::ValuesIn(format_shape_cases()),
    [](const auto& info) {
      return std::string(qtype_name(std::get<0>(info.param))) + "_g" +
             std::to_string(std::get<1>(info.param)) + "_d" +
             std::to_string(std::get<2>(info.param)) +
             (!kv::tileable(std::get<0>(info.param)) ? ""
              : std::get<3>(info.param)             ? "_tiled"
                                                    : "_rows");
    });

// Tiled and row-by-row pages of the same values both match the reference
// (the integer kernels differ), on a context that is not a whole number of
// 16-key groups and a page size of 48 (tiles of 32 and 16 keys).
TEST(Attention, TiledAndRowsAgree) {
  for (QType type :
       {QType::Q8_0, QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::FP8_E4M3}) {
    SCOPED_TRACE(qtype_name(type));
    kv::KvGeometry g = geometry(2, 64, 48, type, type);
    g.tiled = false;
    Filled rows = make_filled(g, {1001}, 7);
    g.tiled = true;
    ASSERT_TRUE(g.k_tiled());
    Filled tiled = make_filled(g, {1001}, 7);
    const AttnParams p = params_for(g, 4, SplitKv::kAuto);
    const std::vector<QueryInfo> qr = {{&rows.seqs[0], 1001}, {&rows.seqs[0], 18}};
    const std::vector<QueryInfo> qt = {{&tiled.seqs[0], 1001}, {&tiled.seqs[0], 18}};
    const std::vector<float> q = random_q(2 * p.n_head * p.head_dim_k, 99);
    std::vector<float> out_r(2 * p.n_head * p.head_dim_v), out_t(out_r.size());
    std::vector<double> ref(out_r.size()), ref_r(out_r.size());
    auto scratch = aligned_scratch(attention_scratch_bytes(p, 2, 2));
    attend(*rows.cache, 1, p, qr, q.data(), out_r.data(), pool(2), scratch.get());
    attend(*tiled.cache, 1, p, qt, q.data(), out_t.data(), pool(2), scratch.get());
    attend_ref(*tiled.cache, 1, p, qt, q.data(), ref.data());
    attend_ref(*rows.cache, 1, p, qr, q.data(), ref_r.data());
    EXPECT_EQ(ref, ref_r);  // the same values, stored two ways
    EXPECT_LE(max_rel_error(out_t, ref, p.head_dim_v), kTolQ8K);
    EXPECT_LE(max_rel_error(out_r, ref, p.head_dim_v), kTolQ8K);
  }
}

// Different K and V widths (MLA-like geometries).
TEST(Attention, DifferentKAndVWidths) {
  kv::KvGeometry g = geometry(2, 64, 16);
  g.head_dim_v = 32;
  Filled f = make_filled(g, {200}, 2);
  const AttnParams p = params_for(g, 2, SplitKv::kAuto);
  worst_over_runs(*f.cache, 0, p, {{&f.seqs[0], 200}, {&f.seqs[0], 17}}, 6);
}

// Every SIMD target this CPU can run (AVX2, SSE4, scalar, ... beside the
// best one the other tests get), on shapes that reach each code path.
TEST(Attention, EveryCompiledTarget) {
  const kv::KvGeometry g16 = geometry(2, 64, 16);
  Filled f16 = make_filled(g16, {700, 45}, 31);
  const kv::KvGeometry gq = geometry(2, 32, 32, QType::Q8_0, QType::BF16);
  Filled fq = make_filled(gq, {300}, 32);
  const kv::KvGeometry g4 = geometry(2, 64, 16, QType::Q4_1, QType::Q4_1);
  Filled f4 = make_filled(g4, {200}, 34);
  const kv::KvGeometry g5 = geometry(1, 32, 16, QType::Q5_0, QType::FP8_E4M3);
  Filled f5 = make_filled(g5, {150}, 35);
  const kv::KvGeometry g8 = geometry(1, 8, 16, QType::F32, QType::F16);
  Filled f8 = make_filled(g8, {100}, 33);
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::vector<QueryInfo> prefill;
    for (int64_t pos = 20; pos < 45; ++pos) prefill.push_back({&f16.seqs[1], pos + 1});
    prefill.push_back({&f16.seqs[0], 700});
    worst_over_runs(*f16.cache, 1, params_for(g16, 3, SplitKv::kAuto), prefill, 1);
    worst_over_runs(*fq.cache, 0, params_for(gq, 8, SplitKv::kAuto), {{&fq.seqs[0], 300}}, 2);
    worst_over_runs(*f4.cache, 1, params_for(g4, 3, SplitKv::kAuto),
                    {{&f4.seqs[0], 200}, {&f4.seqs[0], 101}}, 4);
    worst_over_runs(*f5.cache, 0, params_for(g5, 5, SplitKv::kAuto), {{&f5.seqs[0], 150}}, 5);
    worst_over_runs(*f8.cache, 1, params_for(g8, 2, SplitKv::kAuto),
                    {{&f8.seqs[0], 100}, {&f8.seqs[0], 7}}, 3);
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace sustain::attention::test


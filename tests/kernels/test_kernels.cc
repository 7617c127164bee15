// Every SIMD op against its scalar reference (kernels/ref.h), for every weight
// format and on every Highway target compiled in that this CPU supports; and
// the reference matmul against a plain f32 matmul on dequantized weights.
//
// Tolerances come from the arithmetic:
// - Quantized formats: both sides compute the same exact integer sum per block
//   (or super-block); only the order of the float accumulation of
//   (int sum x scale) terms differs. With nb <= 88 blocks per row and f32
//   rounding 2^-24 per operation the difference is below 88 * 2^-24 < 1e-5 of
//   S = sum_i |w_i x_i|, the bound used.
// - F32/F16/BF16: the reference sums exact products in double, the kernel in
//   f32 vector lanes: error <= (n / lanes + log2 lanes) * 2^-24 * S, again
//   below 1e-5 * S for n <= 2816.
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/batch_invariant.h"
#include "base/thread_pool.h"
#include "hwy/targets.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ops.h"
#include "kernels/ref.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"
#include "tensor/quant_test_util.h"
#include "tensor/row_tiles.h"

namespace sustain::kernels {
namespace {

using test::random_normal;
using test::random_with_outliers;

// Runs fn once per compiled target this CPU has, with dispatch forced to it.
template <class Fn>
void for_each_target(Fn fn) {
  const auto targets = cpu::compiled_targets();
  ASSERT_FALSE(targets.empty());
  for (int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the CPU's real set
}

std::vector<QType> matmul_formats() {
  std::vector<QType> out;
  for (const auto& tr : all_qtypes())
    if (tr.dequantize != nullptr) out.push_back(tr.type);
  return out;
}

struct Problem {
  QType type;
  int64_t n_out, n_in, n_tok, ldx, ldy;
  std::vector<uint8_t> w;
  std::vector<float> w_deq;  // [n_out, n_in]
  std::vector<float> x;      // [n_tok, ldx]
  WeightView view() const {
    WeightView v;
    v.type = type;
    v.n_out = n_out;
    v.n_in = n_in;
    v.data = w.data();
    v.row_bytes = qtype_row_bytes(type, static_cast<uint64_t>(n_in));
    return v;
  }
};

Problem make_problem(QType t, int64_t n_out, int64_t n_in, int64_t n_tok, uint64_t seed) {
  Problem p{t, n_out, n_in, n_tok, n_in + 3, n_out + 5, {}, {}, {}};
  const auto& tr = qtype_traits(t);
  const size_t row_bytes = qtype_row_bytes(t, static_cast<uint64_t>(n_in));
  p.w.resize(row_bytes * static_cast<size_t>(n_out));
  p.w_deq.resize(static_cast<size_t>(n_out * n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    // Rows of different magnitude, some offset (exercises the min terms).
    auto row = random_with_outliers(static_cast<size_t>(n_in), seed * 1000 + o,
                                    0.02f * static_cast<float>(1 + o % 3));
    if (o % 4 == 1)
      for (auto& v : row) v += 0.03f;
    tr.quantize(row.data(), p.w.data() + o * row_bytes, n_in);
    tr.dequantize(p.w.data() + o * row_bytes, p.w_deq.data() + o * n_in, n_in);
  }
  p.x = random_normal(static_cast<size_t>(n_tok * p.ldx), seed ^ 0xabcdef, 1.0f);
  // An all-zero leading block in one token: a zero activation scale.
  if (n_tok > 1)
    for (int64_t i = 0; i < std::min<int64_t>(32, n_in); ++i) p.x[p.ldx + i] = 0;
  return p;
}

// S[t, o] = sum_i |w_oi x_ti|, the scale of the rounding error.
std::vector<double> abs_dots(const Problem& p) {
  std::vector<double> s(static_cast<size_t>(p.n_tok * p.n_out));
  for (int64_t t = 0; t < p.n_tok; ++t)
    for (int64_t o = 0; o < p.n_out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < p.n_in; ++i)
        acc += std::fabs(static_cast<double>(p.w_deq[o * p.n_in + i]) * p.x[t * p.ldx + i]);
      s[t * p.n_out + o] = acc;
    }
  return s;
}

std::vector<float> run_ref(const Problem& p) {
  std::vector<float> y(static_cast<size_t>(p.n_tok * p.ldy), NAN);
  ref::matmul(p.view(), p.x.data(), p.ldx, p.n_tok, y.data(), p.ldy);
  return y;
}

std::vector<float> run_simd(const Problem& p, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(p.n_tok * p.ldy), NAN);
  std::vector<uint8_t> scratch(matmul_scratch_bytes(p.type, p.n_in, p.n_tok));
  matmul(p.view(), p.x.data(), p.ldx, p.n_tok, y.data(), p.ldy, pool,
         scratch.empty() ? nullptr : scratch.data());
  return y;
}

void expect_close(const Problem& p, const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& scale, double rel) {
  int bad = 0;
  for (int64_t t = 0; t < p.n_tok; ++t)
    for (int64_t o = 0; o < p.n_out; ++o) {
      const float g = got[t * p.ldy + o], r = want[t * p.ldy + o];
      const double tol = rel * scale[t * p.n_out + o] + 1e-30;
      if (!(std::fabs(static_cast<double>(g) - r) <= tol) && ++bad <= 5)
        ADD_FAILURE() << qtype_name(p.type) << " " << p.n_out << "x" << p.n_in << " tokens "
                      << p.n_tok << ": y[" << t << "," << o << "] = " << g << ", ref " << r
                      << ", tol " << tol;
    }
}

// (n_out, n_in, n_tokens): every n_out x n_in with 1 and 5 tokens, plus
// larger batches on some shapes (prefill tiles, the split by tokens).
std::vector<std::array<int64_t, 3>> shapes(uint32_t block) {
  std::vector<std::array<int64_t, 3>> out;
  for (int64_t n_in : {32, 256, 768, 2816}) {
    if (n_in % block) continue;
    for (int64_t n_out : {1, 7, 33, 257})
      for (int64_t n_tok : {1, 5}) out.push_back({n_out, n_in, n_tok});
  }
  const int64_t small_in = block == 256 ? 256 : 32;
  for (auto s : std::vector<std::array<int64_t, 3>>{{33, 768, 17},
                                                    {257, small_in, 64},
                                                    {7, 2816, 64},
                                                    {1, small_in, 64},
                                                    {257, 768, 2},
                                                    {33, small_in, 17}})
    if (s[1] % block == 0) out.push_back(s);
  return out;
}

class MatmulTest : public ::testing::TestWithParam<QType> {};

TEST_P(MatmulTest, SimdMatchesReferenceOnEveryTarget) {
  const QType t = GetParam();
  ThreadPool pool(3);  // more threads than cores: uneven splits
  uint64_t seed = 1;
  for (auto [n_out, n_in, n_tok] : shapes(qtype_traits(t).block_elems)) {
    const Problem p = make_problem(t, n_out, n_in, n_tok, seed++);
    const auto want = run_ref(p);
    const auto scale = abs_dots(p);
    for_each_target([&] { expect_close(p, run_simd(p, pool), want, scale, 1e-5); });
    if (HasFailure()) return;
  }
}

// Batched decode and speculative verification: every batch size from 1 to 17
// (the token groups of every target, and one past the packed kernel's
// threshold), on row counts that are not a multiple of any tile and strides
// ldx / ldy unlike n_in / n_out (make_problem), split over threads by rows
// (37 rows) and by tokens (3 rows).
TEST_P(MatmulTest, EverySmallBatchMatchesReference) {
  const QType t = GetParam();
  const int64_t block = qtype_traits(t).block_elems;
  const int64_t n_in = block == 256 ? 768 : 96;
  ThreadPool pool(2);
  uint64_t seed = 500;
  for (int64_t n_out : {37, 3})
    for (int64_t n_tok = 1; n_tok <= 17; ++n_tok) {
      const Problem p = make_problem(t, n_out, n_in, n_tok, seed++);
      const auto want = run_ref(p);
      const auto scale = abs_dots(p);
      for_each_target([&] { expect_close(p, run_simd(p, pool), want, scale, 1e-5); });
      if (HasFailure()) return;
    }
}

// The reference matmul differs from y = x . W_deq^T only by rounding the
// activations to activation_type(): at most half a quantization step
// (block amax / 254) per element for the 8-bit formats, doubled to cover the
// f16 rounding of the block scale d and of Q8_1's s; 2^-11 (f16) or 2^-8
// (bf16) relative per element for the float formats.
TEST_P(MatmulTest, ReferenceMatchesDequantizedF32) {
  const QType t = GetParam();
  const QType at = activation_type(t);
  const int64_t n_in = 768, n_out = 9, n_tok = 3;
  const Problem p = make_problem(t, n_out, n_in, n_tok, 77);
  const auto got = run_ref(p);
  const int64_t blk = at == QType::Q8_K ? 256 : 32;
  for (int64_t tk = 0; tk < n_tok; ++tk) {
    const float* x = p.x.data() + tk * p.ldx;
    for (int64_t o = 0; o < n_out; ++o) {
      const float* w = p.w_deq.data() + o * n_in;
      double exact = 0, bound = 0, s = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        exact += static_cast<double>(w[i]) * x[i];
        s += std::fabs(static_cast<double>(w[i]) * x[i]);
      }
      if (at == QType::Q8_0 || at == QType::Q8_1 || at == QType::Q8_K) {
        for (int64_t b = 0; b < n_in; b += blk) {
          float amax = 0;
          for (int64_t i = b; i < b + blk; ++i) amax = std::max(amax, std::fabs(x[i]));
          for (int64_t i = b; i < b + blk; ++i) bound += 2.0 * std::fabs(w[i]) * amax / 254.0;
        }
      } else if (at == QType::F16) {
        bound = s * 0x1p-11;
      } else if (at == QType::BF16) {
        bound = s * 0x1p-8;
      }
      bound += 1e-5 * s;
      EXPECT_NEAR(got[tk * p.ldy + o], exact, bound) << qtype_name(t) << " t" << tk << " o" << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulTest, ::testing::ValuesIn(matmul_formats()),
                         [](const auto& info) { return std::string(qtype_name(info.param)); });

TEST(Matmul, FormatTable) {
  EXPECT_EQ(activation_type(QType::Q4_K), QType::Q8_K);
  EXPECT_EQ(activation_type(QType::Q6_K), QType::Q8_K);
  EXPECT_EQ(activation_type(QType::Q8_0), QType::Q8_0);
  EXPECT_EQ(activation_type(QType::Q4_0), QType::Q8_0);
  EXPECT_EQ(activation_type(QType::Q5_0), QType::Q8_0);
  EXPECT_EQ(activation_type(QType::Q4_1), QType::Q8_1);
  EXPECT_EQ(activation_type(QType::Q5_1), QType::Q8_1);
  EXPECT_EQ(activation_type(QType::F16), QType::F16);
  EXPECT_EQ(activation_type(QType::BF16), QType::BF16);
  EXPECT_EQ(activation_type(QType::F32), QType::F32);
  for (const auto& tr : all_qtypes())
    EXPECT_EQ(matmul_supported(tr.type), tr.dequantize != nullptr) << tr.name;
  EXPECT_FALSE(matmul_supported(QType::IQ2_XXS));
  EXPECT_EQ(matmul_scratch_bytes(QType::F32, 4096, 512), 0u);
  EXPECT_GE(matmul_scratch_bytes(QType::Q8_0, 4096, 2), 2 * qtype_row_bytes(QType::Q8_0, 4096));
}

// matmul_batch against one matmul per job, bit for bit: the kernels and their
// per-output sums are the same, only the split differs. The batch mixes
// formats (activation rows Q8_K, Q8_0 with and without a code offset, Q8_1,
// f16, f32 read directly), token counts on both sides of the packed kernels'
// thresholds (0, 1, 5, 7, 16, 17), row counts no unit divides, an empty
// matrix, and runs of jobs that share their input (quantized once: gate and
// up of an expert) beside jobs whose input is the same memory but another
// format (not shared). Outputs are written with strides; the padding between
// rows must stay untouched.
TEST(MatmulBatch, MatchesOneMatmulPerJobBitForBit) {
  struct Spec {
    QType type;
    int64_t n_out, n_in, n_tok;
    int input;  // jobs with the same input index read the same x
  };
  const std::vector<Spec> specs = {
      {QType::Q4_K, 257, 768, 1, 0},  {QType::Q4_K, 33, 768, 1, 0}, {QType::Q6_K, 7, 768, 1, 0},
      {QType::Q4_K, 96, 256, 0, 1},   {QType::Q8_0, 300, 96, 5, 2}, {QType::Q4_0, 300, 96, 5, 2},
      {QType::Q4_1, 37, 96, 7, 2},    {QType::F16, 41, 96, 7, 2},   {QType::F32, 9, 96, 7, 2},
      {QType::Q4_K, 0, 256, 3, 3},    {QType::Q4_K, 65, 256, 3, 3}, {QType::Q5_K, 129, 256, 16, 4},
      {QType::Q4_K, 129, 256, 17, 4}, {QType::Q6_K, 5, 256, 17, 4}, {QType::Q8_0, 70, 64, 1, 5}};
  // One x per input index: as many rows and columns as its widest job.
  std::vector<std::vector<float>> inputs(6);
  std::vector<int64_t> input_ld(6, 0);
  for (const Spec& sp : specs) input_ld[sp.input] = std::max(input_ld[sp.input], sp.n_in + 3);
  for (size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = test::random_normal(static_cast<size_t>(17 * input_ld[i]), 900 + i, 1.0f);

  std::vector<Problem> problems;
  for (size_t j = 0; j < specs.size(); ++j) {
    const Spec& sp = specs[j];
    Problem p = make_problem(sp.type, sp.n_out, sp.n_in, std::max<int64_t>(sp.n_tok, 1), 700 + j);
    p.n_tok = sp.n_tok;
    problems.push_back(std::move(p));
  }
  for (int threads : {1, 2, 3})
    for_each_target([&] {
      ThreadPool pool(threads);
      SCOPED_TRACE(threads);
      std::vector<MatmulJob> jobs;
      std::vector<std::vector<float>> got(specs.size());
      for (size_t j = 0; j < specs.size(); ++j) {
        const Problem& p = problems[j];
        got[j].assign(static_cast<size_t>(std::max<int64_t>(p.n_tok, 1) * p.ldy), NAN);
        MatmulJob m;
        m.w = p.view();
        m.x = inputs[specs[j].input].data();
        m.ldx = input_ld[specs[j].input];
        m.n_tokens = p.n_tok;
        m.y = got[j].data();
        m.ldy = p.ldy;
        jobs.push_back(m);
      }
      std::vector<uint8_t> scratch(matmul_batch_scratch_bytes(jobs));
      // Shared inputs are quantized once: less scratch than a job at a time.
      size_t unshared = 64;
      for (const MatmulJob& m : jobs)
        if (m.n_tokens > 0 && m.w.n_out > 0 && activation_type(m.w.type) != QType::F32)
          unshared += matmul_scratch_bytes(m.w.type, m.w.n_in, m.n_tokens) - 64;
      EXPECT_LT(scratch.size(), unshared);
      matmul_batch(jobs, pool, scratch.data(), scratch.size());
      for (size_t j = 0; j < jobs.size(); ++j) {
        const MatmulJob& m = jobs[j];
        std::vector<float> want(got[j].size(), NAN);
        std::vector<uint8_t> s1(
            matmul_scratch_bytes(m.w.type, m.w.n_in, std::max<int64_t>(m.n_tokens, 1)) + 64);
        matmul(m.w, m.x, m.ldx, m.n_tokens, want.data(), m.ldy, pool, s1.data());
        ASSERT_EQ(0, std::memcmp(got[j].data(), want.data(), want.size() * sizeof(float)))
            << "job " << j << " (" << qtype_name(m.w.type) << " " << m.w.n_out << "x" << m.w.n_in
            << ", " << m.n_tokens << " tokens)";
        if (m.n_tokens > 0 && m.w.n_out > 0) {
          EXPECT_FALSE(std::isnan(got[j][0])) << "job " << j;
        }
      }
    });
}

// ---------------------------------------------------------------------------
// Elementwise ops.

constexpr int64_t kSizes[] = {1, 7, 33, 257, 2816};

void expect_rel(const std::vector<float>& got, const std::vector<float>& want, double rel,
                double abs_floor, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs_floor) << what << " i=" << i;
}

// The vectorised Q8_0 activation row against tensor/'s scalar quantize_q8_0
// plus the sums the kernels read, byte for byte, on every target: random
// rows, outliers, exact halves (x / d = k + 0.5, which C's roundf takes away
// from zero), zeros, subnormals whose 1 / d overflows, infinities, and a NaN
// at each position of a block.
// The vectorised Q8_K activation row against tensor/'s quantize_q8_k, byte
// for byte, on every target: the sign of the first largest-magnitude element
// (a later element of equal magnitude and the other sign must not win),
// halves rounding to even, clamping, zeros, subnormals, and blocks with an
// infinity or a NaN (the scalar code's own results).
// Repacked weights (tensor/row_tiles.h, `--repack`), on CPUs whose kernels
// read them (AVX-512 VNNI); elsewhere the tests skip.
WeightView tiled_view(const Problem& p, std::vector<uint8_t>& store) {
  store.assign(row_tiles_bytes(p.type, p.n_out, p.n_in), 0);
  return repack_rows(p.view(), store.data());
}

constexpr QType kTileFormats[] = {QType::Q4_0, QType::Q5_0, QType::Q8_0, QType::Q4_K, QType::Q6_K};

// Elements of a block of a repacked format: a shape's n_in is a multiple.
int64_t tile_block(QType t) {
  return t == QType::Q4_K || t == QType::Q6_K ? 256 : 32;
}

std::vector<float> run_view(const WeightView& v, const Problem& p, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(p.n_tok * p.ldy), NAN);
  std::vector<uint8_t> scratch(matmul_scratch_bytes(p.type, p.n_in, p.n_tok));
  matmul(v, p.x.data(), p.ldx, p.n_tok, y.data(), p.ldy, pool, scratch.data());
  return y;
}

// Against the reference on rows no group of 16 divides, inputs of 1 to 88
// blocks, token counts around the kernel's group of 8, split over more
// threads than cores; and the reference reading the repacked view (row by
// row, through from_row_tiles) agrees with itself reading the rows.
TEST(RowTilesMatmul, MatchesTheReferenceOnAwkwardShapes) {
  if (!row_tiles_available(QType::Q5_0)) GTEST_SKIP() << "no repacked-weight kernels on this CPU";
  ThreadPool pool(3);
  uint64_t seed = 3000;
  for (QType t : kTileFormats)
    for (int64_t n_out : {1, 3, 16, 17, 37, 257})
      for (int64_t n_in : {32, 96, 256, 768, 2816})
        for (int64_t n_tok : {1, 5, 8, 9, 17}) {
          if (n_out * n_in * n_tok > 4'000'000 || n_in % tile_block(t) != 0) continue;
          const Problem p = make_problem(t, n_out, n_in, n_tok, seed++);
          std::vector<uint8_t> store;
          const WeightView tv = tiled_view(p, store);
          const auto want = run_ref(p);
          expect_close(p, run_view(tv, p, pool), want, abs_dots(p), 1e-5);
          std::vector<float> ref_tiled(want.size(), NAN);
          ref::matmul(tv, p.x.data(), p.ldx, p.n_tok, ref_tiled.data(), p.ldy);
          for (int64_t i = 0; i < p.n_tok; ++i)
            ASSERT_EQ(std::memcmp(ref_tiled.data() + i * p.ldy, want.data() + i * p.ldy,
                                  static_cast<size_t>(n_out) * sizeof(float)),
                      0);
          if (HasFailure()) return;
        }
  // Prefill-sized: 64 tokens; over 8192 inputs their activation rows pass
  // the walk's L2 chunk (512 KB), so the tokens go in several chunks (the
  // case fails with a chunk's tokens skipped).
  for (QType t : {QType::Q5_0, QType::Q4_K, QType::Q6_K})
    for (int64_t n_in : {768, 8192}) {
      const Problem p = make_problem(t, 33, n_in, 64, 77);
      std::vector<uint8_t> store;
      expect_close(p, run_view(tiled_view(p, store), p, pool), run_ref(p), abs_dots(p), 1e-5);
    }
}

// Each token's row sums come out bit for bit as a one-token call computes
// them, whatever else is in the call (the kernel is batch invariant).
TEST(RowTilesMatmul, EveryTokenAsItsOwnCallComputesIt) {
  if (!row_tiles_available(QType::Q5_0)) GTEST_SKIP() << "no repacked-weight kernels on this CPU";
  ThreadPool pool(2);
  for (QType t : kTileFormats)
    for (int64_t n_tok : {2, 7, 8, 9, 16, 17}) {
      const Problem p =
          make_problem(t, 37, 3 * tile_block(t), n_tok, 4000 + static_cast<uint64_t>(n_tok));
      std::vector<uint8_t> store;
      const WeightView tv = tiled_view(p, store);
      const auto all = run_view(tv, p, pool);
      for (int64_t i = 0; i < n_tok; ++i) {
        std::vector<float> one(static_cast<size_t>(p.n_out));
        std::vector<uint8_t> scratch(matmul_scratch_bytes(t, p.n_in, 1));
        matmul(tv, p.x.data() + i * p.ldx, p.ldx, 1, one.data(), p.n_out, pool, scratch.data());
        ASSERT_EQ(std::memcmp(one.data(), all.data() + i * p.ldy, one.size() * sizeof(float)), 0)
            << qtype_name(t) << " token " << i << " of " << n_tok;
      }
    }
}

// Many tokens of a repacked Q4_K / Q6_K matrix run the packed prefill
// kernel fed from the groups: bit for bit what the rows' packed kernel gives
// (the same codes, scales and sums), on rows no 16 divides, inputs of one
// slice and of several (2048 elements a slice), through matmul and
// matmul_batch. With batch invariance asked for, the tile kernel stays:
// every token as its own one-token call (over two slices: within one, the
// two kernels happen to add in the same order).
TEST(RowTilesMatmul, PrefillFromGroupsIsTheRowsPackedPrefill) {
  if (!row_tiles_available(QType::Q4_K)) GTEST_SKIP() << "no repacked-weight kernels on this CPU";
  ThreadPool pool(3);
  uint64_t seed = 7000;
  for (QType t : {QType::Q4_K, QType::Q6_K})
    for (int64_t n_out : {1, 17, 300})
      for (int64_t n_in : {256, 2304, 4096})
        for (int64_t n_tok : {32, 35, 64}) {
          const Problem p = make_problem(t, n_out, n_in, n_tok, seed++);
          std::vector<uint8_t> store;
          const WeightView tv = tiled_view(p, store);
          const auto rows = run_view(p.view(), p, pool);
          const auto tiles = run_view(tv, p, pool);
          for (int64_t i = 0; i < n_tok; ++i)
            ASSERT_EQ(std::memcmp(rows.data() + i * p.ldy, tiles.data() + i * p.ldy,
                                  static_cast<size_t>(n_out) * sizeof(float)),
                      0)
                << qtype_name(t) << " " << n_out << "x" << n_in << " token " << i << " of "
                << n_tok;
          std::vector<float> batched(tiles.size(), NAN);
          const MatmulJob job{tv, p.x.data(), p.ldx, n_tok, batched.data(), p.ldy};
          std::vector<uint8_t> scratch(matmul_batch_scratch_bytes({&job, 1}));
          matmul_batch({&job, 1}, pool, scratch.data(), scratch.size());
          ASSERT_EQ(std::memcmp(batched.data(), tiles.data(), tiles.size() * sizeof(float)), 0);
        }
  for (QType t : {QType::Q4_K, QType::Q6_K}) {
    const Problem p = make_problem(t, 37, 4096, 33, 7500);
    std::vector<uint8_t> store;
    const WeightView tv = tiled_view(p, store);
    set_batch_invariant(true);
    const auto all = run_view(tv, p, pool);
    std::vector<float> one(static_cast<size_t>(p.n_out));
    std::vector<uint8_t> scratch(matmul_scratch_bytes(t, p.n_in, 1));
    bool same = true;
    for (int64_t i = 0; i < p.n_tok && same; ++i) {
      matmul(tv, p.x.data() + i * p.ldx, p.ldx, 1, one.data(), p.n_out, pool, scratch.data());
      same = std::memcmp(one.data(), all.data() + i * p.ldy, one.size() * sizeof(float)) == 0;
    }
    set_batch_invariant(false);
    EXPECT_TRUE(same) << qtype_name(t) << ": a token of 33 in the batch-invariant mode";
  }
}

// matmul_batch with a row prologue: the prologue makes each input row (an
// RMS norm of a source row, as the transformer's blocks ask) once, before
// the row is quantized or read, and the products are bit for bit those of
// the rows made first and matmul_batch without it. The input starts as NaN,
// so a row quantized before its prologue ran shows in the output. Jobs of
// several formats (Q8_K, Q8_0 rows, f16 and f32 read directly) and token
// counts (the prologue makes as many rows as the longest job; 1 and 2 rows
// are made on the caller, 5 and 19 split over the threads), 1-3 threads.
TEST(MatmulBatch, RowPrologueMakesEachRowBeforeItIsRead) {
  const int64_t n_in = 512, ld = n_in + 7;
  const std::vector<float> src = test::random_normal(static_cast<size_t>(19 * ld), 77, 1.0f);
  const std::vector<float> gain = test::random_normal(static_cast<size_t>(n_in), 78, 1.0f);
  struct Spec {
    QType type;
    int64_t n_out;
  };
  const std::vector<Spec> specs = {
      {QType::Q4_K, 70}, {QType::Q6_K, 33}, {QType::Q8_0, 48}, {QType::F16, 17}, {QType::F32, 9}};
  for (const int64_t n_tok : {1, 2, 5, 19})
    for (int threads : {1, 2, 3})
      for_each_target([&] {
        SCOPED_TRACE(::testing::Message() << n_tok << " tokens, " << threads << " threads");
        ThreadPool pool(threads);
        std::vector<float> x(src.size(), NAN), x_first(src.size(), NAN);
        std::vector<Problem> problems;
        std::vector<MatmulJob> jobs, jobs_first;
        std::vector<std::vector<float>> got(specs.size()), want(specs.size());
        for (size_t j = 0; j < specs.size(); ++j) {
          problems.push_back(make_problem(specs[j].type, specs[j].n_out, n_in, n_tok, 40 + j));
          const Problem& p = problems.back();
          // The last job takes one token fewer where it can: rows past a
          // job's count are still made for the others.
          const int64_t t = j + 1 == specs.size() ? std::max<int64_t>(1, n_tok - 1) : n_tok;
          got[j].assign(static_cast<size_t>(n_tok * p.ldy), NAN);
          want[j] = got[j];
          jobs.push_back({p.view(), x.data(), ld, t, got[j].data(), p.ldy});
          jobs_first.push_back({p.view(), x_first.data(), ld, t, want[j].data(), p.ldy});
        }
        struct Ctx {
          const float *src, *gain;
          float* x;
          int64_t ld, n;
          std::atomic<int>* calls;
        };
        std::vector<std::atomic<int>> calls(static_cast<size_t>(n_tok));
        const Ctx ctx{src.data(), gain.data(), x.data(), ld, n_in, calls.data()};
        const RowPrologue prologue{[](const void* p, int64_t t) {
                                     const auto& c = *static_cast<const Ctx*>(p);
                                     rms_norm(c.src + t * c.ld, c.gain, c.x + t * c.ld, c.n, 1e-5f);
                                     c.calls[t].fetch_add(1);
                                   },
                                   &ctx};
        std::vector<uint8_t> scratch(matmul_batch_scratch_bytes(jobs));
        matmul_batch(jobs, pool, scratch.data(), scratch.size(), prologue);
        for (int64_t t = 0; t < n_tok; ++t) {
          EXPECT_EQ(calls[static_cast<size_t>(t)].load(), 1) << "row " << t;
          rms_norm(src.data() + t * ld, gain.data(), x_first.data() + t * ld, n_in, 1e-5f);
        }
        matmul_batch(jobs_first, pool, scratch.data(), scratch.size());
        for (size_t j = 0; j < jobs.size(); ++j) {
          ASSERT_EQ(0, std::memcmp(got[j].data(), want[j].data(), got[j].size() * sizeof(float)))
              << "job " << j << " (" << qtype_name(specs[j].type) << ")";
          EXPECT_FALSE(std::isnan(got[j][0])) << "job " << j;
        }
      });
}

// matmul_batch runs repacked jobs beside row jobs, one input shared, and
// gives what one matmul per job gives, bit for bit; get_row reads a
// repacked row as it reads the row.
TEST(RowTilesMatmul, BatchJobsAndGetRow) {
  if (!row_tiles_available(QType::Q5_0)) GTEST_SKIP() << "no repacked-weight kernels on this CPU";
  ThreadPool pool(2);
  struct Spec {
    QType type;
    int64_t n_out;
    bool tiled;
  };
  const std::vector<Spec> specs = {{QType::Q5_0, 50, true}, {QType::Q5_0, 17, false},
                                   {QType::Q8_0, 33, true}, {QType::Q4_0, 300, true},
                                   {QType::Q4_K, 40, true}, {QType::Q4_K, 18, false},
                                   {QType::Q6_K, 24, true}, {QType::Q6_K, 9, false}};
  for (int64_t n_tok : {1, 3, 9}) {
    std::vector<Problem> ps;
    std::vector<std::vector<uint8_t>> stores(specs.size());
    std::vector<WeightView> views;
    for (size_t j = 0; j < specs.size(); ++j) {
      ps.push_back(make_problem(specs[j].type, specs[j].n_out, 256, n_tok, 5000 + j));
      ps.back().x = ps.front().x;  // one input for every job
      views.push_back(specs[j].tiled ? tiled_view(ps.back(), stores[j]) : ps.back().view());
    }
    std::vector<MatmulJob> jobs;
    std::vector<std::vector<float>> got(specs.size());
    for (size_t j = 0; j < specs.size(); ++j) {
      got[j].assign(static_cast<size_t>(n_tok * ps[j].ldy), NAN);
      jobs.push_back({views[j], ps[0].x.data(), ps[0].ldx, n_tok, got[j].data(), ps[j].ldy});
    }
    std::vector<uint8_t> scratch(matmul_batch_scratch_bytes(jobs));
    matmul_batch(jobs, pool, scratch.data(), scratch.size());
    for (size_t j = 0; j < specs.size(); ++j) {
      const auto want = run_view(views[j], ps[j], pool);
      for (int64_t i = 0; i < n_tok; ++i)
        ASSERT_EQ(std::memcmp(got[j].data() + i * ps[j].ldy, want.data() + i * ps[j].ldy,
                              static_cast<size_t>(ps[j].n_out) * sizeof(float)),
                  0)
            << "job " << j << " token " << i << " of " << n_tok;
    }
  }
  for (QType t : kTileFormats) {
    const Problem p = make_problem(t, 21, 256, 1, 6000);
    std::vector<uint8_t> store;
    const WeightView tv = tiled_view(p, store);
    std::vector<float> a(256), b(256);
    for (int64_t r : {0, 15, 16, 20}) {
      get_row(p.view(), r, a.data());
      get_row(tv, r, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << r;
    }
  }
}

TEST(Elementwise, QuantizeQ8_KActivationIsBitExact) {
  const int64_t n_in = 512;  // 2 blocks
  std::vector<std::vector<float>> rows;
  rows.push_back(random_normal(n_in, 21));
  rows.push_back(random_with_outliers(n_in, 22));
  {
    std::vector<float> r = random_normal(n_in, 23);
    r[3] = -9.0f, r[10] = 9.0f;             // block 0: the first, negative, sets the sign
    r[256 + 7] = 9.0f, r[256 + 8] = -9.0f;  // block 1: the first, positive
    rows.push_back(r);
  }
  {
    std::vector<float> r(n_in);  // iscale = 1 (max = -127): every code a half
    for (int64_t i = 0; i < n_in; ++i) r[i] = static_cast<float>(i % 200) - 99.5f;
    r[0] = r[256] = -127.0f;
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(n_in, 0.0f));
  {
    std::vector<float> r(n_in, 1e-44f);
    r[3] = -1e-45f;
    r[300] = 3e-39f;
    rows.push_back(r);
  }
  {
    std::vector<float> r = random_normal(n_in, 24);
    r[5] = INFINITY;
    r[300] = 3e38f;
    r[301] = -3e38f;
    rows.push_back(r);
  }
  for (int pos : {0, 15, 16, 255}) {
    std::vector<float> r = random_normal(n_in, 25 + pos);
    r[256 + pos] = NAN;
    rows.push_back(r);
  }
  const size_t bytes = static_cast<size_t>(n_in / 256) * sizeof(BlockQ8_K);
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    std::vector<uint8_t> want(bytes, 0);
    quantize_q8_k(rows[ri].data(), want.data(), n_in);
    for_each_target([&] {
      std::vector<uint8_t> got(bytes, 0xAB);
      cpu::quantize_q8_k_activation(rows[ri].data(), got.data(), n_in);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "row " << ri;
    });
    if (HasFailure()) return;
  }
}

TEST(Elementwise, QuantizeQ8_0ActivationIsBitExact) {
  const int64_t n_in = 160;  // 5 blocks
  std::vector<std::vector<float>> rows;
  rows.push_back(random_normal(n_in, 11));
  rows.push_back(random_with_outliers(n_in, 12));
  {
    std::vector<float> r(n_in);
    for (int64_t i = 0; i < n_in; ++i) r[i] = 0.5f * static_cast<float>(i % 64) - 16.0f;
    for (int64_t b = 0; b < n_in / 32; ++b) r[b * 32] = 127.0f;  // d = 1: halves stay halves
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(n_in, 0.0f));
  {
    std::vector<float> r(n_in, 1e-44f);
    r[3] = -1e-45f;
    r[40] = 3e-39f;
    rows.push_back(r);
  }
  {
    std::vector<float> r = random_normal(n_in, 13);
    r[5] = INFINITY;
    r[70] = -INFINITY;
    r[100] = 3e38f;
    rows.push_back(r);
  }
  for (int pos : {0, 7, 15, 16, 31}) {
    std::vector<float> r = random_normal(n_in, 14 + pos);
    r[32 + pos] = NAN;
    rows.push_back(r);
  }
  const size_t bytes = cpu::q8_0_row_bytes(n_in);
  for (int offset : {0, 8, 16}) {
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      const std::vector<float>& x = rows[ri];
      std::vector<uint8_t> want(bytes, 0);
      quantize_q8_0(x.data(), want.data(), n_in);
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(want.data());
      auto* sums = reinterpret_cast<int32_t*>(want.data() + cpu::q8_0_sums_offset(n_in));
      auto* scales = reinterpret_cast<float*>(want.data() + cpu::q8_0_scales_offset(n_in));
      auto* lanes = reinterpret_cast<int32_t*>(want.data() + cpu::q8_0_lanesums_offset(n_in));
      for (int64_t b = 0; b < n_in / 32; ++b) {
        sums[b] = 0;
        for (int j = 0; j < 32; ++j) sums[b] += blk[b].qs[j];
        scales[b] = f16_to_f32(blk[b].d);
      }
      for (int64_t g = 0; offset != 0 && g < n_in / 4; ++g) {
        const int8_t* q = blk[g / 8].qs + 4 * (g % 8);
        lanes[g] = -offset * (q[0] + q[1] + q[2] + q[3]);
      }
      for_each_target([&] {
        std::vector<uint8_t> got(bytes, 0);
        cpu::quantize_q8_0_activation(x.data(), got.data(), n_in, offset);
        // Scales compare as bits (a NaN block's scale is NaN on both sides).
        EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
            << "row " << ri << ", code offset " << offset;
      });
      if (HasFailure()) return;
    }
  }
}

TEST(Elementwise, ToF16IsBitForBitTheScalarConversion) {
  std::vector<float> x = random_normal(300, 41, 100.0f);
  // Halfway and rounding boundaries, overflow, subnormals, specials.
  for (float v :
       {0.0f,     -0.0f,    1.0f,     65504.0f,   65519.0f, 65519.99f,  65520.0f,   1e6f,
        0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1.002p0f, 0x1.003p0f, 0x1.001p0f,
        1e-45f,   3e-39f,   INFINITY, -INFINITY,  NAN,      -NAN})
    for (float sign : {1.0f, -1.0f}) x.push_back(sign * v);
  uint32_t payload = 0xffa12345u;  // a signalling NaN with a payload in its high bits
  float snan;
  std::memcpy(&snan, &payload, 4);
  x.push_back(snan);
  for (int i = 0; i < 17; ++i) x.push_back(static_cast<float>(i) * 0.3333f);
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, x.size()}) {
    std::vector<uint16_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = f32_to_f16(x[i]);
    for_each_target([&] {
      std::vector<uint16_t> got(n, 0xdead);
      to_f16(x.data(), got.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], want[i]) << "x[" << i << "] = " << x[i] << ", n = " << n;
    });
    if (HasFailure()) return;
  }
}

TEST(Elementwise, RmsNorm) {
  for (int64_t n : kSizes) {
    const auto x = random_normal(static_cast<size_t>(n), n, 3.0f);
    const auto g = random_normal(static_cast<size_t>(n), n + 1);
    for (const float* weight : {g.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> want(x.size());
      ref::rms_norm(x.data(), weight, want.data(), n, 1e-5f);
      for_each_target([&] {
        std::vector<float> got(x.size());
        rms_norm(x.data(), weight, got.data(), n, 1e-5f);
        // f32 vs double sum of squares: a relative 1e-6 change of the scale.
        expect_rel(got, want, 1e-5, 0, "rms_norm");
        std::vector<float> inplace = x;
        rms_norm(inplace.data(), weight, inplace.data(), n, 1e-5f);
        expect_rel(inplace, want, 1e-5, 0, "rms_norm in place");
      });
    }
  }
}

// A gated unit runs over all of a step's rows at once (T x n_ff elements):
// every element must come out the same wherever the array is split, or a
// token's result would depend on how many rows share its step (the tail is
// padded, not computed another way).
template <class Fn>
void expect_same_bits_split(Fn fn, const std::vector<float>& gate, const std::vector<float>& up,
                            const std::vector<float>& whole, const char* what) {
  const auto n = static_cast<int64_t>(gate.size());
  for (int64_t k : {int64_t{1}, n / 3, n - 1}) {
    if (k <= 0 || k >= n) continue;
    std::vector<float> parts(gate.size());
    fn(gate.data(), up.data(), parts.data(), k);
    fn(gate.data() + k, up.data() + k, parts.data() + k, n - k);
    EXPECT_EQ(parts, whole) << what << ": n " << n << " split at " << k;
  }
}

TEST(Elementwise, GegluAgainstTheTanhFormula) {
  for (int64_t n : kSizes) {
    auto gate = random_normal(static_cast<size_t>(n), n + 3, 3.0f);
    if (n > 7) gate[1] = -60.0f, gate[4] = 50.0f, gate[6] = 0.0f;  // saturated tails, zero
    const auto up = random_normal(static_cast<size_t>(n), n + 11);
    std::vector<float> want(gate.size());
    ref::geglu(gate.data(), up.data(), want.data(), n);
    for_each_target([&] {
      std::vector<float> got(gate.size());
      geglu(gate.data(), up.data(), got.data(), n);
      // x / (1 + exp(-2u)) against 0.5 x (1 + tanh u) in double: a few ulp,
      // more where 1 + tanh u cancels (large negative x, tiny values).
      expect_rel(got, want, 2e-6, 1e-12, "geglu");
      expect_same_bits_split(geglu, gate, up, got, "geglu");
    });
  }
}

TEST(Elementwise, ExpWeights) {
  for (int64_t n : kSizes) {
    auto x = random_normal(static_cast<size_t>(n), n + 11, 6.0f);
    if (n > 9) {
      x[1] = NAN, x[2] = -INFINITY, x[4] = -1000.0f;  // undefined, masked, far below -87
      x[6] = 40.0f, x[8] = 40.0f;                     // the maximum, twice
    }
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v);  // (std::max keeps mx over NaN)
    for (const float t : {1.0f, 0.7f, 1.3f}) {
      const float m = mx / t;
      std::vector<float> want(x.size());
      ref::exp_weights(x.data(), t, m, want.data(), n);
      for_each_target([&] {
        std::vector<float> got(x.size());
        exp_weights(x.data(), t, m, got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          if (want[i] == 0.0f || want[i] == 1.0f) {
            EXPECT_EQ(got[i], want[i]) << "n " << n << " t " << t << " i " << i;
          } else {
            EXPECT_NEAR(got[i], want[i], 4e-7 * want[i]) << "n " << n << " t " << t << " i " << i;
          }
        }
        // The same bits however the array is split (the tail is padded, not
        // computed another way).
        for (int64_t k : {int64_t{1}, n / 3, n - 1}) {
          if (k <= 0 || k >= n) continue;
          std::vector<float> parts(x.size());
          exp_weights(x.data(), t, m, parts.data(), k);
          exp_weights(x.data() + k, t, m, parts.data() + k, n - k);
          EXPECT_EQ(parts, got) << "n " << n << " split at " << k;
        }
      });
    }
  }
  // Every value -inf (all masked): each is the maximum and weighs 1.
  const std::vector<float> masked(5, -INFINITY);
  std::vector<float> w(5);
  exp_weights(masked.data(), 1.0f, -INFINITY, w.data(), 5);
  EXPECT_EQ(w, std::vector<float>(5, 1.0f));
}

TEST(Elementwise, SwigluAddSoftmax) {
  for (int64_t n : kSizes) {
    auto gate = random_normal(static_cast<size_t>(n), n, 4.0f);
    if (n > 7) gate[3] = -120.0f, gate[5] = 95.0f;  // far tails of exp
    const auto up = random_normal(static_cast<size_t>(n), n + 7);
    std::vector<float> want(gate.size());
    ref::swiglu(gate.data(), up.data(), want.data(), n);
    auto logits = random_normal(static_cast<size_t>(n), n + 9, 6.0f);
    if (n > 7) logits[2] = -INFINITY;  // a masked position
    std::vector<float> want_sm = logits;
    ref::softmax(want_sm.data(), n);
    for_each_target([&] {
      std::vector<float> got(gate.size());
      swiglu(gate.data(), up.data(), got.data(), n);
      // Exp within 1 ulp, then a division: a few ulp.
      expect_rel(got, want, 1e-6, 1e-30, "swiglu");
      expect_same_bits_split(swiglu, gate, up, got, "swiglu");
      std::vector<float> sum = gate, sum_ref = gate;
      add(sum.data(), up.data(), n);
      ref::add(sum_ref.data(), up.data(), n);
      EXPECT_EQ(sum, sum_ref);
      std::vector<float> sm = logits;
      softmax(sm.data(), n);
      expect_rel(sm, want_sm, 1e-5, 1e-30, "softmax");
    });
  }
  // add_bias over rows.
  const auto b = random_normal(33, 5);
  auto y = random_normal(33 * 4, 6), y_ref = y;
  add_bias(y.data(), b.data(), 4, 33);
  ref::add_bias(y_ref.data(), b.data(), 4, 33);
  EXPECT_EQ(y, y_ref);
}

TEST(Elementwise, Rope) {
  const std::vector<float> factors = [] {
    std::vector<float> f(32);
    for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
    return f;
  }();
  struct Case {
    int head_dim, rope_dim;
    bool neox, freq_factors;
    float freq_scale, ext_factor;
  };
  for (const Case c :
       {Case{64, 64, false, false, 1.0f, 0.0f}, Case{64, 64, true, false, 1.0f, 0.0f},
        Case{128, 64, true, true, 1.0f, 0.0f}, Case{64, 64, false, true, 0.25f, 0.0f},
        Case{96, 32, false, false, 1.0f, 0.0f}, Case{64, 64, true, false, 0.25f, 1.0f}}) {
    RopeParams p;
    p.head_dim = c.head_dim;
    p.rope_dim = c.rope_dim;
    p.neox = c.neox;
    p.freq_base = 500000.0f;
    p.freq_scale = c.freq_scale;
    p.freq_factors = c.freq_factors ? factors.data() : nullptr;
    p.ext_factor = c.ext_factor;
    p.n_ctx_orig = 4096;
    const int n_heads = 5;
    for (int64_t pos : {0, 1, 17, 4000, 100000}) {
      const auto x = random_normal(static_cast<size_t>(n_heads * c.head_dim), pos + 3);
      std::vector<float> want = x;
      ref::rope(want.data(), n_heads, pos, p);
      for_each_target([&] {
        std::vector<float> got = x;
        rope(got.data(), n_heads, pos, p);
        // Same angles; a fused multiply-add rounds once instead of twice.
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-6 * (std::fabs(x[i]) + 1.0))
              << "pos " << pos << " i " << i;
      });
      // Dimensions past rope_dim pass through unchanged.
      for (int h = 0; h < n_heads; ++h)
        for (int i = c.rope_dim; i < c.head_dim; ++i)
          EXPECT_EQ(want[h * c.head_dim + i], x[h * c.head_dim + i]);
    }
  }
}

// The rope angles against their definition, computed directly in double:
// theta_i = pos * base^(-2i/d) / ff_i * freq_scale (no YaRN). llama.cpp's
// repeated multiplication drifts by a few ulp per step.
TEST(Elementwise, RopeCacheMatchesDefinition) {
  RopeParams p;
  p.head_dim = p.rope_dim = 128;
  p.freq_base = 10000.0f;
  p.freq_scale = 0.5f;
  const int64_t pos = 123;
  std::vector<float> c(64), s(64);
  ref::rope_cache(pos, p, c.data(), s.data());
  for (int i = 0; i < 64; ++i) {
    const double theta = 0.5 * pos * std::pow(10000.0, -2.0 * i / 128.0);
    EXPECT_NEAR(c[i], std::cos(theta), 1e-4) << i;
    EXPECT_NEAR(s[i], std::sin(theta), 1e-4) << i;
  }
}

TEST(Elementwise, GetRow) {
  for (QType t : matmul_formats()) {
    const Problem p = make_problem(t, 5, 512, 1, 3);
    for (int64_t r : {0, 4}) {
      std::vector<float> got(512), want(512);
      get_row(p.view(), r, got.data());
      ref::get_row(p.view(), r, want.data());
      EXPECT_EQ(got, want) << qtype_name(t);
      EXPECT_EQ(0, std::memcmp(got.data(), p.w_deq.data() + r * 512, 512 * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace sustain::kernels

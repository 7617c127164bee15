// The split-KV merge (merge.h) against its double reference (merge_ref) and
// both against the softmax over all keys at once: random scores and values
// cut into chunks at random places, empty chunks and rows that see no key of
// a chunk included, and maxima far apart (a chunk whose terms underflow).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "attention/merge.h"
#include "attention/ref.h"

namespace sustain::attention::test {
namespace {

// One row's keys: scores s[j] and values v[j * dv ..].
struct RowKeys {
  std::vector<double> s, v;
};

// The state of keys [b, e) of a row in double, as merge_ref takes it.
PartialState partial(const RowKeys& k, int b, int e, int dv) {
  PartialState p;
  p.o.assign(dv, 0.0);
  if (b >= e) return p;
  p.m = *std::max_element(k.s.begin() + b, k.s.begin() + e);
  for (int j = b; j < e; ++j) {
    const double w = std::exp(k.s[j] - p.m);
    p.l += w;
    for (int c = 0; c < dv; ++c) p.o[c] += w * k.v[size_t(j) * dv + c];
  }
  return p;
}

// softmax(s) · V over all n keys, in double.
std::vector<double> full_softmax(const RowKeys& k, int n, int dv) {
  std::vector<double> out(dv, 0.0);
  if (n == 0) return out;
  return merge_ref({partial(k, 0, n, dv)}, dv);
}

// Fills `rows` rows of n keys, cuts them at `cuts` (sorted, in [0, n]) and
// checks merge_state's result against merge_ref and the full softmax.
// Scores are N(0, spread) + ramp · j; a row sees keys [0, visible[r])
// (causal rows of a prefill block).
void check(int rows, int n, int dv, std::vector<int> cuts, const std::vector<int>& visible,
           double spread, double ramp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<RowKeys> keys(rows);
  for (RowKeys& k : keys) {
    k.s.resize(n);
    k.v.resize(size_t(n) * dv);
    for (int j = 0; j < n; ++j) k.s[j] = nd(rng) * spread + ramp * j;
    for (double& x : k.v) x = nd(rng);
  }
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(n);
  const int n_chunks = static_cast<int>(cuts.size()) - 1;

  // Chunk states in f32, laid out as attend()'s partials, and in double.
  const size_t floats = detail::state_floats(rows, dv);
  std::vector<float> buf(floats * n_chunks);
  float* base = buf.data();
  std::vector<std::vector<PartialState>> parts(rows);
  for (int c = 0; c < n_chunks; ++c) {
    const detail::State st = detail::state_at(base + floats * c, rows, dv);
    for (int r = 0; r < rows; ++r) {
      const int b = std::min(cuts[c], visible[r]), e = std::min(cuts[c + 1], visible[r]);
      const PartialState p = partial(keys[r], b, e, dv);
      parts[r].push_back(p);
      // A chunk that saw nothing is left as the kernel leaves it.
      st.m[r] = b < e ? float(p.m) : -std::numeric_limits<float>::infinity();
      st.l[r] = float(p.l);
      for (int k = 0; k < dv; ++k) st.o[size_t(r) * dv + k] = float(p.o[k]);
    }
  }

  const detail::State acc = detail::state_at(base, rows, dv);
  for (int c = 1; c < n_chunks; ++c)
    detail::merge_state(acc, detail::state_at(base + floats * c, rows, dv), rows, dv);

  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r << " of " << rows);
    const std::vector<double> ref = merge_ref(parts[r], dv);
    const std::vector<double> all = full_softmax(keys[r], std::min(n, visible[r]), dv);
    double scale = 1e-30;
    for (double x : all) scale = std::max(scale, std::abs(x));
    if (visible[r] == 0) {
      EXPECT_EQ(acc.l[r], 0.0f);
      for (double x : ref) EXPECT_EQ(x, 0.0);
      continue;
    }
    ASSERT_GT(acc.l[r], 0.0f);
    for (int k = 0; k < dv; ++k) {
      // The reference merge is the softmax over all keys, up to double rounding.
      EXPECT_NEAR(ref[k], all[k], 1e-12 * scale) << "column " << k;
      // The f32 merge of f32 states: a few ulps of f32 per chunk.
      const double got = double(acc.o[size_t(r) * dv + k]) / acc.l[r];
      EXPECT_NEAR(got, ref[k], 1e-5 * scale) << "column " << k;
    }
  }
}

TEST(AttentionMerge, TwoChunks) {
  check(4, 200, 64, {96}, {200, 200, 200, 200}, 1.0, 0.0, 1);
}

TEST(AttentionMerge, ManyChunksAwkwardCuts) {
  check(7, 1000, 40, {1, 2, 17, 300, 301, 640, 999}, {1000, 1000, 999, 640, 300, 17, 1000}, 2.0,
        0.0, 2);
}

// Empty chunks, a row that sees no key of the first chunks (its accumulator
// starts at m = -inf, l = 0) and a row that sees nothing at all.
TEST(AttentionMerge, EmptyChunksAndRows) {
  check(5, 128, 16, {0, 0, 32, 32, 64, 128}, {128, 0, 5, 64, 33}, 1.0, 0.0, 3);
}

// Maxima far apart: scores rise by 1 per key, so the largest sits in the last
// chunk (every earlier state is rescaled) and the first chunk's factor
// e^(m_c - M) ~ e^-192 underflows to 0 in f32.
TEST(AttentionMerge, MaximaFarApart) {
  check(3, 256, 32, {64, 128, 192}, {256, 256, 200}, 1.0, 1.0, 4);
}

}  // namespace
}  // namespace sustain::attention::test

// The chunked gated delta rule against the token-by-token reference, on
// shapes that do not divide the chunk, dk != dv, one token, and long runs
// whose decay drives the state's old content far below its new content.
#include "kernels/delta_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace sustain::kernels {
namespace {

struct Case {
  int64_t T;
  int dk, dv, chunk;
  float decay_scale;  // g = -decay_scale * U(0, 1)
};

struct Inputs {
  std::vector<float> q, k, v, g, beta, S;
};

void l2norm(float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(x[i]) * x[i];
  const float inv = 1.0f / std::max(std::sqrt(static_cast<float>(s)), 1e-6f);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

Inputs make(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  Inputs in;
  // q and k rows share a stride wider than dk, as in the model's buffers.
  const int64_t ld = c.dk + 3;
  in.q.resize(size_t(c.T * ld));
  in.k.resize(size_t(c.T * ld));
  in.v.resize(size_t(c.T) * c.dv);
  for (auto& x : in.q) x = n01(rng);
  for (auto& x : in.k) x = n01(rng);
  for (auto& x : in.v) x = n01(rng);
  for (int64_t t = 0; t < c.T; ++t) {
    l2norm(in.q.data() + t * ld, c.dk);
    l2norm(in.k.data() + t * ld, c.dk);
  }
  in.g.resize(size_t(c.T) * 2);
  in.beta.resize(size_t(c.T) * 2);
  for (auto& x : in.g) x = -c.decay_scale * u01(rng);
  for (auto& x : in.beta) x = u01(rng);
  in.S.resize(size_t(c.dk) * c.dv);
  for (auto& x : in.S) x = 0.3f * n01(rng);
  return in;
}

DeltaRuleArgs args(const Case& c, const Inputs& in, float* S, float* o) {
  DeltaRuleArgs a;
  a.n_tokens = c.T;
  a.dk = c.dk;
  a.dv = c.dv;
  a.q = in.q.data();
  a.k = in.k.data();
  a.ld_qk = c.dk + 3;
  a.v = in.v.data();
  a.ld_v = c.dv;
  a.g = in.g.data();
  a.beta = in.beta.data();
  a.ld_gb = 2;  // interleaved per token, as [T][n_head] buffers are
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
  a.S = S;
  a.o = o;
  a.ld_o = c.dv;
  return a;
}

class DeltaRule : public ::testing::TestWithParam<Case> {};

TEST_P(DeltaRule, ChunkedMatchesRecurrence) {
  const Case c = GetParam();
  const Inputs in = make(c, 7 + static_cast<uint32_t>(c.T));
  std::vector<float> S_ref = in.S, S = in.S;
  std::vector<float> o_ref(size_t(c.T) * c.dv), o(size_t(c.T) * c.dv, 1e9f);
  delta_rule_ref(args(c, in, S_ref.data(), o_ref.data()));
  std::vector<float> scratch(delta_rule_scratch_floats(c.chunk, c.dk, c.dv));
  delta_rule(args(c, in, S.data(), o.data()), c.chunk, scratch.data());
  double max_o = 0, max_s = 0, scale_o = 0, scale_s = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    max_o = std::max(max_o, double(std::fabs(o[i] - o_ref[i])));
    scale_o = std::max(scale_o, double(std::fabs(o_ref[i])));
  }
  for (size_t i = 0; i < S.size(); ++i) {
    max_s = std::max(max_s, double(std::fabs(S[i] - S_ref[i])));
    scale_s = std::max(scale_s, double(std::fabs(S_ref[i])));
  }
  EXPECT_LE(max_o, 2e-5 * std::max(1.0, scale_o)) << "outputs, max |ref| " << scale_o;
  EXPECT_LE(max_s, 2e-5 * std::max(1.0, scale_s)) << "state, max |ref| " << scale_s;
}

// Splitting a run in two (two forward calls) gives the same result as one.
TEST(DeltaRuleSplit, TwoCallsEqualOne) {
  const Case c{100, 16, 24, 32, 0.5f};
  const Inputs in = make(c, 3);
  std::vector<float> S1 = in.S, S2 = in.S, o1(size_t(c.T) * c.dv), o2(size_t(c.T) * c.dv);
  std::vector<float> scratch(delta_rule_scratch_floats(c.chunk, c.dk, c.dv));
  delta_rule(args(c, in, S1.data(), o1.data()), c.chunk, scratch.data());
  DeltaRuleArgs a = args(c, in, S2.data(), o2.data());
  a.n_tokens = 37;
  delta_rule(a, c.chunk, scratch.data());
  a.q += 37 * a.ld_qk;
  a.k += 37 * a.ld_qk;
  a.v += 37 * a.ld_v;
  a.g += 37 * a.ld_gb;
  a.beta += 37 * a.ld_gb;
  a.o += 37 * a.ld_o;
  a.n_tokens = c.T - 37;
  delta_rule(a, c.chunk, scratch.data());
  for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 2e-5) << i;
  for (size_t i = 0; i < S1.size(); ++i) ASSERT_NEAR(S1[i], S2[i], 2e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeltaRule,
    ::testing::Values(Case{1, 32, 32, 64, 1.0f}, Case{2, 8, 8, 1, 1.0f}, Case{63, 32, 32, 64, 1.0f},
                      Case{64, 32, 32, 64, 1.0f}, Case{65, 32, 32, 64, 1.0f},
                      Case{200, 16, 48, 32, 0.1f}, Case{130, 48, 16, 64, 3.0f},
                      Case{4096, 32, 32, 64, 0.05f}, Case{300, 128, 128, 64, 0.5f},
                      Case{500, 32, 32, 7, 20.0f}));

}  // namespace
}  // namespace sustain::kernels

// Rejection sampling for speculative decoding (speculative_choice and
// Sampler::sample_speculative): whatever the proposal q, a token drawn from
// q and verified comes out distributed as the target p. Checked exactly on a
// grid of the two uniforms (no sampling noise), on awkward shapes: q wider
// than p, q missing p's tokens, q == p, a point mass, and shown to break
// when the draft was not drawn from the q that verification is told.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/processors.h"
#include "sampling/sampler.h"

namespace sustain::sampling {
namespace {

// P(output = id) when the draft is drawn from `drawn` (by id) and verified
// against `told`, integrating u_accept and u_residual on a midpoint grid.
std::vector<double> output_law(const std::vector<double>& p, const std::vector<double>& drawn,
                               const std::vector<double>& told) {
  const int n = static_cast<int>(p.size()), grid = 4000;
  std::vector<Candidate> buf(n);
  for (int i = 0; i < n; ++i) buf[i] = {i, 0.0f, static_cast<float>(p[i])};
  Candidates c{buf.data(), static_cast<size_t>(n), false};
  std::vector<float> q(told.begin(), told.end());
  std::vector<double> out(n, 0.0);
  for (int d = 0; d < n; ++d) {
    if (drawn[d] <= 0) continue;
    for (int g = 0; g < grid; ++g) {
      const double u = (g + 0.5) / grid;
      // Accept on u_accept = u; else the residual pick on u_residual = u
      // (the two are independent, so integrating each on its own is exact).
      const int64_t a = speculative_choice(c, d, q, u, 0.5);
      if (a < 0) {
        out[d] += drawn[d] / grid;
        continue;
      }
      // Rejected at this u_accept: spread over the residual law.
      for (int h = 0; h < 200; ++h) {
        const int64_t r = speculative_choice(c, d, q, 1.0 - 1e-12, (h + 0.5) / 200);
        EXPECT_GE(r, 0);
        if (r < 0) continue;
        out[buf[r].id] += drawn[d] / grid / 200;
      }
    }
  }
  return out;
}

void expect_law(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

TEST(SpeculativeChoice, OutputFollowsTheTargetWhateverTheProposal) {
  const std::vector<double> p{0.5, 0.3, 0.15, 0.05, 0.0};
  for (const std::vector<double>& q : std::vector<std::vector<double>>{
           {0.25, 0.25, 0.25, 0.25, 0.0},  // flatter than p
           {0.1, 0.1, 0.1, 0.1, 0.6},      // most mass where p has none
           {0.0, 0.0, 0.0, 1.0, 0.0},      // a point mass on an unlikely token
           {0.5, 0.3, 0.15, 0.05, 0.0},    // q == p: everything accepted
           {0.9, 0.1, 0.0, 0.0, 0.0},      // sharper, missing p's tail
       }) {
    expect_law(output_law(p, q, q), p, 2e-3);
  }
}

TEST(SpeculativeChoice, AProposalThatIsNotTheDraftsLawBiasesTheOutput) {
  const std::vector<double> p{0.5, 0.3, 0.15, 0.05, 0.0};
  const std::vector<double> drawn{0.0, 0.0, 1.0, 0.0, 0.0};  // always token 2
  const std::vector<double> told{0.25, 0.25, 0.25, 0.25, 0.0};
  const auto got = output_law(p, drawn, told);
  EXPECT_GT(std::abs(got[2] - p[2]), 0.2);  // token 2 far more often than p says
}

TEST(SpeculativeChoice, AcceptsWhenTheTargetLikesTheDraftMore) {
  const std::vector<double> p{0.6, 0.4};
  std::vector<Candidate> buf{{0, 0, 0.6f}, {1, 0, 0.4f}};
  Candidates c{buf.data(), 2, false};
  std::vector<float> q{0.3f, 0.7f};
  // p(0)/q(0) = 2: accepted for every u.
  EXPECT_EQ(speculative_choice(c, 0, q, 0.999, 0.5), -1);
  // p(1)/q(1) = 4/7: accepted below u = 0.571, else the residual (token 0 only).
  EXPECT_EQ(speculative_choice(c, 1, q, 0.5, 0.5), -1);
  EXPECT_EQ(speculative_choice(c, 1, q, 0.6, 0.99), 0);
}

// Through the Sampler: greedy ignores q and returns the argmax; at T > 0 the
// token is recorded like sample()'s and reported by last().
TEST(SamplerSpeculative, GreedyIsTheArgmaxAndTokensAreRecorded) {
  const std::vector<float> logits{0.1f, 2.0f, 1.0f, -1.0f};
  SamplerConfig g;
  g.temperature = 0.0f;
  Sampler s(g);
  const std::vector<TokenProb> q{{2, 1.0f, 0.0f}};
  EXPECT_EQ(s.sample_speculative(logits.data(), 4, 2, q), 1);

  SamplerConfig t;
  t.temperature = 1.0f;
  t.top_k = 0;
  t.top_p = 1.0f;
  t.min_p = 0.0f;
  t.seed = 7;
  Sampler a(t);
  int same = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t tok = a.sample_speculative(logits.data(), 4, 1, q);  // q says 2, drafted 1: inconsistent
    EXPECT_GE(tok, 0);
    EXPECT_EQ(a.last().id, tok);
    EXPECT_GT(a.last().prob, 0.0f);
    same += tok == 1;
  }
  // An inconsistent proposer (draft not in q) is accepted only with p > 0 -- here
  // always, since token 1 has mass: the sampler never invents a token outside p.
  EXPECT_EQ(same, 200);
}

// With top-p or min-p and no top-k, sample_speculative builds p from the raw
// logits (nucleus_logits); a logit bias of 0 sends the same config down the
// full chain. Both must accept, reject and resample alike.
// The shortcuts from raw logits (temperature alone: the dense softmax;
// top_p / min_p without top_k: nucleus_logits) against the chain, which a
// logit bias of 0 forces: the same token and probability every step, over
// accepted drafts and rejections (the residual draw), on Gaussian logits and
// on an odd-sized vocabulary with ties.
TEST(SamplerSpeculative, ShortcutFromRawLogitsVerifiesAsTheChainDoes) {
  struct Case {
    float temperature, top_p, min_p;
    int32_t top_k, n_vocab;
    bool ties;
  };
  for (const Case& k :
       {Case{0.9f, 0.9f, 0.02f, 0, 4096, false}, Case{0.8f, 1.0f, 0.0f, 0, 4096, false},
        Case{0.6f, 1.0f, 0.0f, 0, 1031, true}, Case{0.7f, 1.0f, 0.0f, 5000, 4099, false}}) {
    SCOPED_TRACE(testing::Message()
                 << "temperature " << k.temperature << " top_p " << k.top_p << " min_p " << k.min_p
                 << " top_k " << k.top_k << " n_vocab " << k.n_vocab);
    const int32_t n_vocab = k.n_vocab;
    std::mt19937 gen(5);
    std::normal_distribution<float> gauss(0.0f, 3.0f);
    std::vector<float> logits(n_vocab);
    SamplerConfig c;
    c.temperature = k.temperature, c.top_k = k.top_k, c.top_p = k.top_p, c.min_p = k.min_p;
    c.seed = 12;
    SamplerConfig chain = c;
    chain.logit_bias = {{0, 0.0f}};
    Sampler fast(c), slow(chain);
    int accepted = 0;
    std::vector<TokenProb> fast_top(5), slow_top(5);
    for (int step = 0; step < 100; ++step) {
      for (float& x : logits) x = k.ties ? std::round(gauss(gen)) : gauss(gen);
      // A proposal that puts most of its mass on the target's argmax or on
      // a token it rarely keeps, by turns.
      const auto top =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const int32_t draft = step % 2 ? top : (top + 1) % n_vocab;
      const std::vector<TokenProb> q{{draft, 0.7f, 0.0f}, {(draft + 7) % n_vocab, 0.3f, 0.0f}};
      const int32_t got = fast.sample_speculative(logits.data(), n_vocab, draft, q);
      ASSERT_EQ(got, slow.sample_speculative(logits.data(), n_vocab, draft, q)) << "step " << step;
      ASSERT_EQ(fast.last().prob, slow.last().prob) << "step " << step;
      const size_t nf = fast.top_probs(fast_top), ns = slow.top_probs(slow_top);
      ASSERT_EQ(nf, ns);
      for (size_t i = 0; i < nf; ++i) {
        EXPECT_EQ(fast_top[i].id, slow_top[i].id) << "step " << step << " rank " << i;
        EXPECT_EQ(fast_top[i].prob, slow_top[i].prob) << "step " << step << " rank " << i;
      }
      accepted += got == draft;
    }
    EXPECT_GT(accepted, 10);  // both branches were taken
    EXPECT_LT(accepted, 100);
  }
}

// speculative_choice_dense is speculative_choice on the candidates of a
// dense distribution in id order, for every pair of uniforms on a grid,
// where p and q overlap, where q == p (no residual) and where the draft is
// out of range.
TEST(SpeculativeChoice, DenseMatchesTheCandidateList) {
  const std::vector<float> p{0.1f, 0.0f, 0.35f, 0.05f, 0.3f, 0.2f, 0.0f};
  std::vector<Candidate> buf(p.size());
  for (size_t i = 0; i < p.size(); ++i) buf[i] = {static_cast<int32_t>(i), 0.0f, p[i]};
  const Candidates c{buf.data(), buf.size(), false};
  for (const std::vector<float>& q : std::vector<std::vector<float>>{
           {0.0f, 0.5f, 0.1f, 0.0f, 0.4f, 0.0f, 0.0f}, p, {0, 0, 0, 0, 0, 0, 1.0f}}) {
    for (int32_t draft : {0, 1, 2, 4, 6, 7, -1}) {
      for (int a = 0; a < 20; ++a) {
        for (int b = 0; b < 20; ++b) {
          const double ua = (a + 0.5) / 20, ub = (b + 0.5) / 20;
          const int64_t want = speculative_choice(c, draft, q, ua, ub);
          ASSERT_EQ(speculative_choice_dense(p, draft, q, ua, ub), want < 0 ? -1 : buf[want].id)
              << "draft " << draft << " u " << ua << ", " << ub;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sustain::sampling

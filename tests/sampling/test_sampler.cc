// The Sampler as a whole: config validation, the chain's order, greedy,
// determinism, and the drawn frequencies against the reported distribution.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/sampler.h"

namespace sustain::sampling {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplerConfig plain(float temp) {
  SamplerConfig c;
  c.temperature = temp;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  return c;
}

// ---- validation ----

TEST(Validate, DefaultsAndBoundariesAreAccepted) {
  EXPECT_TRUE(validate(SamplerConfig{}).is_ok());
  std::vector<SamplerConfig> ok(9);
  ok[0].temperature = 0.0f;
  ok[1].temperature = kMaxTemperature;
  ok[2].top_p = 1.0f;
  ok[3].min_p = 0.0f;
  ok[4].min_p = 1.0f;
  ok[5].top_k = 0;
  ok[6].repeat_last_n = 0;
  ok[7].repeat_last_n = kMaxRepeatLastN;
  ok[8].presence_penalty = -2.0f;
  ok[8].frequency_penalty = 2.0f;
  for (size_t i = 0; i < ok.size(); ++i) {
    Status st = validate(ok[i]);
    EXPECT_TRUE(st.is_ok()) << i << ": " << st.message();
  }
}

struct BadCase {
  std::string field;
  void (*set)(SamplerConfig&);
};

TEST(Validate, EveryBadValueIsRejectedNamingItsField) {
  const BadCase cases[] = {
      {"temperature", [](SamplerConfig& c) { c.temperature = kNan; }},
      {"temperature", [](SamplerConfig& c) { c.temperature = -0.1f; }},
      {"temperature", [](SamplerConfig& c) { c.temperature = 101.0f; }},
      {"temperature", [](SamplerConfig& c) { c.temperature = kInf; }},
      {"top_k", [](SamplerConfig& c) { c.top_k = -1; }},
      {"top_p", [](SamplerConfig& c) { c.top_p = 0.0f; }},
      {"top_p", [](SamplerConfig& c) { c.top_p = 1.5f; }},
      {"top_p", [](SamplerConfig& c) { c.top_p = -0.5f; }},
      {"top_p", [](SamplerConfig& c) { c.top_p = kNan; }},
      {"min_p", [](SamplerConfig& c) { c.min_p = -0.1f; }},
      {"min_p", [](SamplerConfig& c) { c.min_p = 2.0f; }},
      {"min_p", [](SamplerConfig& c) { c.min_p = kNan; }},
      {"repeat_penalty", [](SamplerConfig& c) { c.repeat_penalty = 0.0f; }},
      {"repeat_penalty", [](SamplerConfig& c) { c.repeat_penalty = -1.0f; }},
      {"repeat_penalty", [](SamplerConfig& c) { c.repeat_penalty = 11.0f; }},
      {"repeat_penalty", [](SamplerConfig& c) { c.repeat_penalty = kNan; }},
      {"repeat_last_n", [](SamplerConfig& c) { c.repeat_last_n = -1; }},
      {"repeat_last_n", [](SamplerConfig& c) { c.repeat_last_n = kMaxRepeatLastN + 1; }},
      {"presence_penalty", [](SamplerConfig& c) { c.presence_penalty = 2.5f; }},
      {"presence_penalty", [](SamplerConfig& c) { c.presence_penalty = -3.0f; }},
      {"presence_penalty", [](SamplerConfig& c) { c.presence_penalty = kNan; }},
      {"frequency_penalty", [](SamplerConfig& c) { c.frequency_penalty = 2.01f; }},
      {"frequency_penalty", [](SamplerConfig& c) { c.frequency_penalty = -kInf; }},
      {"frequency_penalty", [](SamplerConfig& c) { c.frequency_penalty = kNan; }},
  };
  for (const BadCase& bc : cases) {
    SamplerConfig c;
    bc.set(c);
    Status st = validate(c);
    ASSERT_FALSE(st.is_ok()) << bc.field;
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_EQ(st.message().rfind("sampler: " + bc.field + " must be", 0), 0u) << st.message();
    EXPECT_NE(st.message().find("got"), std::string::npos) << st.message();
  }
}

TEST(Validate, MessageShowsTheValue) {
  SamplerConfig c;
  c.top_p = 1.5f;
  EXPECT_EQ(validate(c).message(), "sampler: top_p must be in (0, 1] (1 disables it), got 1.5");
}

TEST(Sampler, CreateRejectsABadConfig) {
  SamplerConfig c;
  c.top_k = -1;
  auto s = Sampler::create(c);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().message().find("top_k"), std::string::npos);
  EXPECT_TRUE(Sampler::create(SamplerConfig{}).has_value());
}

// ---- RNG ----

TEST(Rng, KnownAnswers) {
  // Published first outputs of splitmix64 from 0, and of xoshiro256** from
  // state {1, 2, 3, 4}; a change here would change every seeded request.
  uint64_t x = 0;
  EXPECT_EQ(Rng::splitmix64(x), 0xe220a8397b1dcdafull);
  EXPECT_EQ(Rng::splitmix64(x), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(Rng::splitmix64(x), 0x06c45d188009454full);
  Rng r = Rng::from_state({1, 2, 3, 4});
  EXPECT_EQ(r.next(), 11520ull);
  EXPECT_EQ(r.next(), 0ull);
  EXPECT_EQ(r.next(), 1509978240ull);
  EXPECT_EQ(r.next(), 1215971899390074240ull);
}

TEST(Rng, UniformIsInUnitIntervalAndCentred) {
  Rng r(42);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // Mean of 1e5 uniforms: sd 0.29 / sqrt(1e5) ≈ 9e-4; 0.005 is > 5 sd.
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  // The ends of the bit-to-double conversion.
  EXPECT_EQ(Rng::to_unit(0), 0.0);
  EXPECT_EQ(Rng::to_unit(~0ull), 1.0 - 0x1.0p-53);
  EXPECT_LT(Rng::to_unit(~0ull), 1.0);
}

// ---- greedy ----

TEST(Sampler, GreedyTakesTheLowestIdAmongTiesAndRecordsIt) {
  Sampler s(plain(0.0f));
  const std::vector<float> logits = {1.0f, 4.0f, -2.0f, 4.0f, 4.0f};
  EXPECT_EQ(s.sample(logits.data(), 5), 1);
  EXPECT_EQ(s.sample(logits.data(), 5), 1);
  EXPECT_EQ(s.history().count(1), 2);
  EXPECT_EQ(s.last().prob, 1.0f);
  EXPECT_EQ(s.last().logprob, 0.0f);
  std::array<TokenProb, 4> top;
  ASSERT_EQ(s.top_probs(top), 1u);
  EXPECT_EQ(top[0].id, 1);
}

TEST(Sampler, GreedySeesPenalties) {
  SamplerConfig c = plain(0.0f);
  c.repeat_penalty = 2.0f;
  Sampler s(c);
  const std::vector<float> logits = {5.0f, 4.9f, 1.0f};
  s.accept(0);  // a prompt token: 5 / 2 = 2.5 now loses to 4.9
  EXPECT_EQ(s.sample(logits.data(), 3), 1);
  // Now 1 is in the history too: 2.5 (token 0) beats 4.9 / 2 = 2.45.
  EXPECT_EQ(s.sample(logits.data(), 3), 0);
}

// ---- the chain ----

// Logits {2.5, 2.4, 2.0, 1.0, 0.0, -1.0} on shuffled ids. At temperature 1,
// top_k 5 drops -1.0; the five left have probabilities .355 .321 .215 .079
// .029 (cumulative .355 .676 .892 .971), so top_p 0.9 keeps four; min_p 0.25
// then drops 1.0 (.079 / .355 = .223). Temperature 1.5 comes after, so the
// final distribution is softmax({2.5, 2.4, 2.0} / 1.5). Had temperature come
// first, the flatter distribution would let more through both filters.
struct ChainCase {
  std::vector<float> logits = {0.0f, 2.4f, -1.0f, 2.5f, 1.0f, 2.0f};
  std::vector<int32_t> survivors = {3, 1, 5};  // most probable first
  SamplerConfig config() const {
    SamplerConfig c;
    c.temperature = 1.5f;
    c.top_k = 5;
    c.top_p = 0.9f;
    c.min_p = 0.25f;
    c.seed = 1234;
    return c;
  }
  std::vector<double> expected() const {
    std::vector<double> w;
    double sum = 0;
    for (int32_t id : survivors) sum += w.emplace_back(std::exp(logits[id] / 1.5));
    for (double& p : w) p /= sum;
    return w;
  }
};

TEST(Sampler, ChainOrderAndReportedDistribution) {
  ChainCase cc;
  Sampler s(cc.config());
  const int32_t tok = s.sample(cc.logits.data(), 6);
  std::array<TokenProb, 6> top;
  ASSERT_EQ(s.top_probs(top), 3u);
  const auto want = cc.expected();
  float last_prob = -1;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(top[i].id, cc.survivors[i]);
    EXPECT_NEAR(top[i].prob, want[i], 1e-6);
    EXPECT_NEAR(top[i].logprob, std::log(want[i]), 1e-5);
    if (top[i].id == tok) last_prob = top[i].prob;
  }
  EXPECT_EQ(s.last().id, tok);
  EXPECT_EQ(s.last().prob, last_prob);  // the drawn token is one of them
  std::array<TokenProb, 2> two;
  ASSERT_EQ(s.top_probs(two), 2u);
  EXPECT_EQ(two[1].id, cc.survivors[1]);
}

TEST(Sampler, PenaltiesComeBeforeTopK) {
  SamplerConfig c = plain(1.0f);
  c.top_k = 1;
  c.repeat_penalty = 10.0f;
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f};
  // After accept(0), 3 / 10 = 0.3: token 1 is the only one top-1 keeps,
  // whatever the seed.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    c.seed = seed;
    Sampler fresh(c);
    fresh.accept(0);
    EXPECT_EQ(fresh.sample(logits.data(), 3), 1);
  }
}

TEST(Sampler, LogitBiasComesFirstAndReshapesTheDistribution) {
  // Greedy: +3 on token 2 (1 + 3 = 4) beats token 0's 3.5.
  SamplerConfig g = plain(0.0f);
  g.logit_bias = {{2, 3.0f}};
  Sampler greedy(g);
  const std::vector<float> logits = {3.5f, 2.0f, 1.0f};
  EXPECT_EQ(greedy.sample(logits.data(), 3), 2);
  // Before penalties: -100 on token 0 and a repeat penalty of 10 on token 1
  // (accepted once) leave logits {-96.5, 0.2, 1}; top-1 keeps token 2.
  SamplerConfig c = plain(1.0f);
  c.top_k = 1;
  c.repeat_penalty = 10.0f;
  c.logit_bias = {{0, -100.0f}};
  for (uint64_t seed = 0; seed < 10; ++seed) {
    c.seed = seed;
    Sampler s(c);
    s.accept(1);
    EXPECT_EQ(s.sample(logits.data(), 3), 2);
  }
  // The reported distribution is the biased one: {0, ln 2, 0} → {1/4, 1/2, 1/4}.
  SamplerConfig d = plain(1.0f);
  d.logit_bias = {{1, std::log(2.0f)}};
  Sampler p(d);
  const std::vector<float> flat = {0.0f, 0.0f, 0.0f};
  p.sample(flat.data(), 3);
  std::array<TokenProb, 3> top;
  ASSERT_EQ(p.top_probs(top), 3u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_NEAR(top[0].prob, 0.5f, 1e-6);
  EXPECT_NEAR(top[1].prob, 0.25f, 1e-6);
}

TEST(Validate, LogitBiasRangeAndDuplicates) {
  SamplerConfig c;
  c.logit_bias = {{0, -100.0f}, {5, 100.0f}};
  EXPECT_TRUE(validate(c).is_ok());
  auto message = [](const SamplerConfig& x) { return validate(x).message(); };
  c.logit_bias = {{3, 100.5f}};
  EXPECT_NE(message(c).find("logit_bias value must be in [-100, 100], got 100.5"),
            std::string::npos)
      << message(c);
  c.logit_bias = {{3, kNan}};
  EXPECT_FALSE(validate(c).is_ok());
  c.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(message(c).find("logit_bias token id must be >= 0, got -1"), std::string::npos)
      << message(c);
  c.logit_bias = {{4, 1.0f}, {2, 1.0f}, {4, -1.0f}};
  EXPECT_NE(message(c).find("logit_bias names token 4 more than once"), std::string::npos)
      << message(c);
}

// Pearson's chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double e = probs[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(Sampler, DrawsMatchTheDistributionChiSquare) {
  // 20000 draws from the chain case's three survivors. With df = 2 the
  // chi-square exceeds 13.82 with probability 0.001 for a correct sampler;
  // the seed is fixed, so the outcome is the same on every run.
  ChainCase cc;
  Sampler s(cc.config());
  const int n = 20000;
  std::vector<int> counts(3, 0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.sample(cc.logits.data(), 6);
    int k = -1;
    for (int j = 0; j < 3; ++j) k = cc.survivors[j] == t ? j : k;
    ASSERT_GE(k, 0) << "drew filtered token " << t;
    ++counts[k];
  }
  const auto want = cc.expected();
  EXPECT_LT(chi_square(counts, want, n), 13.82);

  // The bound has power: the same draws against the temperature-1
  // distribution of the survivors (a sampler that ignored temperature) fail it.
  std::vector<double> t1;
  double sum = 0;
  for (int32_t id : cc.survivors) sum += t1.emplace_back(std::exp(cc.logits[id]));
  for (double& p : t1) p /= sum;
  EXPECT_GT(chi_square(counts, t1, n), 13.82);
}

TEST(Sampler, DrawsMatchAWiderDistributionChiSquare) {
  // Eight tokens, top_k 5, temperature 0.7, no other filter: df = 4, where
  // the 0.001 critical value is 18.47.
  const std::vector<float> logits = {2.0f, 1.5f, 1.0f, 0.5f, 0.2f, -1.0f, -2.0f, 0.8f};
  const std::vector<int32_t> kept = {0, 1, 2, 7, 3};
  SamplerConfig c = plain(0.7f);
  c.top_k = 5;
  c.seed = 99;
  Sampler s(c);
  std::vector<double> want;
  double sum = 0;
  for (int32_t id : kept) sum += want.emplace_back(std::exp(logits[id] / 0.7));
  for (double& p : want) p /= sum;
  const int n = 20000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.sample(logits.data(), 8);
    int k = -1;
    for (int j = 0; j < 5; ++j) k = kept[j] == t ? j : k;
    ASSERT_GE(k, 0) << "drew filtered token " << t;
    ++counts[k];
  }
  EXPECT_LT(chi_square(counts, want, n), 18.47);
}

// ---- determinism ----

std::vector<int32_t> run(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i)
    out.push_back(s.sample(logits.data(), static_cast<int32_t>(logits.size())));
  return out;
}

std::vector<float> random_logits(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  // Built from raw integers, not a std distribution, so it is the same everywhere.
  for (float& x : v) x = static_cast<float>(gen() % 4000) / 1000.0f;
  return v;
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  const auto logits = random_logits(1000, 5);
  SamplerConfig c;  // the default chain, with penalties on so history matters
  c.repeat_penalty = 1.1f;
  c.top_k = 0;
  c.min_p = 0.0f;
  c.seed = 7;
  Sampler a(c), b(c);
  const auto seq_a = run(a, logits, 200);
  EXPECT_EQ(seq_a, run(b, logits, 200));
  c.seed = 8;
  Sampler other(c);
  EXPECT_NE(seq_a, run(other, logits, 200));
}

TEST(Sampler, RequestsDoNotShareState) {
  // Interleaving another sampler's draws must not change this one's sequence.
  const auto logits = random_logits(500, 6);
  SamplerConfig c = plain(1.0f);
  c.seed = 3;
  Sampler alone(c);
  const auto want = run(alone, logits, 100);
  Sampler mine(c), theirs(c);
  std::vector<int32_t> got;
  for (int i = 0; i < 100; ++i) {
    got.push_back(mine.sample(logits.data(), 500));
    theirs.sample(logits.data(), 500);
    theirs.accept(1);
  }
  EXPECT_EQ(got, want);
}

TEST(Sampler, MovedSamplerKeepsWorking) {
  const auto logits = random_logits(300, 8);
  SamplerConfig c = plain(1.0f);
  c.seed = 11;
  Sampler ref(c);
  const auto want = run(ref, logits, 20);
  auto made = Sampler::create(c);
  ASSERT_TRUE(made.has_value());
  Sampler s = std::move(made).value();
  EXPECT_EQ(run(s, logits, 20), want);
  std::array<TokenProb, 3> top;
  EXPECT_EQ(s.top_probs(top), 3u);
}

// Without top-k and with nothing before it, sample() takes its shortcuts
// from the raw logits (temperature alone over the whole vocabulary; top-p
// and min-p from a histogram floor). A logit bias of 0 changes no logit but
// sends the same config down the full chain: both must draw the same tokens
// and report the same distribution, step after step, on a language model's
// spread of logits and on nearly flat ones.
TEST(Sampler, ShortcutsFromRawLogitsDrawWhatTheChainDraws) {
  const int32_t n_vocab = 49152;
  std::mt19937 gen(21);
  std::normal_distribution<float> gauss(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(6, std::vector<float>(n_vocab));
  for (auto& row : rows)
    for (float& x : row) x = gauss(gen);
  rows[5] = random_logits(n_vocab, 4);  // nearly flat: a nucleus of thousands
  struct Case {
    float temp, top_p, min_p;
    int32_t top_k;
  };
  for (const Case& k :
       {Case{0.8f, 1.0f, 0.0f, 0}, Case{0.8f, 0.95f, 0.0f, 0}, Case{1.0f, 0.9f, 0.05f, 0},
        Case{0.7f, 1.0f, 0.1f, 0}, Case{1.3f, 0.5f, 0.0f, n_vocab}}) {
    SamplerConfig c = plain(k.temp);
    c.top_p = k.top_p, c.min_p = k.min_p, c.top_k = k.top_k, c.seed = 77;
    SamplerConfig chain = c;
    chain.logit_bias = {{0, 0.0f}};
    Sampler fast(c), slow(chain);
    std::array<TokenProb, 5> top_fast, top_slow;
    for (int step = 0; step < 60; ++step) {
      const auto& row = rows[static_cast<size_t>(step) % rows.size()];
      const auto where = testing::Message() << "temp " << k.temp << " top_p " << k.top_p
                                            << " min_p " << k.min_p << " step " << step;
      ASSERT_EQ(fast.sample(row.data(), n_vocab), slow.sample(row.data(), n_vocab)) << where;
      ASSERT_EQ(fast.last().prob, slow.last().prob) << where;
      ASSERT_EQ(fast.n_live(), slow.n_live()) << where;
      const size_t n = fast.top_probs(top_fast);
      ASSERT_EQ(n, slow.top_probs(top_slow)) << where;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(top_fast[i].id, top_slow[i].id) << where << " rank " << i;
        ASSERT_EQ(top_fast[i].prob, top_slow[i].prob) << where << " rank " << i;
      }
    }
  }
}

// Asked for many entries (a draft model's proposal wants the whole
// distribution), the dense top_probs keeps the chain's order (probability,
// then id) and values at every size, past its insertion list's length, with
// ties; probs() gives the same entries unsorted, on either path.
TEST(Sampler, WholeDistributionFromTheShortcutMatchesTheChain) {
  const int32_t n_vocab = 4099;
  std::mt19937 gen(3);
  std::normal_distribution<float> gauss(0.0f, 3.0f);
  std::vector<float> row(n_vocab);
  for (float& x : row) x = std::round(gauss(gen) * 4.0f) / 4.0f;  // many ties
  SamplerConfig c = plain(0.9f);
  c.top_k = 0, c.top_p = 1.0f, c.min_p = 0.0f, c.seed = 5;
  SamplerConfig chain = c;
  chain.logit_bias = {{0, 0.0f}};
  Sampler fast(c), slow(chain);
  ASSERT_EQ(fast.sample(row.data(), n_vocab), slow.sample(row.data(), n_vocab));
  for (size_t want :
       {size_t{5}, size_t{32}, size_t{33}, size_t{1000}, size_t{4099}, size_t{4200}}) {
    std::vector<TokenProb> a(want), b(want);
    const size_t n = fast.top_probs(a);
    ASSERT_EQ(n, slow.top_probs(b)) << want;
    ASSERT_EQ(n, std::min(want, size_t{4099}));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i].id, b[i].id) << want << " rank " << i;
      ASSERT_EQ(a[i].prob, b[i].prob) << want << " rank " << i;
      ASSERT_EQ(a[i].logprob, b[i].logprob) << want << " rank " << i;
    }
  }
  auto by_id = [](Sampler& s) {
    std::vector<TokenProb> v(s.n_live());
    v.resize(s.probs(v));
    std::sort(v.begin(), v.end(),
              [](const TokenProb& x, const TokenProb& y) { return x.id < y.id; });
    return v;
  };
  const auto pf = by_id(fast), ps = by_id(slow);
  ASSERT_EQ(pf.size(), size_t{4099});
  ASSERT_EQ(ps.size(), pf.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    ASSERT_EQ(pf[i].id, static_cast<int32_t>(i));
    ASSERT_EQ(pf[i].id, ps[i].id);
    ASSERT_EQ(pf[i].prob, ps[i].prob) << "token " << i;
  }
}

// ---- odd logits, large vocabularies ----

TEST(Sampler, NanLogitsAreNeverChosen) {
  std::vector<float> logits(100, kNan);
  logits[42] = -5.0f;
  Sampler s(plain(1.0f));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits.data(), 100), 42);
  std::vector<float> all_nan(10, kNan);  // nothing to prefer: still a valid token
  const int32_t t = s.sample(all_nan.data(), 10);
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 10);
}

TEST(Sampler, InfiniteLogitsAndTinyTemperature) {
  std::vector<float> logits = {1.0f, kInf, 3.0f, -kInf};
  SamplerConfig c = plain(1e-30f);  // logits / T overflow to +-inf
  Sampler s(c);
  EXPECT_EQ(s.sample(logits.data(), 4), 1);
  const std::vector<float> finite = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(s.sample(finite.data(), 3), 2);
}

TEST(Sampler, LargeVocabularyFullChain) {
  // Qwen-sized vocabulary, once with top-k 40 alone and once with top-k
  // disabled and top-p 0.95 (which then sorts progressively, far past its
  // first block on these flat logits): the reported distribution sums to 1
  // and the drawn token is in it.
  const int32_t n_vocab = 151936;
  const auto logits = random_logits(n_vocab, 9);
  for (int32_t k : {40, 0}) {
    SamplerConfig c;
    c.top_k = k;
    c.top_p = k > 0 ? 1.0f : 0.95f;
    c.min_p = 0.0f;
    c.seed = 5;
    Sampler s(c);
    std::vector<TokenProb> top(n_vocab);
    for (int step = 0; step < 3; ++step) {
      const int32_t t = s.sample(logits.data(), n_vocab);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, n_vocab);
      const size_t n = s.top_probs(top);
      if (k > 0) {
        EXPECT_EQ(n, static_cast<size_t>(k));
      } else {
        EXPECT_GT(n, 10000u);  // flat logits: the nucleus is wide
      }
      double sum = 0;
      bool found = false;
      for (size_t i = 0; i < n; ++i) {
        sum += top[i].prob;
        found |= top[i].id == t;
        if (i > 0) {
          EXPECT_LE(top[i].prob, top[i - 1].prob);
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-4);
      EXPECT_TRUE(found);
    }
  }
}

}  // namespace
}  // namespace sustain::sampling

// --spec draft: a second GGUF of the same vocabulary drafts, the target
// verifies by rejection sampling. Greedy output is the target's own; at
// temperature 0.8 the distribution of what a client sees is unchanged (a χ²
// test that also rejects a proposer lying about its q, so it can fail);
// mismatched vocabularies and recurrent drafts are refused by name; nothing
// is left in either KV pool after cancellations and preemptions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/api.h"
#include "engine/media_prompt.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "spec/draft_model.h"
#include "test_util.h"

namespace sustain::engine {
namespace {

std::string ref_model(const char* name) {
  return test::ref_path(std::string("models/") + name);
}

const char* kTarget = "aidreams260K-f32.gguf";
const char* kDraft = "aidreams260K-Q4_K_M.gguf";

EngineConfig config(bool draft, int n_parallel, int draft_max = 8) {
  EngineConfig c;
  c.model_path = ref_model(kTarget);
  c.n_threads = 2;
  c.n_ctx = 512;
  c.n_parallel = n_parallel;
  if (draft) {
    c.spec.types = {"draft"};
    c.spec.draft_model = ref_model(kDraft);
    c.spec.draft_max = draft_max;
  }
  // Every step drafts (the gate, tested in test_engine_spec.cc, would draft
  // less where it does not pay, and these tests count on drafts).
  c.spec.gate = false;
  return c;
}

std::unique_ptr<Engine> make(const EngineConfig& c) {
  auto e = Engine::create(c);
  EXPECT_TRUE(e.has_value()) << e.status().message();
  return e ? std::move(*e) : nullptr;
}

// The three prompts the reference greedy texts use (ref/README.md), as the
// trained model's tokenizer reads them.
std::vector<std::vector<int32_t>> prompts(const Engine& e) {
  std::vector<std::vector<int32_t>> out;
  for (const char* p : {"Once upon a time", "The little dog", "Lily and Ben went to the park"}) {
    auto ids = e.tokenizer().encode(p, true, false);
    EXPECT_TRUE(ids.has_value());
    out.push_back(*ids);
  }
  return out;
}

std::vector<Event> run_all(Engine& e, const std::vector<Request>& reqs) {
  std::vector<Stream> streams;
  for (const auto& r : reqs) {
    auto s = e.submit(r);
    EXPECT_TRUE(s.has_value());
    streams.push_back(std::move(*s));
  }
  std::vector<Event> out;
  for (auto& s : streams) out.push_back(s.wait());
  return out;
}

std::vector<int32_t> ids(const Event& ev) {
  std::vector<int32_t> v;
  for (const auto& t : ev.tokens) v.push_back(t.id);
  return v;
}

TEST(EngineDraft, GreedyTextUnchangedAndDraftsAccepted) {
  SUSTAIN_REQUIRE_REF();
  auto plain = make(config(false, 1));
  ASSERT_TRUE(plain);
  std::vector<Request> reqs;
  for (auto& p : prompts(*plain)) {
    Request r;
    r.prompt = p;
    r.max_tokens = 64;
    r.sampling.temperature = 0.0f;
    reqs.push_back(r);
  }
  const auto want = run_all(*plain, reqs);
  for (int np : {1, 4}) {
    SCOPED_TRACE(np);
    auto spec = make(config(true, np));
    ASSERT_TRUE(spec);
    const auto got = run_all(*spec, reqs);
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(ids(got[i]), ids(want[i])) << "prompt " << i;
      EXPECT_EQ(got[i].finish, want[i].finish);
      drafted += got[i].usage.spec_drafted;
      accepted += got[i].usage.spec_accepted;
    }
    const EngineStats st = spec->stats();
    std::printf(
        "[ measured ] draft %s for %s, -np %d: %lld drafted, %lld accepted (%.0f%%), "
        "%llu verify steps; draft KV %lld bytes\n",
        kDraft, kTarget, np, static_cast<long long>(drafted), static_cast<long long>(accepted),
        drafted ? 100.0 * accepted / drafted : 0.0, static_cast<unsigned long long>(st.spec_steps),
        static_cast<long long>(st.draft_kv_bytes));
    // A Q4_K_M copy of the same model agrees with it nearly always.
    EXPECT_GT(accepted, drafted / 2);
    EXPECT_GT(st.draft_kv_bytes, 0);
    EXPECT_EQ(st.kv_pages_used, 0);
    EXPECT_EQ(st.draft_kv_pages_used, 0);
    uint64_t at0 = st.spec_drafted_at[0], acc0 = st.spec_accepted_at[0];
    EXPECT_EQ(at0, st.spec_steps);
    EXPECT_LE(acc0, at0);
  }
}

// The first three sampled tokens of `n` seeded requests of four (so that
// tokens 2 and 3 are both drafted positions on the speculative engine).
std::map<std::vector<int32_t>, int> outcomes(Engine& e, const std::vector<int32_t>& prompt, int n,
                                             uint64_t seed0) {
  std::map<std::vector<int32_t>, int> h;
  std::vector<Request> batch;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = 4;
    r.ignore_eos = true;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = seed0 + static_cast<uint64_t>(i);
    batch.push_back(r);
    if (batch.size() == 64 || i + 1 == n) {
      for (const Event& ev : run_all(e, batch)) {
        auto first = ids(ev);
        first.resize(std::min<size_t>(first.size(), 3));
        ++h[first];
      }
      batch.clear();
    }
  }
  return h;
}

// Two-sample χ² over the outcomes both runs saw at least 20 times together
// (equal sample sizes); true when it does not reject at p = 0.01.
bool same_distribution(const std::map<std::vector<int32_t>, int>& a,
                       const std::map<std::vector<int32_t>, int>& b, const char* label) {
  double chi2 = 0;
  int cells = 0, rest_a = 0, rest_b = 0;
  std::map<std::vector<int32_t>, std::pair<int, int>> both;
  for (const auto& [k, n] : a) both[k].first = n;
  for (const auto& [k, n] : b) both[k].second = n;
  for (const auto& [k, n] : both) {
    if (n.first + n.second < 20) {
      rest_a += n.first;
      rest_b += n.second;
      continue;
    }
    chi2 += std::pow(n.first - n.second, 2) / (n.first + n.second);
    ++cells;
  }
  if (rest_a + rest_b > 0) {  // the rare outcomes pooled into one cell
    chi2 += std::pow(rest_a - rest_b, 2) / (rest_a + rest_b);
    ++cells;
  }
  const double dof = std::max(1, cells - 1);
  // The χ² quantile at p = 0.01 (Wilson–Hilferty).
  const double z = 2.326, h = 2.0 / (9.0 * dof);
  const double crit = dof * std::pow(1 - h + z * std::sqrt(h), 3);
  std::printf("[ measured ] %s: %zu distinct outcomes, chi2 %.1f over %d cells (critical %.1f)\n",
              label, both.size(), chi2, cells, crit);
  return chi2 < crit;
}

// A proposer that drafts the draft model's most likely token but reports the
// distribution it would have sampled from: q no longer describes the draft,
// so verification is biased. The χ² test must catch it.
class GreedyLiar final : public spec::Proposer {
 public:
  explicit GreedyLiar(std::shared_ptr<spec::Proposer> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return "greedy liar (test)"; }
  void propose_batch(std::span<spec::Job> jobs) override {
    inner_->propose_batch(jobs);
    for (spec::Job& j : jobs) {
      if (j.out->tokens.empty()) continue;
      const auto& q = j.out->q[0];
      int32_t best = j.out->tokens[0];
      float bp = -1;
      for (const auto& e : q)
        if (e.prob > bp) bp = e.prob, best = e.id;
      j.out->tokens.resize(1);
      j.out->q.resize(1);
      j.out->tokens[0] = best;
    }
  }
  void forget(uint64_t seq) override { inner_->forget(seq); }

 private:
  std::shared_ptr<spec::Proposer> inner_;
};

// A draft model reads text only: a request with an image drafts from the
// text around it, and one such request in the batch does not stop the
// others' drafts (they share the draft's forwards). The "image" here is
// rows equal to the token embeddings it replaces, so the target's greedy
// output must be the text prompt's.
TEST(EngineDraft, RequestsWithImagesDraftFromTheirText) {
  SUSTAIN_REQUIRE_REF();
  auto plain = make(config(false, 1));
  ASSERT_TRUE(plain);
  auto md = Model::load(ref_model(kTarget));
  ASSERT_TRUE(md.has_value()) << md.status().message();
  const int64_t d = (*md)->config().n_embd;
  std::vector<Request> text, mixed;
  for (auto& p : prompts(*plain)) {
    Request r;
    r.prompt = p;
    r.max_tokens = 48;
    r.sampling.temperature = 0.0f;
    text.push_back(r);
    // Positions 1..3 become an image of their own embeddings.
    auto m = std::make_shared<MediaPrompt>();
    m->ids = p;
    m->n_embd = d;
    m->images.push_back({1, 3, 0});
    m->embd.resize(size_t(2 * d));
    for (int64_t i = 1; i < 3; ++i) {
      kernels::get_row((*md)->weights().token_embd, p[size_t(i)], m->embd.data() + (i - 1) * d);
      m->ids[size_t(i)] = static_cast<int32_t>(-10 - i);
    }
    r.prompt = m->ids;
    r.media = m;
    mixed.push_back(r);
  }
  mixed[1] = text[1];  // one text request among the image ones
  const auto want = run_all(*plain, text);
  auto spec = make(config(true, 4));
  ASSERT_TRUE(spec);
  const auto got = run_all(*spec, mixed);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].finish, Finish::kLength) << got[i].error.message();
    EXPECT_EQ(ids(got[i]), ids(want[i])) << "prompt " << i;
    EXPECT_GT(got[i].usage.spec_drafted, 0) << "prompt " << i << " drafts";
    EXPECT_GT(got[i].usage.spec_accepted, 0) << "prompt " << i;
    std::printf("[ measured ] prompt %zu (%s): %lld drafted, %lld accepted\n", i,
                mixed[i].media ? "with an image" : "text",
                static_cast<long long>(got[i].usage.spec_drafted),
                static_cast<long long>(got[i].usage.spec_accepted));
  }
  const EngineStats st = spec->stats();
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.draft_kv_pages_used, 0);
}

TEST(EngineDraft, SamplingDistributionUnchangedAndALiarIsCaught) {
  SUSTAIN_REQUIRE_REF();
  auto plain = make(config(false, 8));
  auto spec = make(config(true, 8, 3));
  ASSERT_TRUE(plain && spec);
  const auto prompt = prompts(*plain)[0];
  const int n = 4000;
  const auto a = outcomes(*plain, prompt, n, 1000);
  const auto b = outcomes(*spec, prompt, n, 50000);  // other seeds: independent samples
  EXPECT_TRUE(same_distribution(a, b, "plain vs draft at T 0.8"));
  // Calibration: two plain samples pass the same test.
  EXPECT_TRUE(same_distribution(a, outcomes(*plain, prompt, n, 70000), "plain vs plain"));
  const EngineStats st = spec->stats();
  EXPECT_GT(st.spec_accepted_tokens, st.spec_draft_tokens / 3);
  EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);  // some rejected: residual draws ran
  std::printf("[ measured ] T 0.8: %llu drafted, %llu accepted (%.0f%%)\n",
              static_cast<unsigned long long>(st.spec_draft_tokens),
              static_cast<unsigned long long>(st.spec_accepted_tokens),
              100.0 * st.spec_accepted_tokens / std::max<uint64_t>(1, st.spec_draft_tokens));

  // The same test rejects verification against a q the draft was not drawn from.
  auto model = Model::load(ref_model(kDraft));
  ASSERT_TRUE(model.has_value());
  ThreadPool pool(1);
  spec::DraftModelOptions o;
  o.pool_tokens = 8 * 512;
  auto inner = spec::DraftModelProposer::create(std::move(*model), o, pool);
  ASSERT_TRUE(inner.has_value()) << inner.status().message();
  EngineConfig c = config(false, 8);
  c.extra_proposer =
      std::make_shared<GreedyLiar>(std::shared_ptr<spec::Proposer>(std::move(*inner)));
  auto liar = make(c);
  ASSERT_TRUE(liar);
  const auto l = outcomes(*liar, prompt, n, 90000);
  EXPECT_FALSE(same_distribution(a, l, "plain vs a proposer lying about q"));
}

// Eight seeded requests at a temperature, drafted by the Q4_K_M copy and
// verified by rejection sampling, four at a time: a step's verify rows
// drawn over the pool (each sequence's rows in order on one thread) give
// every token, logprob, finish and acceptance count that drawing them one
// sequence after another gives, and the pooled run did draw verify rows at
// once. Batch invariant, so what the draft proposes and the target
// computes does not depend on which requests share a step.
TEST(EngineDraft, VerifyRowsDrawnOverThePoolAreWhatSerialDraws) {
  SUSTAIN_REQUIRE_REF();
  constexpr int kRequests = 8;
  auto run = [&](bool pooled, EngineStats* st) {
    EngineConfig c = config(true, 4, 4);
    c.pool_sampling = pooled;
    c.batch_invariant = true;
    auto e = make(c);
    std::vector<Event> got;
    if (!e) return got;
    const auto ps = prompts(*e);
    std::vector<Request> reqs;
    for (int i = 0; i < kRequests; ++i) {
      Request r;
      r.prompt = ps[static_cast<size_t>(i) % ps.size()];
      r.max_tokens = 40;
      r.sampling.temperature = 0.6f + 0.1f * static_cast<float>(i % 3);
      r.sampling.seed = 700 + static_cast<uint64_t>(i);
      // A temperature alone, top_p, and the default chain (top_k 40).
      if (i % 3 != 2) r.sampling.top_k = 0, r.sampling.min_p = 0.0f;
      if (i % 3 == 0) r.sampling.top_p = 1.0f;
      if (i % 2) r.top_logprobs = 3, r.logprobs = true;
      reqs.push_back(r);
    }
    got = run_all(*e, reqs);
    *st = e->stats();
    return got;
  };
  EngineStats sp, ss;
  const auto a = run(true, &sp), b = run(false, &ss);
  ASSERT_EQ(a.size(), size_t{kRequests});
  ASSERT_EQ(b.size(), size_t{kRequests});
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ids(a[i]), ids(b[i]));
    EXPECT_EQ(a[i].finish, b[i].finish);
    EXPECT_EQ(a[i].usage.spec_drafted, b[i].usage.spec_drafted);
    EXPECT_EQ(a[i].usage.spec_accepted, b[i].usage.spec_accepted);
    EXPECT_EQ(a[i].usage.spec_steps, b[i].usage.spec_steps);
    ASSERT_EQ(a[i].tokens.size(), b[i].tokens.size());
    for (size_t t = 0; t < a[i].tokens.size(); ++t) {
      EXPECT_EQ(a[i].tokens[t].logprob, b[i].tokens[t].logprob) << "token " << t;
      ASSERT_EQ(a[i].tokens[t].top.size(), b[i].tokens[t].top.size());
      for (size_t j = 0; j < a[i].tokens[t].top.size(); ++j)
        EXPECT_EQ(a[i].tokens[t].top[j].id, b[i].tokens[t].top[j].id);
    }
  }
  EXPECT_EQ(sp.spec_accepted_tokens, ss.spec_accepted_tokens);
  EXPECT_GT(sp.spec_accepted_tokens, 0u);
  EXPECT_LT(sp.spec_accepted_tokens, sp.spec_draft_tokens);  // rejections: residual draws
  // Nearly every token came from a verify step of several sequences; only
  // the first tokens and the last request's steps alone are not pooled.
  EXPECT_GT(sp.pool_sampled_tokens, sp.generated_tokens / 2)
      << sp.pool_sampled_tokens << " of " << sp.generated_tokens;
  EXPECT_EQ(ss.pool_sampled_tokens, 0u);
  EXPECT_EQ(sp.kv_pages_used, 0);
  EXPECT_EQ(sp.draft_kv_pages_used, 0);
}

// A seeded request at a temperature draws the same tokens whether its
// prompt was computed or came from the prefix cache: its first token is
// always drawn by plain sampling, never verified as a draft (a cached
// prompt leaves only its last token to compute, which used to make the
// first step a verify step, and rejection sampling draws other random
// numbers). The same for a prompt whose last chunk was one token, which
// the TPOT target's chunking made depend on timing.
TEST(EngineDraft, ASeededRequestDrawsTheSameWithOrWithoutItsCachedPrompt) {
  SUSTAIN_REQUIRE_REF();
  EngineConfig c = config(true, 1, 4);
  c.batch_invariant = true;
  auto warm = make(c);
  auto cold = make(c);
  ASSERT_TRUE(warm && cold);
  // Two pages and one token: the cache holds all but the last token.
  auto prompt = warm->tokenizer().encode(
      "Once upon a time, there was a little dog named Max. Max liked to play in the park with "
      "his friend Lily. One day, Lily and Max went to the park to play with a big red ball. "
      "They ran and jumped and laughed. Then it started to rain, so they ran home.",
      true, false);
  ASSERT_TRUE(prompt.has_value());
  ASSERT_GT(prompt->size(), 65u);
  prompt->resize(65);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    Request r;
    r.prompt = *prompt;
    r.max_tokens = 24;
    r.sampling.temperature = 0.9f;
    r.sampling.seed = seed;
    const auto first = run_all(*warm, {r});  // fills warm's prefix cache
    const auto cached = run_all(*warm, {r});
    const auto computed = run_all(*cold, {r});
    ASSERT_EQ(cached.size(), 1u);
    EXPECT_EQ(cached[0].usage.cached_prompt_tokens, 64);
    EXPECT_EQ(ids(cached[0]), ids(first[0]));
    EXPECT_EQ(ids(cached[0]), ids(computed[0]));
    EXPECT_GT(cached[0].usage.spec_drafted, 0);
  }
}

TEST(EngineDraft, OtherVocabularyAndRecurrentDraftsAreRefused) {
  SUSTAIN_REQUIRE_REF();
  EngineConfig c = config(true, 1);
  c.spec.draft_model = ref_model("tiny-qwen3-Q4_K_M.gguf");
  auto e = Engine::create(c);
  ASSERT_FALSE(e.has_value());
  const std::string m = e.status().message();
  EXPECT_NE(m.find("--draft-model"), std::string::npos) << m;
  EXPECT_NE(m.find("tiny-qwen3-Q4_K_M.gguf"), std::string::npos) << m;
  EXPECT_NE(m.find("vocabulary"), std::string::npos) << m;

  c.spec.draft_model = ref_model("no-such-draft.gguf");
  e = Engine::create(c);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("no-such-draft.gguf"), std::string::npos);

  c.spec.draft_model.clear();
  e = Engine::create(c);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("--draft-model"), std::string::npos);

  // A hybrid draft cannot roll its state back.
  auto hybrid = Model::load(ref_model("tiny-qwen35-f32.gguf"));
  ASSERT_TRUE(hybrid.has_value());
  ThreadPool pool(1);
  spec::DraftModelOptions o;
  o.pool_tokens = 512;
  auto d = spec::DraftModelProposer::create(std::move(*hybrid), o, pool);
  ASSERT_FALSE(d.has_value());
  EXPECT_NE(d.status().message().find("recurrent"), std::string::npos);
}

// Cancellations and preemptions under a small pool, at temperature 0 and
// 0.8: both pools empty afterwards, every request ended.
TEST(EngineDraft, CancellationAndPreemptionLeakNothing) {
  SUSTAIN_REQUIRE_REF();
  EngineConfig c = config(true, 4);
  c.n_ctx = 256;
  c.kv_tokens = 384;
  auto e = make(c);
  ASSERT_TRUE(e);
  const auto ps = prompts(*e);
  std::vector<Stream> streams;
  for (int i = 0; i < 48; ++i) {
    Request r;
    r.prompt = ps[static_cast<size_t>(i) % ps.size()];
    r.max_tokens = 120;
    r.ignore_eos = true;
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = static_cast<uint64_t>(i);
    auto s = e->submit(r);
    ASSERT_TRUE(s.has_value());
    streams.push_back(std::move(*s));
  }
  for (size_t i = 0; i < streams.size(); i += 3) e->cancel(streams[i].id());
  for (auto& s : streams) s.wait();
  const EngineStats st = e->stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.draft_kv_pages_used, 0);
  EXPECT_GT(st.spec_steps, 0u);
  EXPECT_GT(st.preemptions, 0u);
}

}  // namespace
}  // namespace sustain::engine

namespace sustain::engine {
namespace {

// `sustain plan` with the serve flags for speculation counts the draft
// model's (or the MTP block's) KV pool exactly as the engine allocates it.
TEST(PlanSpec, TheSpeculationPoolEqualsWhatTheEngineAllocates) {
  SUSTAIN_REQUIRE_REF();
  struct Case {
    std::string target, args;
    std::vector<std::string> types;
    std::string draft;
    int draft_max, n_parallel;
    int64_t n_ctx;
  };
  const std::vector<Case> cases = {
      {ref_model(kTarget),
       "--spec draft -md " + ref_model(kDraft) + " --draft-max 8 -ctkd fp8",
       {"draft"},
       ref_model(kDraft),
       8,
       3,
       512},
      {ref_model(kTarget),
       "--spec draft -md " + ref_model(kDraft) + " --draft-max 16",
       {"draft"},
       ref_model(kDraft),
       16,
       1,
       300},
      {ref_model("tiny-qwen35-f32.gguf"), "--spec mtp", {"mtp"}, "", 8, 2, 256},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.args);
    EngineConfig c;
    c.model_path = k.target;
    c.n_threads = 1;
    c.n_ctx = k.n_ctx;
    c.n_parallel = k.n_parallel;
    c.spec.types = k.types;
    c.spec.draft_model = k.draft;
    c.spec.draft_max = k.draft_max;
    if (k.args.find("fp8") != std::string::npos) c.spec.draft_k_type = QType::FP8_E4M3;
    auto e = make(c);
    ASSERT_TRUE(e);
    // Stats are published by the engine's loop: run one short request.
    Request r;
    r.prompt = {1, 5, 9};
    r.max_tokens = 2;
    auto s = e->submit(r);
    ASSERT_TRUE(s.has_value());
    s->wait();
    const EngineStats st = e->stats();
    const std::string cmd = std::string(SUSTAIN_BINARY) + " plan --json -m " + k.target + " -c " +
                            std::to_string(k.n_ctx) + " --parallel " +
                            std::to_string(k.n_parallel) + " " + k.args;
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    ASSERT_EQ(pclose(f), 0) << cmd;
    const auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    ASSERT_TRUE(j["spec"].is_object()) << out;
    EXPECT_EQ(j["spec"]["kv_bytes"].get<int64_t>(), st.draft_kv_bytes);
    EXPECT_GT(st.draft_kv_bytes, 0);
    EXPECT_EQ(j["logits_bytes"].get<int64_t>(),
              int64_t{k.n_parallel} * (1 + k.draft_max) * e->model().config().n_vocab * 4);
    if (k.types[0] == "draft") EXPECT_GT(j["spec"]["draft_weights_bytes"].get<int64_t>(), 0);
  }
}

}  // namespace
}  // namespace sustain::engine

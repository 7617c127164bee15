// The mtp proposer (spec/mtp.h) against llama.cpp's MTP logits: fed the way
// the engine feeds it (our own main forward's hidden states, handed over
// step by step as prefill chunks and decode steps would), the block's
// logits at every reference position agree with the reference; a split
// into other chunks gives the same logits; and through the engine, greedy
// output with --spec mtp equals output without it, with drafts verified and
// no page left behind.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include <fmt/format.h>

#include "engine/api.h"
#include "engine/media_prompt.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/ref_compare.h"
#include "spec/mtp.h"
#include "test_util.h"

namespace sustain::test {
namespace {

struct Main {
  std::unique_ptr<Model> model;
  std::optional<kv::KvCache> cache;
  std::unique_ptr<ThreadPool> pool;
  Workspace ws;
};

Main open_main(const std::string& path) {
  Main m;
  auto md = Model::load(path);
  EXPECT_TRUE(md.has_value()) << md.status().message();
  if (!md) return m;
  m.model = std::move(md).value();
  auto c = kv::KvCache::create(m.model->kv_geometry(QType::F16, QType::F16, 32, 1), 1024);
  EXPECT_TRUE(c.has_value()) << c.status().message();
  if (c) m.cache.emplace(std::move(c).value());
  m.pool = std::make_unique<ThreadPool>(2);
  m.ws = m.model->make_workspace(512, 2);
  return m;
}

// Every prompt token's hidden state from the main forward's hidden_all.
std::vector<float> main_hidden(Main& m, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), d = m.model->config().n_embd;
  kv::PageTable t;
  EXPECT_TRUE(m.cache->reserve(t, n).is_ok());
  Batch b;
  b.seqs = {&t};
  for (int64_t i = 0; i < n; ++i) b.tokens.push_back({tokens[size_t(i)], 0, i, i + 1 == n});
  std::vector<float> logits(m.model->config().n_vocab), last(d), all(size_t(n * d));
  EXPECT_TRUE(
      m.model->forward(b, *m.cache, m.ws, *m.pool, logits.data(), last.data(), all.data()).is_ok());
  // hidden_all's last row is the `hidden` of the one logits row.
  for (int64_t k = 0; k < d; ++k) EXPECT_EQ(all[size_t((n - 1) * d + k)], last[size_t(k)]);
  m.cache->release(t);
  return all;
}

// Feeds the proposer as the engine would: after each "step", the tokens
// known so far and the hidden states of the positions the target computed.
// Returns the block's logits at each position `cuts` ends on.
// `from`: the first position the target computed (a prefix served from its
// cache before it).
std::vector<std::vector<float>> feed(spec::MtpProposer& p, const std::vector<int32_t>& tokens,
                                     const std::vector<float>& h, int64_t d, int64_t n_vocab,
                                     const std::vector<int64_t>& cuts, int64_t from = 0) {
  std::vector<std::vector<float>> rows(tokens.size());
  int64_t computed = from;  // positions whose hidden state was handed over
  for (int64_t last : cuts) {
    // Tokens 0..last are known; the target computed 0..last-1.
    spec::Observed o{7,
                     std::span<const int32_t>(tokens.data(), size_t(last + 1)),
                     computed,
                     last - computed,
                     h.data() + computed * d,
                     {}};
    p.observe(std::span<const spec::Observed>(&o, 1));
    computed = last;
    int64_t pos = -1;
    const float* l = p.next_logits(7, &pos);
    EXPECT_EQ(pos, last);
    EXPECT_NE(l, nullptr);
    if (l) rows[size_t(last)].assign(l, l + n_vocab);
  }
  p.forget(7);
  EXPECT_EQ(p.pages_in_use(), 0);
  return rows;
}

const RefCase kCases[] = {
    {"tiny-qwen35-f32", "p1_short", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-f32", "p2_medium", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-Q8_0", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
};

class MtpProposerVsLlamaCpp : public ::testing::TestWithParam<RefCase> {};

TEST_P(MtpProposerVsLlamaCpp, StepByStepFeedingGivesTheReferenceDraftLogits) {
  SUSTAIN_REQUIRE_REF();
  const RefCase& c = GetParam();
  const std::string stem = std::string(c.model) + "." + c.prompt + "." + c.cfg + ".mtp";
  const RefData ref = read_ref(stem);
  ASSERT_FALSE(HasFailure());
  Main m = open_main(ref_path("models/" + std::string(c.model) + ".gguf"));
  ASSERT_TRUE(m.model && m.cache);
  const int64_t d = m.model->config().n_embd, V = m.model->config().n_vocab;
  const std::vector<float> h = main_hidden(m, ref.tokens);
  spec::MtpOptions o;
  o.pool_tokens = 1024;
  o.ubatch_tokens = 8;  // a catch-up longer than this runs in several batches
  auto p = spec::MtpProposer::create(*m.model, o, *m.pool);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  // One step per position, as decode runs: the logits at every position.
  const int64_t n = static_cast<int64_t>(ref.tokens.size());
  std::vector<int64_t> every;
  for (int64_t i = 0; i < n; ++i) every.push_back(i);
  const auto rows = feed(**p, ref.tokens, h, d, V, every);
  check_against_ref(c, ref, rows, "mtp proposer " + stem);
  // Steps that end only at the reference positions (long prefill chunks,
  // several batches each): the same logits there.
  std::vector<int64_t> cuts(ref.positions.begin(), ref.positions.end());
  const auto chunked = feed(**p, ref.tokens, h, d, V, cuts);
  for (int64_t pos : cuts) {
    ASSERT_EQ(chunked[size_t(pos)].size(), size_t(V)) << pos;
    for (int64_t k = 0; k < V; ++k)
      ASSERT_NEAR(chunked[size_t(pos)][size_t(k)], rows[size_t(pos)][size_t(k)], 1e-4f)
          << "position " << pos << ", token " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Ref, MtpProposerVsLlamaCpp, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return case_name(info.param); });

// The block's KV in a quantized format (-ctkd / -ctvd): its draft logits
// stay within the format's error of llama.cpp's (computed with f16 KV), at
// the tolerances the target's own q8_0-KV forward meets on f32 weights.
TEST(MtpProposer, AQuantizedKvDraftsWithinItsFormatsError) {
  SUSTAIN_REQUIRE_REF();
  const RefData ref = read_ref("tiny-qwen35-f32.p2_medium.kvf16.mtp");
  ASSERT_FALSE(HasFailure());
  Main m = open_main(ref_path("models/tiny-qwen35-f32.gguf"));
  ASSERT_TRUE(m.model && m.cache);
  const int64_t d = m.model->config().n_embd, V = m.model->config().n_vocab;
  const std::vector<float> h = main_hidden(m, ref.tokens);
  std::vector<int64_t> every;
  for (int64_t i = 0; i < static_cast<int64_t>(ref.tokens.size()); ++i) every.push_back(i);
  struct Fmt {
    QType k, v;
    RefCase tol;
  };
  const Fmt fmts[] = {
      {QType::Q8_0, QType::Q8_0, {"tiny-qwen35-f32", "p2_medium", "kvq8", 0.05, 0.97, 1e-5}},
      {QType::Q4_0, QType::Q4_0, {"tiny-qwen35-f32", "p2_medium", "kvq4", 0.2, 0.85, 1e-4}},
  };
  for (const Fmt& f : fmts) {
    SCOPED_TRACE(qtype_name(f.k));
    spec::MtpOptions o;
    o.k_type = f.k;
    o.v_type = f.v;
    o.pool_tokens = 1024;
    auto p = spec::MtpProposer::create(*m.model, o, *m.pool);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    const auto rows = feed(**p, ref.tokens, h, d, V, every);
    check_against_ref(f.tol, ref, rows, fmt::format("mtp proposer, {} KV", qtype_name(f.k)));
  }
}

// A format whose block does not divide the block's head dimension is
// refused naming the flags.
TEST(MtpProposer, AKvFormatTheHeadsCannotHoldIsRefused) {
  SUSTAIN_REQUIRE_REF();
  Main m = open_main(ref_path("models/tiny-qwen35-f32.gguf"));
  ASSERT_TRUE(m.model);
  spec::MtpOptions o;
  o.k_type = QType::Q4_K;  // 256-element blocks; the heads are 64 wide
  o.pool_tokens = 1024;
  auto p = spec::MtpProposer::create(*m.model, o, *m.pool);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("-ctkd Q4_K"), std::string::npos) << p.status().message();
  std::printf("[ message ] %s\n", p.status().message().c_str());
}

// A prompt whose first pages the target's prefix cache served: the block
// takes its entries there from its own prefix cache (filled by an earlier
// sequence with that prefix) and drafts from the same logits as a cold run;
// without that cache those entries are computed blind (zeros for the
// target's hidden states) and the logits differ — what the cache is for.
TEST(MtpProposer, APrefixFromThePrefixCacheGivesTheColdRunsLogits) {
  SUSTAIN_REQUIRE_REF();
  Main m = open_main(ref_path("models/tiny-qwen35-f32.gguf"));
  ASSERT_TRUE(m.model && m.cache);
  const int64_t d = m.model->config().n_embd, V = m.model->config().n_vocab;
  constexpr int64_t kShared = 64;  // two pages of 32
  std::vector<int32_t> a(100), b;
  uint64_t x = 12345;
  for (int32_t& t : a) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(std::min<int64_t>(V, 200)));
  }
  b.assign(a.begin(), a.begin() + kShared);
  for (int i = 0; i < 30; ++i) b.push_back((a[size_t(kShared + i)] + 7) % static_cast<int32_t>(V));
  const std::vector<float> ha = main_hidden(m, a), hb = main_hidden(m, b);
  const int64_t nb = static_cast<int64_t>(b.size());
  auto make = [&](bool prefix) {
    spec::MtpOptions o;
    o.pool_tokens = 1024;
    o.ubatch_tokens = 16;
    o.prefix_cache = prefix;
    auto p = spec::MtpProposer::create(*m.model, o, *m.pool);
    EXPECT_TRUE(p.has_value()) << p.status().message();
    return p ? std::move(*p) : nullptr;
  };
  // Decode-like steps from the first position after the shared prefix.
  std::vector<int64_t> tail;
  for (int64_t i = kShared + 1; i < nb; ++i) tail.push_back(i);
  std::vector<int64_t> cold_cuts = {kShared};
  cold_cuts.insert(cold_cuts.end(), tail.begin(), tail.end());

  auto cold = make(false);
  ASSERT_TRUE(cold);
  const auto want = feed(*cold, b, hb, d, V, cold_cuts);

  auto warm = make(true);
  ASSERT_TRUE(warm);
  // The earlier sequence: all of a, in prefill-sized chunks then a step.
  feed(*warm, a, ha, d, V, {40, 90, 99});
  EXPECT_GT(warm->pages_cached(), 0) << "its whole pages stay for later prompts";
  // b as after a prefix-cache hit: the target computed from kShared on.
  const auto got = feed(*warm, b, hb, d, V, tail, kShared);
  EXPECT_EQ(warm->prefix_tokens_reused(), static_cast<uint64_t>(kShared));
  for (int64_t pos : tail)
    for (int64_t k = 0; k < V; ++k)
      ASSERT_NEAR(got[size_t(pos)][size_t(k)], want[size_t(pos)][size_t(k)], 1e-4f)
          << "position " << pos << ", token " << k;

  auto blind = make(false);
  ASSERT_TRUE(blind);
  feed(*blind, a, ha, d, V, {40, 90, 99});
  const auto off = feed(*blind, b, hb, d, V, tail, kShared);
  EXPECT_EQ(blind->prefix_tokens_reused(), 0u);
  float worst = 0;
  for (int64_t pos : tail)
    for (int64_t k = 0; k < V; ++k)
      worst = std::max(worst, std::abs(off[size_t(pos)][size_t(k)] - want[size_t(pos)][size_t(k)]));
  EXPECT_GT(worst, 1e-3f) << "the cached prefix's hidden states must matter to the test";
  std::printf(
      "[ measured ] mtp logits after a cached prefix without the block's cache: max |diff| %.4f\n",
      static_cast<double>(worst));
}

// Through the engine: a second request sharing a cached prefix takes the
// block's entries there from the block's cache (the engine's stats say how
// many), greedy output is that of a run without speculation, and the
// sequences' pages go back (only the cache keeps some).
TEST(MtpProposer, EngineReusesTheBlocksEntriesAfterACachedPrefix) {
  SUSTAIN_REQUIRE_REF();
  std::vector<int32_t> a(120);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>((i * 37 + 11) % 150);
  std::vector<int32_t> b(a.begin(), a.begin() + 100);
  for (int i = 0; i < 12; ++i) b.push_back(static_cast<int32_t>(160 + i));
  std::vector<std::vector<int32_t>> outs;
  engine::EngineStats spec_st;
  for (const bool spec : {false, true}) {
    engine::EngineConfig c;
    c.model_path = ref_path("models/tiny-qwen35-f32.gguf");
    c.n_threads = 2;
    c.n_ctx = 512;
    c.n_parallel = 1;
    if (spec) c.spec.types = {"mtp"};
    c.spec.gate = false;
    auto e = engine::Engine::create(c);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    for (const auto* prompt : {&a, &b}) {  // one after the other: the first is cached
      engine::Request q;
      q.prompt = *prompt;
      q.max_tokens = 24;
      q.ignore_eos = true;
      q.sampling.temperature = 0;
      auto s = (*e)->submit(q);
      ASSERT_TRUE(s.has_value()) << s.status().message();
      engine::Event ev = s->wait();
      ASSERT_EQ(ev.finish, engine::Finish::kLength) << ev.error.message();
      std::vector<int32_t> ids;
      for (const auto& t : ev.tokens) ids.push_back(t.id);
      outs.push_back(ids);
    }
    if (spec) spec_st = (*e)->stats();
  }
  ASSERT_EQ(outs.size(), 4u);
  EXPECT_EQ(outs[0], outs[2]);
  EXPECT_EQ(outs[1], outs[3]);
  EXPECT_EQ(spec_st.prefix_cache_hits, 1u) << "the second prompt's prefix came from the cache";
  EXPECT_GT(spec_st.draft_prefix_tokens_reused, 0u);
  EXPECT_EQ(spec_st.draft_prefix_tokens_reused % 32, 0u) << "whole pages";
  EXPECT_EQ(spec_st.draft_kv_pages_used, 0);
  EXPECT_GT(spec_st.draft_kv_pages_cached, 0);
  EXPECT_GT(spec_st.spec_draft_tokens, 0u);
  std::printf(
      "[ measured ] mtp entries reused after a cached prefix: %llu of the target's %llu\n",
      static_cast<unsigned long long>(spec_st.draft_prefix_tokens_reused),
      static_cast<unsigned long long>(spec_st.prompt_tokens - spec_st.prompt_tokens_computed));
}

TEST(MtpProposer, AModelWithoutAnMtpBlockIsRefused) {
  SUSTAIN_REQUIRE_REF();
  Main m = open_main(ref_path("models/tiny-qwen3-Q4_K_M.gguf"));
  ASSERT_TRUE(m.model);
  auto p = spec::MtpProposer::create(*m.model, spec::MtpOptions{32, 256, 64, 0.0f}, *m.pool);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), Code::kUnsupported);
  EXPECT_NE(p.status().message().find("no MTP/NextN block"), std::string::npos)
      << p.status().message();
}

// An engine on the tiny hybrid with its MTP block drafting up to `depth`
// tokens every step (depth 0: no speculation), three requests at a time.
engine::EngineConfig mtp_engine(int depth) {
  engine::EngineConfig c;
  c.model_path = ref_path("models/tiny-qwen35-f32.gguf");
  c.n_threads = 2;
  c.n_ctx = 512;
  c.n_parallel = 3;
  if (depth > 0) c.spec.types = {"mtp"};
  c.spec.mtp_depth = std::max(depth, 1);
  c.spec.gate = false;  // drafts every step: the tests count them
  return c;
}

// Three requests on the reference prompt cut 0, 5 and 10 tokens short
// (`shape` sets the rest of each), submitted at once; their events.
std::vector<engine::Event> run_three(engine::Engine& e, const RefData& ref,
                                     const std::function<void(engine::Request&, int)>& shape) {
  std::vector<engine::Stream> streams;
  for (int r = 0; r < 3; ++r) {
    engine::Request q;
    q.prompt.assign(ref.tokens.begin(), ref.tokens.end() - r * 5);
    q.ignore_eos = true;
    shape(q, r);
    auto s = e.submit(q);
    EXPECT_TRUE(s.has_value()) << s.status().message();
    if (s) streams.push_back(std::move(*s));
  }
  std::vector<engine::Event> out;
  for (auto& s : streams) out.push_back(s.wait());
  return out;
}

// Through the engine: greedy output is the same with and without --spec mtp
// (the target decides every token), drafts are verified, and nothing leaks.
TEST(MtpProposer, EngineGreedyOutputIsUnchanged) {
  SUSTAIN_REQUIRE_REF();
  const RefData ref = read_ref("tiny-qwen35-f32.p2_medium.kvf16.mtp");
  std::vector<std::vector<int32_t>> outs;
  // No speculation, the block's one token a step, three chained, and three
  // chained with the block's KV in q4_0 (-ctkd / -ctvd): drafts differ,
  // verified output does not.
  struct Run {
    int depth;
    QType kv;
  };
  int64_t f16_kv_bytes = 0;
  for (const Run run :
       {Run{0, QType::F16}, Run{1, QType::F16}, Run{3, QType::F16}, Run{3, QType::Q4_0}}) {
    const int depth = run.depth;
    const bool spec = depth > 0;
    engine::EngineConfig c = mtp_engine(depth);
    c.spec.draft_k_type = c.spec.draft_v_type = run.kv;
    auto e = engine::Engine::create(c);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    const auto evs = run_three(**e, ref, [](engine::Request& q, int) {
      q.max_tokens = 40;
      q.sampling.temperature = 0;
    });
    ASSERT_EQ(evs.size(), 3u);
    for (const engine::Event& ev : evs) {
      ASSERT_EQ(ev.finish, engine::Finish::kLength) << ev.error.message();
      std::vector<int32_t> ids;
      for (const auto& t : ev.tokens) ids.push_back(t.id);
      ASSERT_EQ(ids.size(), 40u);
      outs.push_back(ids);
    }
    const engine::EngineStats st = (*e)->stats();
    if (spec) {
      EXPECT_GT(st.spec_steps, 0u);
      EXPECT_GT(st.spec_draft_tokens, 0u);
      std::printf("[ measured ] mtp depth %d, %s KV: drafts %llu, accepted %llu, KV %lld bytes\n",
                  depth, std::string(qtype_name(run.kv)).c_str(),
                  static_cast<unsigned long long>(st.spec_draft_tokens),
                  static_cast<unsigned long long>(st.spec_accepted_tokens),
                  static_cast<long long>(st.draft_kv_bytes));
      EXPECT_EQ(st.draft_kv_pages_used, 0) << "the MTP block's pages went back";
      EXPECT_GT(st.draft_kv_bytes, 0);
      // One token a step, or chained up to three (--draft-max 8 allows it).
      if (depth == 1) EXPECT_EQ(st.spec_draft_tokens, st.spec_steps);
      if (depth == 3) EXPECT_GT(st.spec_draft_tokens, 2 * st.spec_steps);
      if (run.kv == QType::F16) f16_kv_bytes = st.draft_kv_bytes;
      if (run.kv == QType::Q4_0) EXPECT_LT(st.draft_kv_bytes, f16_kv_bytes / 3);
    } else {
      EXPECT_EQ(st.spec_steps, 0u);
    }
  }
  ASSERT_EQ(outs.size(), 12u);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(outs[r], outs[r + 3]) << "request " << r;
    EXPECT_EQ(outs[r], outs[r + 6]) << "request " << r << ", chained drafts";
    EXPECT_EQ(outs[r], outs[r + 9]) << "request " << r << ", chained drafts, q4_0 KV";
  }
}

// At a temperature, three requests drafting three chained tokens a step:
// the block's draws and the verify rows drawn over the pool (each
// sequence's own sampler) give the tokens and acceptance counts that
// drawing them one sequence after another gives. Batch invariant, so the
// block and the target compute the same rows whichever requests share a
// step.
TEST(MtpProposer, PooledDrawsAreWhatSerialDrawsAtATemperature) {
  SUSTAIN_REQUIRE_REF();
  const RefData ref = read_ref("tiny-qwen35-f32.p2_medium.kvf16.mtp");
  std::vector<std::vector<int32_t>> outs[2];
  std::vector<int64_t> accepted[2];
  for (int pooled = 0; pooled < 2; ++pooled) {
    engine::EngineConfig c = mtp_engine(3);
    c.pool_sampling = pooled == 1;
    c.batch_invariant = true;
    auto e = engine::Engine::create(c);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    const auto evs = run_three(**e, ref, [](engine::Request& q, int r) {
      q.max_tokens = 30;
      q.sampling.temperature = 0.9f;
      q.sampling.top_k = 0;
      q.sampling.min_p = 0.0f;
      q.sampling.seed = 40 + static_cast<uint64_t>(r);
    });
    ASSERT_EQ(evs.size(), 3u);
    for (const engine::Event& ev : evs) {
      ASSERT_EQ(ev.finish, engine::Finish::kLength) << ev.error.message();
      std::vector<int32_t> ids;
      for (const auto& t : ev.tokens) ids.push_back(t.id);
      outs[pooled].push_back(ids);
      accepted[pooled].push_back(ev.usage.spec_accepted);
    }
    const engine::EngineStats st = (*e)->stats();
    EXPECT_GT(st.spec_draft_tokens, 2 * st.spec_steps);
    if (pooled) {
      EXPECT_GT(st.pool_sampled_tokens, st.generated_tokens / 2);
    } else {
      EXPECT_EQ(st.pool_sampled_tokens, 0u);
    }
  }
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(outs[0][r], outs[1][r]) << "request " << r;
    EXPECT_EQ(accepted[0][r], accepted[1][r]) << "request " << r;
  }
}

// The block itself: fed image keys with rows equal to the lookups they
// replace, its logits are those of the text, bit for bit; fed other rows,
// they differ (the rows are what it reads).
TEST(MtpProposer, AnImageRowReplacesTheTokenLookup) {
  SUSTAIN_REQUIRE_REF();
  Main m = open_main(ref_path("models/tiny-qwen35-f32.gguf"));
  ASSERT_TRUE(m.model && m.cache);
  const RefData ref = read_ref("tiny-qwen35-f32.p2_medium.kvf16.mtp");
  const std::vector<int32_t> tokens = ref.tokens;
  const int64_t n = static_cast<int64_t>(tokens.size()), d = m.model->config().n_embd;
  const int64_t n_vocab = m.model->config().n_vocab;
  const std::vector<float> h = main_hidden(m, tokens);
  const int64_t b = 2, e = 9;
  auto last_logits = [&](const std::vector<int32_t>& ids, const std::vector<const float*>& rows) {
    auto p = spec::MtpProposer::create(*m.model, spec::MtpOptions{32, 256, 64, 0.0f}, *m.pool);
    EXPECT_TRUE(p.has_value()) << p.status().message();
    if (!p) return std::vector<float>();
    spec::Observed o{3, ids, 0, n - 1, h.data(), rows};
    (*p)->observe(std::span<const spec::Observed>(&o, 1));
    int64_t pos = -1;
    const float* l = (*p)->next_logits(3, &pos);
    EXPECT_EQ(pos, n - 1);
    return l ? std::vector<float>(l, l + n_vocab) : std::vector<float>();
  };
  const std::vector<float> text = last_logits(tokens, {});
  ASSERT_EQ(static_cast<int64_t>(text.size()), n_vocab);
  std::vector<float> emb(static_cast<size_t>((e - b) * d)), other(emb.size());
  std::vector<int32_t> ids = tokens;
  std::vector<const float*> rows(size_t(e), nullptr), other_rows(size_t(e), nullptr);
  for (int64_t p = b; p < e; ++p) {
    kernels::get_row(m.model->weights().token_embd, tokens[size_t(p)], emb.data() + (p - b) * d);
    kernels::get_row(m.model->weights().token_embd, tokens[size_t(p)] + 1,
                     other.data() + (p - b) * d);
    ids[size_t(p)] = static_cast<int32_t>(-1 - p);
    rows[size_t(p)] = emb.data() + (p - b) * d;
    other_rows[size_t(p)] = other.data() + (p - b) * d;
  }
  EXPECT_EQ(last_logits(ids, rows), text);
  const std::vector<float> moved = last_logits(ids, other_rows);
  ASSERT_EQ(moved.size(), text.size());
  double diff = 0;
  for (size_t i = 0; i < text.size(); ++i)
    diff = std::max(diff, double(std::abs(moved[i] - text[i])));
  EXPECT_GT(diff, 1e-4) << "other rows, other logits";
}

// Images and MTP together (llama.cpp's multimodal path does not combine
// with its MTP): an image position enters the MTP block as its image row,
// as it entered the target. An "image" whose rows are the token embeddings
// of the text it replaces must then give the text prompt's output and the
// very same drafts: same count drafted, same count accepted. (Before image
// rows reached the block, requests with images drafted nothing.)
TEST(MtpProposer, ImagePositionsEnterTheBlockAsTheirRows) {
  SUSTAIN_REQUIRE_REF();
  const std::string path = ref_path("models/tiny-qwen35-f32.gguf");
  const RefData ref = read_ref("tiny-qwen35-f32.p2_medium.kvf16.mtp");
  auto md = Model::load(path);
  ASSERT_TRUE(md.has_value()) << md.status().message();
  const int64_t d = (*md)->config().n_embd;
  ASSERT_FALSE((*md)->weights().layers.back().nextn_embed.data)
      << "the block must share token_embd for the rows to be its own lookups";
  const int64_t b = 3, e = 15;  // the image's positions
  ASSERT_GT(static_cast<int64_t>(ref.tokens.size()) - 5, e);

  struct Run {
    std::vector<std::vector<int32_t>> outs;
    engine::EngineStats st;
  };
  auto run = [&](bool image) {
    Run out;
    engine::EngineConfig c;
    c.model_path = path;
    c.n_threads = 2;
    c.n_ctx = 512;
    c.n_parallel = 2;
    c.spec.types = {"mtp"};
    c.spec.gate = false;  // the same drafts for text and image: fixed k
    auto eng = engine::Engine::create(c);
    EXPECT_TRUE(eng.has_value()) << eng.status().message();
    if (!eng) return out;
    std::vector<engine::Stream> streams;
    for (int r = 0; r < 2; ++r) {
      engine::Request q;
      q.prompt.assign(ref.tokens.begin(), ref.tokens.end() - r * 5);
      if (image) {
        auto m = std::make_shared<engine::MediaPrompt>();
        m->ids = q.prompt;
        m->n_embd = d;
        m->images.push_back({b, e, 0});
        m->embd.resize(static_cast<size_t>((e - b) * d));
        for (int64_t p = b; p < e; ++p) {
          kernels::get_row((*md)->weights().token_embd, q.prompt[size_t(p)],
                           m->embd.data() + (p - b) * d);
          m->ids[size_t(p)] = static_cast<int32_t>(-1 - p);
        }
        q.prompt = m->ids;
        q.media = m;
      }
      q.max_tokens = 32;
      q.ignore_eos = true;
      q.sampling.temperature = 0;
      auto s = (*eng)->submit(q);
      EXPECT_TRUE(s.has_value()) << s.status().message();
      if (s) streams.push_back(std::move(*s));
    }
    for (auto& s : streams) {
      engine::Event ev = s.wait();
      EXPECT_EQ(ev.finish, engine::Finish::kLength) << ev.error.message();
      std::vector<int32_t> ids;
      for (const auto& t : ev.tokens) ids.push_back(t.id);
      out.outs.push_back(ids);
    }
    out.st = (*eng)->stats();
    return out;
  };
  const Run text = run(false), img = run(true);
  ASSERT_EQ(img.outs.size(), 2u);
  EXPECT_EQ(text.outs, img.outs);
  EXPECT_GT(img.st.spec_draft_tokens, 0u) << "requests with images draft";
  EXPECT_EQ(img.st.spec_draft_tokens, text.st.spec_draft_tokens);
  EXPECT_EQ(img.st.spec_accepted_tokens, text.st.spec_accepted_tokens);
  EXPECT_EQ(img.st.draft_kv_pages_used, 0);
  std::printf(
      "[ measured ] mtp over an image prompt: %llu drafted, %llu accepted (text: %llu, %llu)\n",
      static_cast<unsigned long long>(img.st.spec_draft_tokens),
      static_cast<unsigned long long>(img.st.spec_accepted_tokens),
      static_cast<unsigned long long>(text.st.spec_draft_tokens),
      static_cast<unsigned long long>(text.st.spec_accepted_tokens));
}

// A projector whose image tokens attend both ways (Gemma 3) cannot run on a
// recurrent model: refused at submit, naming why.
TEST(MtpProposer, NonCausalImagesOnARecurrentModelAreRefused) {
  SUSTAIN_REQUIRE_REF();
  engine::EngineConfig c;
  c.model_path = ref_path("models/tiny-qwen35-f32.gguf");
  c.n_threads = 1;
  c.n_ctx = 128;
  auto eng = engine::Engine::create(c);
  ASSERT_TRUE(eng.has_value()) << eng.status().message();
  auto m = std::make_shared<engine::MediaPrompt>();
  m->ids = {1, -2, -3, 4};
  m->n_embd = 64;
  m->images.push_back({1, 3, 0});
  m->embd.assign(2 * 64, 0.1f);
  m->non_causal = true;
  engine::Request q;
  q.prompt = m->ids;
  q.media = m;
  auto s = (*eng)->submit(q);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), Code::kUnsupported);
  EXPECT_NE(s.status().message().find("recurrent"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace sustain::test

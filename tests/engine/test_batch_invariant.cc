// Batch invariance (base/batch_invariant.h, --batch-invariant) on
// smollm2-135m's shape in Q4_K_M, random weights: decode 8 tokens one at a
// time after N, then the same 8 as one batch (a verify step), and compare
// the logits. In the default mode they differ (the packed multi-row
// kernels and the attention's per-block key split round differently, and a
// random-weight model amplifies it); with the mode on they are equal bit
// for bit, before and past the attention's split threshold. Through the
// engine, an oracle:1 speculation (every draft the recorded greedy token)
// then keeps its path: every draft accepted, on a prompt past the split
// threshold and a prefix-cache hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/batch_invariant.h"
#include "base/thread_pool.h"
#include "engine/api.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "synth_file.h"
#include "test_util.h"

namespace sustain {
namespace {

const std::string& model_path() {
  return test::synth_file("smollm2-135m", tools::FileType::kQ4_K_M, "invariant_smollm2_q4km.gguf");
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((seed >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

// Largest |difference| over the K rows' logits between K one-row decode
// steps and one K-row step of the same tokens after n random ones.
float verify_vs_decode(const Model& m, int64_t n, int k, int threads) {
  auto made = kv::KvCache::create(m.kv_geometry(QType::F16, QType::F16, 32, 1), n + 64);
  EXPECT_TRUE(made.has_value());
  if (!made) return -1;
  kv::KvCache cache = std::move(*made);
  ThreadPool pool(threads);
  Workspace ws = m.make_workspace(256, pool.size());  // sized for the mode now in force
  const int64_t V = m.config().n_vocab;
  const std::vector<int32_t> toks = random_tokens(n + k, V, 7);
  kv::PageTable t;
  std::vector<float> one(static_cast<size_t>(k) * V), batch(static_cast<size_t>(k) * V);
  // Reserved a chunk at a time, as the engine does (a sliding-window
  // model's window pool holds a bounded step).
  for (int64_t p0 = 0; p0 < n; p0 += 256) {
    EXPECT_TRUE(cache.reserve(t, std::min<int64_t>(256, n - p0)).is_ok());
    Batch b;
    b.seqs = {&t};
    for (int64_t i = p0; i < std::min(n, p0 + 256); ++i)
      b.tokens.push_back({toks[size_t(i)], 0, i, false});
    EXPECT_TRUE(m.forward(b, cache, ws, pool, batch.data()).is_ok());
  }
  // A hybrid's recurrent state cannot be truncated: kept aside and put back.
  std::vector<float> state;
  if (cache.has_state()) {
    const float* sd = cache.states().slot_data(t.state);
    state.assign(sd, sd + cache.states().slot_floats());
  }
  EXPECT_TRUE(cache.reserve(t, k).is_ok());
  for (int j = 0; j < k; ++j) {
    Batch b;
    b.seqs = {&t};
    b.tokens.push_back({toks[size_t(n + j)], 0, n + j, true});
    EXPECT_TRUE(m.forward(b, cache, ws, pool, one.data() + size_t(j) * V).is_ok());
  }
  cache.truncate(t, n);
  if (cache.has_state()) {
    std::copy(state.begin(), state.end(), cache.states().slot_data(t.state));
    cache.states().set_pos(t.state, n);
  }
  EXPECT_TRUE(cache.reserve(t, k).is_ok());
  Batch b;
  b.seqs = {&t};
  for (int j = 0; j < k; ++j) b.tokens.push_back({toks[size_t(n + j)], 0, n + j, true});
  EXPECT_TRUE(m.forward(b, cache, ws, pool, batch.data()).is_ok());
  cache.release(t);
  float worst = 0;
  for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::abs(one[i] - batch[i]));
  return worst;
}

TEST(BatchInvariant, AVerifyStepEqualsDecodeStepsBitForBit) {
  auto md = Model::load(model_path());
  ASSERT_TRUE(md.has_value()) << md.status().message();
  set_batch_invariant(false);
  const float dflt = verify_vs_decode(**md, 600, 8, 2);
  set_batch_invariant(true);
  // Short (no key split) and past kSplitMinKeys (split over the threads).
  const float short_on = verify_vs_decode(**md, 32, 8, 2);
  const float long_on = verify_vs_decode(**md, 600, 8, 2);
  const float one_thread = verify_vs_decode(**md, 600, 8, 1);
  set_batch_invariant(false);
  std::printf(
      "[ measured ] max |logit diff|, 8-row verify vs decode at 600: default %.5f, "
      "batch-invariant %.5f (32: %.5f, 1 thread: %.5f)\n",
      static_cast<double>(dflt), static_cast<double>(long_on), static_cast<double>(short_on),
      static_cast<double>(one_thread));
  EXPECT_GT(dflt, 0.0f) << "the default mode differs: what the mode is for";
  EXPECT_EQ(short_on, 0.0f);
  EXPECT_EQ(long_on, 0.0f);
  EXPECT_EQ(one_thread, 0.0f);
}

// The logits of a 600-token prefill's last row and of 8 decode steps after
// it, on `threads` threads.
std::vector<float> decode_logits(const Model& m, int threads) {
  auto made = kv::KvCache::create(m.kv_geometry(QType::F16, QType::F16, 32, 1), 700);
  EXPECT_TRUE(made.has_value());
  if (!made) return {};
  kv::KvCache cache = std::move(*made);
  ThreadPool pool(threads);
  Workspace ws = m.make_workspace(256, pool.size());
  const int64_t V = m.config().n_vocab, n = 600;
  const std::vector<int32_t> toks = random_tokens(n + 8, V, 5);
  kv::PageTable t;
  std::vector<float> out(static_cast<size_t>(9) * V);
  for (int64_t p0 = 0; p0 < n; p0 += 256) {
    const int64_t end = std::min(n, p0 + 256);
    EXPECT_TRUE(cache.reserve(t, end - p0).is_ok());
    Batch b;
    b.seqs = {&t};
    for (int64_t i = p0; i < end; ++i) b.tokens.push_back({toks[size_t(i)], 0, i, i + 1 == n});
    EXPECT_TRUE(m.forward(b, cache, ws, pool, out.data()).is_ok());
  }
  for (int j = 0; j < 8; ++j) {
    EXPECT_TRUE(cache.reserve(t, 1).is_ok());
    Batch b;
    b.seqs = {&t};
    b.tokens.push_back({toks[size_t(n + j)], 0, n + j, true});
    EXPECT_TRUE(m.forward(b, cache, ws, pool, out.data() + size_t(j + 1) * V).is_ok());
  }
  cache.release(t);
  return out;
}

// The mode's output does not depend on the thread count: a long context's
// keys are cut into chunks by the query's own length, not into as many as
// the threads ask for (they were, and `-t 1` and `-t 2` printed other
// tokens on a random-weight model). smollm2's shape past eight pages, and
// the reference models of every layer kind (hybrid, MoE, sliding window,
// K-quants) where ../shared is present; 1, 2 and 3 threads.
TEST(BatchInvariant, TheThreadCountDoesNotChangeTheLogits) {
  std::vector<std::string> paths = {model_path()};
  if (!test::ref_dir().empty())
    for (const char* name :
         {"tiny-qwen35-Q8_0", "tiny-qwen3moe-Q8_0", "tiny-gemma3-f32", "tiny-llama-Q4_K_M"})
      paths.push_back(test::ref_path(std::string("models/") + name + ".gguf"));
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    auto md = Model::load(path);
    ASSERT_TRUE(md.has_value()) << md.status().message();
    set_batch_invariant(true);
    const std::vector<float> one = decode_logits(**md, 1), two = decode_logits(**md, 2),
                             three = decode_logits(**md, 3);
    set_batch_invariant(false);
    const std::vector<float> dflt_one = decode_logits(**md, 1), dflt_two = decode_logits(**md, 2);
    ASSERT_EQ(one.size(), two.size());
    ASSERT_EQ(one.size(), three.size());
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(one.data(), three.data(), one.size() * sizeof(float)));
    if (path == model_path()) {
      // The default mode splits by the thread count: what the test would
      // miss if the mode were not in force.
      EXPECT_NE(0, std::memcmp(dflt_one.data(), dflt_two.data(), one.size() * sizeof(float)));
    }
  }
}

// The other layer kinds: a hybrid's DeltaNet layers (chunked over several
// tokens by default, token by token in the mode) and a mixture of experts —
// the reference models, f32 and Q8_0 — a sliding-window gemma3 past its
// window, and a K-quant llama.
TEST(BatchInvariant, HybridAndMoeModelsToo) {
  SUSTAIN_REQUIRE_REF();
  for (const char* name :
       {"tiny-qwen35-f32", "tiny-qwen35-Q8_0", "tiny-qwen3moe-f32", "tiny-qwen3moe-Q8_0",
        "tiny-gemma3-f32", "tiny-gemma3-Q8_0", "tiny-llama-Q4_K_M"}) {
    SCOPED_TRACE(name);
    auto md = Model::load(test::ref_path(std::string("models/") + name + ".gguf"));
    ASSERT_TRUE(md.has_value()) << md.status().message();
    set_batch_invariant(false);
    const float dflt = verify_vs_decode(**md, 600, 8, 2);
    set_batch_invariant(true);
    const float on = verify_vs_decode(**md, 600, 8, 2);
    set_batch_invariant(false);
    std::printf(
        "[ measured ] %s: max |logit diff| 8-row verify vs decode at 600: default %.6f, "
        "batch-invariant %.6f\n",
        name, static_cast<double>(dflt), static_cast<double>(on));
    EXPECT_EQ(on, 0.0f);
  }
}

// Largest |difference| over `rows_a` rows of sequence A (after `na`
// tokens) between a step of A alone and a step where `rows_b` rows of
// sequence B (after `nb`) come first. Not for hybrids (A's recurrent state
// would need putting back between the two).
float alone_vs_shared(const Model& m, int64_t na, int64_t nb, int rows_a, int rows_b, int threads) {
  auto made = kv::KvCache::create(m.kv_geometry(QType::F16, QType::F16, 32, 2), na + nb + 128);
  EXPECT_TRUE(made.has_value());
  if (!made) return -1;
  kv::KvCache cache = std::move(*made);
  ThreadPool pool(threads);
  Workspace ws = m.make_workspace(256, pool.size());
  const int64_t V = m.config().n_vocab;
  const std::vector<int32_t> ta = random_tokens(na + rows_a, V, 11),
                             tb = random_tokens(nb + rows_b, V, 13);
  kv::PageTable a, b;
  std::vector<float> scratch(static_cast<size_t>(256) * V);
  auto prefill = [&](kv::PageTable& t, const std::vector<int32_t>& toks, int64_t n) {
    EXPECT_TRUE(cache.reserve(t, n).is_ok());
    Batch bt;
    bt.seqs = {&t};
    for (int64_t i = 0; i < n; ++i) bt.tokens.push_back({toks[size_t(i)], 0, i, false});
    EXPECT_TRUE(m.forward(bt, cache, ws, pool, scratch.data()).is_ok());
  };
  prefill(a, ta, na);
  prefill(b, tb, nb);
  std::vector<float> alone(static_cast<size_t>(rows_a) * V),
      shared(static_cast<size_t>(rows_a + rows_b) * V);
  EXPECT_TRUE(cache.reserve(a, rows_a).is_ok());
  {
    Batch bt;
    bt.seqs = {&a};
    for (int j = 0; j < rows_a; ++j) bt.tokens.push_back({ta[size_t(na + j)], 0, na + j, true});
    EXPECT_TRUE(m.forward(bt, cache, ws, pool, alone.data()).is_ok());
  }
  cache.truncate(a, na);
  EXPECT_TRUE(cache.reserve(a, rows_a).is_ok());
  EXPECT_TRUE(cache.reserve(b, rows_b).is_ok());
  {
    Batch bt;
    bt.seqs = {&b, &a};  // B's rows first: A's rows sit at other indices
    for (int j = 0; j < rows_b; ++j) bt.tokens.push_back({tb[size_t(nb + j)], 0, nb + j, true});
    for (int j = 0; j < rows_a; ++j) bt.tokens.push_back({ta[size_t(na + j)], 1, na + j, true});
    EXPECT_TRUE(m.forward(bt, cache, ws, pool, shared.data()).is_ok());
  }
  cache.release(a);
  cache.release(b);
  float worst = 0;
  for (size_t i = 0; i < alone.size(); ++i)
    worst = std::max(worst, std::abs(alone[i] - shared[size_t(rows_b) * V + i]));
  return worst;
}

// Through the engine a sequence's rows share steps with whatever else runs
// then, at whatever indices. The gated unit ran over all of a step's rows
// at once with a scalar tail, so where n_ff is not a multiple of the vector
// (the 260K reference models: 172) the last elements of the last rows were
// rounded differently, and a seeded request's logprobs changed in the last
// digit with the timing of its neighbours. The reference f32 llama-likes
// (and a Q4_K_M and a gemma3, whose geglu is the same loop); alone and
// beside 1 to 13 rows of another sequence; one thread and two.
TEST(BatchInvariant, ASequencesRowsDoNotDependOnItsNeighbours) {
  SUSTAIN_REQUIRE_REF();
  for (const char* name :
       {"aidreams260K-f32", "stories260K-f32", "tiny-llama-Q4_K_M", "tiny-gemma3-f32"}) {
    SCOPED_TRACE(name);
    auto md = Model::load(test::ref_path(std::string("models/") + name + ".gguf"));
    ASSERT_TRUE(md.has_value()) << md.status().message();
    set_batch_invariant(true);
    for (int threads : {1, 2})
      for (int ra : {1, 5})
        for (int rb : {1, 2, 7, 13}) {
          const float d = alone_vs_shared(**md, 40, 70, ra, rb, threads);
          EXPECT_EQ(d, 0.0f) << ra << " rows beside " << rb << ", " << threads << " threads";
        }
    set_batch_invariant(false);
  }
}

TEST(BatchInvariant, TheOracleKeepsItsPathThroughTheEngine) {
  engine::EngineConfig c;
  c.model_path = model_path();
  c.n_threads = 2;
  c.n_ctx = 1024;
  c.n_parallel = 1;
  c.batch_invariant = true;
  c.spec.types = {"oracle:1"};
  c.spec.draft_max = 4;
  c.spec.gate = false;
  auto e = engine::Engine::create(c);
  ASSERT_TRUE(e.has_value()) << e.status().message();
  engine::Request r;
  r.prompt = random_tokens(600, 49152, 11);
  r.max_tokens = 48;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  std::vector<int32_t> ids[2];
  for (auto& out : ids) {
    auto s = (*e)->submit(r);
    ASSERT_TRUE(s.has_value()) << s.status().message();
    engine::Event ev = s->wait();
    ASSERT_EQ(ev.finish, engine::Finish::kLength) << ev.error.message();
    for (const auto& t : ev.tokens) out.push_back(t.id);
  }
  const engine::EngineStats st = (*e)->stats();
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(st.prefix_cache_hits, 1u);
  EXPECT_GT(st.spec_draft_tokens, 30u) << "the second request is drafted its whole path";
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
  std::printf("[ measured ] oracle:1 under --batch-invariant: %llu drafted, %llu accepted\n",
              static_cast<unsigned long long>(st.spec_draft_tokens),
              static_cast<unsigned long long>(st.spec_accepted_tokens));
  e->reset();
  set_batch_invariant(false);
}

}  // namespace
}  // namespace sustain

// qwen35 (Qwen 3.5 dense hybrid: Gated DeltaNet + gated full attention)
// against llama.cpp's logits and greedy tokens, and against itself: the
// chunked delta rule of prefill against one token per call (the recurrence),
// several sequences in one batch against each alone, and the recurrent
// state's bookkeeping refusing what it cannot do.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <random>

#include "model/model.h"
#include "model/ref_compare.h"
#include "test_util.h"

namespace sustain::test {
namespace {

struct Engine {
  std::unique_ptr<Model> model;
  std::optional<kv::KvCache> cache;
  std::unique_ptr<ThreadPool> pool;
  Workspace ws;
};

Engine open_engine(const std::string& path, int64_t ctx, int64_t max_batch, int threads,
                   int state_slots = 1) {
  Engine e;
  auto m = Model::load(path);
  EXPECT_TRUE(m.has_value()) << m.status().message();
  if (!m) return e;
  e.model = std::move(m).value();
  auto c = kv::KvCache::create(e.model->kv_geometry(QType::F16, QType::F16, 32, state_slots), ctx);
  EXPECT_TRUE(c.has_value()) << c.status().message();
  if (c) e.cache.emplace(std::move(c).value());
  e.pool = std::make_unique<ThreadPool>(threads);
  e.ws = e.model->make_workspace(max_batch, threads);
  return e;
}

std::string model_path(const std::string& stem) { return ref_path("models/" + stem + ".gguf"); }

// Every position's logits of `tokens` in one fresh sequence, `chunk` per call.
// every: logits at positions that are multiples of it, and the last.
std::vector<std::vector<float>> run_sequence(Engine& e, const std::vector<int32_t>& tokens,
                                             int64_t chunk, int64_t every = 1) {
  const int64_t V = e.model->config().n_vocab;
  kv::PageTable t;
  std::vector<std::vector<float>> out;
  for (size_t b0 = 0; b0 < tokens.size(); b0 += static_cast<size_t>(chunk)) {
    const size_t b1 = std::min(tokens.size(), b0 + static_cast<size_t>(chunk));
    const int64_t start = t.n_tokens;
    Status st = e.cache->reserve(t, static_cast<int64_t>(b1 - b0));
    EXPECT_TRUE(st.is_ok()) << st.message();
    Batch b;
    b.seqs.push_back(&t);
    for (size_t i = b0; i < b1; ++i)
      b.tokens.push_back({tokens[i], 0, start + static_cast<int64_t>(i - b0),
                          i % static_cast<size_t>(every) == 0 || i + 1 == tokens.size()});
    std::vector<float> logits(static_cast<size_t>(b.n_logits() * V));
    st = e.model->forward(b, *e.cache, e.ws, *e.pool, logits.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
    for (int64_t i = 0; i < b.n_logits(); ++i)
      out.emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
  }
  e.cache->release(t);
  return out;
}

TEST(Qwen35, ConfigAndGeometry) {
  SUSTAIN_REQUIRE_REF();
  auto m = Model::load(model_path("tiny-qwen35-f32"));
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const ArchConfig& c = (*m)->config();
  EXPECT_EQ(c.arch, Arch::kQwen35);
  EXPECT_EQ(c.n_layer, 5u);
  EXPECT_EQ(c.n_nextn, 1u);
  EXPECT_EQ(c.n_main_layer(), 4u);
  EXPECT_TRUE(c.is_recurrent(0) && c.is_recurrent(1) && c.is_recurrent(2));
  EXPECT_FALSE(c.is_recurrent(3));
  EXPECT_FALSE(c.is_recurrent(4));  // the MTP block
  EXPECT_EQ(c.n_kv_layer(), 1u);
  EXPECT_EQ(c.kv_layer(3), 0);
  EXPECT_EQ(c.kv_layer(0), -1);
  // 3 layers × (3 conv rows × 256 channels + 4 heads × 32 × 32) × 4 bytes.
  EXPECT_EQ(c.recurrent_state_bytes(), 3u * (3 * 256 + 4 * 32 * 32) * 4);
  const kv::KvGeometry g = (*m)->kv_geometry(QType::F16, QType::F16, 32, 3);
  EXPECT_EQ(g.n_layer, 1);
  EXPECT_EQ(g.state.slot_bytes(), c.recurrent_state_bytes());
  auto cache = kv::KvCache::create(g, 256);
  ASSERT_TRUE(cache.has_value());
  EXPECT_EQ(cache->states().bytes_allocated(), 3 * c.recurrent_state_bytes());
  EXPECT_EQ(*kv_bytes_per_token(c, QType::F16, QType::F16), 1u * 2 * (64 + 64) * 2);
}

// The README's bounds: ≤ 0.02 of the spread for F32 weights. Q8_0: llama.cpp
// rounds every activation to Q8_0 before a Q8_0 matmul and so does sustain,
// so the quantized row (0.15) applies; an implementation that did not would
// land at 0.15-0.19 (README, numpy column).
const RefCase kQwen35Cases[] = {
    {"tiny-qwen35-f32", "p1_short", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-f32", "p2_medium", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-f32", "p2_medium", "kvf16fa", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-Q8_0", "p1_short", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-qwen35-Q8_0", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
};

class Qwen35VsLlamaCpp : public ::testing::TestWithParam<RefCase> {};

TEST_P(Qwen35VsLlamaCpp, LogitsAgree) {
  SUSTAIN_REQUIRE_REF();
  const RefCase& c = GetParam();
  const std::string stem = std::string(c.model) + "." + c.prompt + "." + c.cfg;
  const RefData ref = read_ref(stem);
  ASSERT_FALSE(HasFailure());
  Engine e = open_engine(model_path(c.model), 1024, 512, 2);
  ASSERT_TRUE(e.model && e.cache);
  const auto logits = run_sequence(e, ref.tokens, 512);
  ASSERT_EQ(logits.size(), ref.tokens.size());
  check_against_ref(c, ref, logits, "qwen35 " + stem);
}

INSTANTIATE_TEST_SUITE_P(Ref, Qwen35VsLlamaCpp, ::testing::ValuesIn(kQwen35Cases),
                         [](const auto& info) { return case_name(info.param); });

// Greedy continuation, one token per call after the prompt (decode runs the
// recurrence one step at a time). p1_short is left out: its greedy path has
// a top-2 gap of 1.8e-4 at step 13 (README, near-ties).
TEST(Qwen35, GreedyMatchesLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  for (const char* prompt : {"p2_medium"}) {
    SCOPED_TRACE(prompt);
    const RefData ref = read_ref(std::string("tiny-qwen35-f32.") + prompt + ".kvf16");
    const auto want = ref.meta.at("greedy").at("ids").get<std::vector<int32_t>>();
    Engine e = open_engine(model_path("tiny-qwen35-f32"), 512, 512, 2);
    ASSERT_TRUE(e.model && e.cache);
    kv::PageTable t;
    const int64_t V = e.model->config().n_vocab;
    std::vector<float> logits(static_cast<size_t>(V));
    std::vector<int32_t> feed = ref.tokens, got;
    for (size_t step = 0; step < want.size(); ++step) {
      const int64_t start = t.n_tokens;
      ASSERT_TRUE(e.cache->reserve(t, static_cast<int64_t>(feed.size())).is_ok());
      Batch b;
      b.seqs.push_back(&t);
      for (size_t i = 0; i < feed.size(); ++i)
        b.tokens.push_back({feed[i], 0, start + static_cast<int64_t>(i), i + 1 == feed.size()});
      ASSERT_TRUE(e.model->forward(b, *e.cache, e.ws, *e.pool, logits.data()).is_ok());
      got.push_back(argmax(logits));
      feed = {got.back()};
    }
    EXPECT_EQ(got, want);
    e.cache->release(t);
  }
}

double max_rel_diff(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double sd = stddev(b[i]);
    for (size_t j = 0; j < a[i].size(); ++j)
      worst = std::max(worst, std::fabs(double(a[i][j]) - b[i][j]) / sd);
  }
  return worst;
}

// The chunked delta rule (prefill, 64 tokens solved together) against the
// recurrence (one token per forward call) on a 4K-token prompt, and prefill
// in 512-token chunks against one call per token: float noise only.
TEST(Qwen35, ChunkedPrefillEqualsRecurrenceOn4K) {
  SUSTAIN_REQUIRE_REF();
  Engine e = open_engine(model_path("tiny-qwen35-f32"), 4096, 512, 2);
  ASSERT_TRUE(e.model && e.cache);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(e.model->config().n_vocab) - 1);
  std::vector<int32_t> prompt(4000);
  for (auto& t : prompt) t = tok(rng);
  const auto chunked = run_sequence(e, prompt, 512, 61);
  const auto stepwise = run_sequence(e, prompt, 1, 61);
  const auto odd = run_sequence(e, prompt, 333, 61);
  ASSERT_EQ(chunked.size(), size_t{(4000 - 1) / 61 + 2});  // multiples of 61, and the last
  ASSERT_EQ(stepwise.size(), chunked.size());
  const double d1 = max_rel_diff(chunked, stepwise), d2 = max_rel_diff(odd, stepwise);
  std::printf("[ measured ] 4000 tokens: 512-chunk vs 1-token max|d|/std %.2e, 333-chunk %.2e\n",
              d1, d2);
  EXPECT_LE(d1, 1e-4);
  EXPECT_LE(d2, 1e-4);
}

// Several sequences in one batch (each one run, as the scheduler builds
// batches) against each alone.
TEST(Qwen35, ManySequencesEqualEachAlone) {
  SUSTAIN_REQUIRE_REF();
  Engine e = open_engine(model_path("tiny-qwen35-Q8_0"), 2048, 256, 2, 4);
  ASSERT_TRUE(e.model && e.cache);
  const int64_t V = e.model->config().n_vocab;
  std::vector<std::vector<int32_t>> prompts = {
      {1, 17, 99, 300, 42}, {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 400}, {7}};
  std::vector<std::vector<std::vector<float>>> alone;
  for (const auto& p : prompts) alone.push_back(run_sequence(e, p, 512));
  std::vector<kv::PageTable> tables(prompts.size());
  Batch b;
  for (auto& t : tables) b.seqs.push_back(&t);
  for (size_t s = 0; s < prompts.size(); ++s) {
    ASSERT_TRUE(e.cache->reserve(tables[s], static_cast<int64_t>(prompts[s].size())).is_ok());
    for (size_t i = 0; i < prompts[s].size(); ++i)
      b.tokens.push_back({prompts[s][i], static_cast<int32_t>(s), static_cast<int64_t>(i), true});
  }
  std::vector<float> logits(static_cast<size_t>(b.n_logits() * V));
  ASSERT_TRUE(e.model->forward(b, *e.cache, e.ws, *e.pool, logits.data()).is_ok());
  for (size_t r = 0; r < b.tokens.size(); ++r) {
    const auto& tok = b.tokens[r];
    const auto& want = alone[static_cast<size_t>(tok.seq)][static_cast<size_t>(tok.pos)];
    const float tol = 0.05f * static_cast<float>(stddev(want));
    for (int64_t j = 0; j < V; ++j)
      ASSERT_NEAR(logits[r * V + j], want[static_cast<size_t>(j)], tol)
          << "seq " << tok.seq << " pos " << tok.pos;
  }
  // One decode step for every sequence together, then each alone again.
  Batch d;
  for (auto& t : tables) d.seqs.push_back(&t);
  for (size_t s = 0; s < prompts.size(); ++s) {
    ASSERT_TRUE(e.cache->reserve(tables[s], 1).is_ok());
    d.tokens.push_back({3, static_cast<int32_t>(s), static_cast<int64_t>(prompts[s].size()), true});
  }
  std::vector<float> dl(static_cast<size_t>(d.n_logits() * V));
  ASSERT_TRUE(e.model->forward(d, *e.cache, e.ws, *e.pool, dl.data()).is_ok());
  for (auto& t : tables) e.cache->release(t);
  for (size_t s = 0; s < prompts.size(); ++s) {
    auto p = prompts[s];
    p.push_back(3);
    const auto want = run_sequence(e, p, 512).back();
    const float tol = 0.05f * static_cast<float>(stddev(want));
    for (int64_t j = 0; j < V; ++j) ASSERT_NEAR(dl[s * V + j], want[static_cast<size_t>(j)], tol);
  }
}

std::vector<float> read_floats(const std::string& rel, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(ref_path(rel), std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  EXPECT_TRUE(in.good()) << rel;
  return v;
}

// The MTP / NextN block against llama.cpp's draft logits, fed as its
// draft-mtp driver feeds it: token i with h[i-1], the main model's normed
// final hidden state (zeros at 0). First with llama.cpp's own h (the block
// alone), then with ours (the main forward's `hidden` output, itself checked
// against llama.cpp's h).
const RefCase kMtpCases[] = {
    {"tiny-qwen35-f32", "p1_short", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-f32", "p2_medium", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-f32", "p2_medium", "kvf16fa", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen35-Q8_0", "p1_short", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-qwen35-Q8_0", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
};

class Qwen35MtpVsLlamaCpp : public ::testing::TestWithParam<RefCase> {};

TEST_P(Qwen35MtpVsLlamaCpp, DraftLogitsAgree) {
  SUSTAIN_REQUIRE_REF();
  const RefCase& c = GetParam();
  const std::string stem = std::string(c.model) + "." + c.prompt + "." + c.cfg + ".mtp";
  const RefData ref = read_ref(stem);
  ASSERT_FALSE(HasFailure());
  Engine e = open_engine(model_path(c.model), 1024, 512, 2);
  ASSERT_TRUE(e.model && e.cache);
  const int64_t n = static_cast<int64_t>(ref.tokens.size()), d = e.model->config().n_embd;
  const int64_t V = e.model->config().n_vocab;
  const auto h_ref = read_floats("logits/" + ref.meta.at("h_file").get<std::string>(),
                                 static_cast<size_t>(n * d));

  // Our h: the main forward's hidden output at every prompt position.
  kv::PageTable t;
  ASSERT_TRUE(e.cache->reserve(t, n).is_ok());
  Batch b;
  b.seqs = {&t};
  for (int64_t i = 0; i < n; ++i) b.tokens.push_back({ref.tokens[size_t(i)], 0, i, true});
  std::vector<float> logits(static_cast<size_t>(n * V)), h(static_cast<size_t>(n * d));
  ASSERT_TRUE(e.model->forward(b, *e.cache, e.ws, *e.pool, logits.data(), h.data()).is_ok());
  double h_err = 0, h_scale = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    h_err = std::max(h_err, double(std::fabs(h[i] - h_ref[i])));
    h_scale = std::max(h_scale, double(std::fabs(h_ref[i])));
  }
  std::printf("[ measured ] %s hidden max|d| %.2e of max|h| %.2f\n", stem.c_str(), h_err, h_scale);
  EXPECT_LE(h_err, (c.max_err > kF32Err ? 0.1 : 0.01) * h_scale);

  for (const bool ours : {false, true}) {
    SCOPED_TRACE(ours ? "our h" : "llama.cpp's h");
    auto mc = kv::KvCache::create(e.model->mtp_kv_geometry(), 1024);
    ASSERT_TRUE(mc.has_value()) << mc.status().message();
    kv::PageTable mt;
    ASSERT_TRUE(mc->reserve(mt, n).is_ok());
    const std::vector<float>& src = ours ? h : h_ref;
    std::vector<float> prev(static_cast<size_t>(n * d), 0.0f);  // row i = h[i - 1]
    std::copy(src.begin(), src.end() - d, prev.begin() + d);
    Batch mb;
    mb.seqs = {&mt};
    for (int64_t i = 0; i < n; ++i) mb.tokens.push_back({ref.tokens[size_t(i)], 0, i, true});
    std::vector<float> ml(static_cast<size_t>(n * V));
    ASSERT_TRUE(e.model->forward_mtp(mb, prev.data(), *mc, e.ws, *e.pool, ml.data()).is_ok());
    std::vector<std::vector<float>> rows;
    for (int64_t i = 0; i < n; ++i) rows.emplace_back(ml.begin() + i * V, ml.begin() + (i + 1) * V);
    check_against_ref(c, ref, rows, std::string("qwen35 MTP ") + (ours ? "(our h) " : "") + stem);
  }
}

INSTANTIATE_TEST_SUITE_P(Ref, Qwen35MtpVsLlamaCpp, ::testing::ValuesIn(kMtpCases),
                         [](const auto& info) { return case_name(info.param); });

TEST(Qwen35, MtpNeedsAModelWithAnMtpBlock) {
  SUSTAIN_REQUIRE_REF();
  Engine e = open_engine(ref_path("models/tiny-qwen3-Q4_K_M.gguf"), 64, 8, 1);
  ASSERT_TRUE(e.model && e.cache);
  kv::PageTable t;
  ASSERT_TRUE(e.cache->reserve(t, 1).is_ok());
  Batch b;
  b.seqs = {&t};
  b.tokens = {{1, 0, 0, true}};
  std::vector<float> h(256, 0.0f), out(static_cast<size_t>(e.model->config().n_vocab));
  Status st = e.model->forward_mtp(b, h.data(), *e.cache, e.ws, *e.pool, out.data());
  EXPECT_EQ(st.code(), Code::kUnsupported);
  EXPECT_NE(st.message().find("no MTP"), std::string::npos) << st.message();
}

// What the recurrent state cannot do is refused before any layer runs.
TEST(Qwen35, StateBookkeepingRefusesBadBatches) {
  SUSTAIN_REQUIRE_REF();
  Engine e = open_engine(model_path("tiny-qwen35-f32"), 256, 64, 1, 2);
  ASSERT_TRUE(e.model && e.cache);
  const int64_t V = e.model->config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(4 * V));
  kv::PageTable a, b;
  ASSERT_TRUE(e.cache->reserve(a, 4).is_ok());
  ASSERT_TRUE(e.cache->reserve(b, 4).is_ok());
  {  // skipping positions 0..1
    Batch x;
    x.seqs = {&a};
    x.tokens = {{5, 0, 2, true}};
    Status st = e.model->forward(x, *e.cache, e.ws, *e.pool, logits.data());
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("expects 0"), std::string::npos) << st.message();
  }
  {  // two sequences interleaved
    Batch x;
    x.seqs = {&a, &b};
    x.tokens = {{5, 0, 0, true}, {6, 1, 0, true}, {7, 0, 1, true}};
    Status st = e.model->forward(x, *e.cache, e.ws, *e.pool, logits.data());
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("one run"), std::string::npos) << st.message();
  }
  {  // a third sequence finds every state slot taken
    kv::PageTable c;
    Status st = e.cache->reserve(c, 1);
    EXPECT_EQ(st.code(), Code::kOutOfMemory);
    EXPECT_NE(st.message().find("recurrent state"), std::string::npos) << st.message();
  }
  // Nothing above advanced a state: a correct batch still starts at 0.
  Batch ok;
  ok.seqs = {&a};
  ok.tokens = {{5, 0, 0, false}, {6, 0, 1, true}};
  EXPECT_TRUE(e.model->forward(ok, *e.cache, e.ws, *e.pool, logits.data()).is_ok());
  EXPECT_EQ(e.cache->states().pos(a.state), 2);
  e.cache->release(a);
  e.cache->release(b);
  EXPECT_EQ(e.cache->states().n_free(), 2);
}

// A speculative verify step's record (RecurrentRecord): the state from
// before the step, replayed over the first n recorded positions, equals the
// state a forward over just those n tokens leaves — conv rows and S
// matrices of every DeltaNet block, for every n a verify can accept.
TEST(Qwen35, ReplayFromTheRecordEqualsAForward) {
  SUSTAIN_REQUIRE_REF();
  Engine e = open_engine(model_path("tiny-qwen35-f32"), 256, 64, 2, 3);
  ASSERT_TRUE(e.model && e.cache);
  const std::vector<int32_t> prefix = {7454, 2402, 257, 640, 11};
  const std::vector<int32_t> block = {612, 373, 257, 1310, 2576, 13};
  auto feed = [&](kv::PageTable& t, const std::vector<int32_t>& ids,
                  std::vector<RecurrentRecord>* rec) {
    ASSERT_TRUE(e.cache->reserve(t, static_cast<int64_t>(ids.size())).is_ok());
    Batch b;
    b.seqs = {&t};
    for (size_t i = 0; i < ids.size(); ++i)
      b.tokens.push_back({ids[i], 0, t.n_tokens - static_cast<int64_t>(ids.size() - i), false});
    e.ws.record = rec;
    ASSERT_TRUE(e.model->forward(b, *e.cache, e.ws, *e.pool, nullptr).is_ok());
    e.ws.record = nullptr;
  };
  kv::StatePool& st = e.cache->states();
  kv::PageTable a;
  feed(a, prefix, nullptr);
  const int32_t backup = st.alloc();
  ASSERT_GE(backup, 0);
  st.copy(a.state, backup);
  std::vector<RecurrentRecord> rec(1);
  rec[0].slot = a.state;
  rec[0].pos0 = static_cast<int64_t>(prefix.size());
  e.model->size_record(rec[0], static_cast<int64_t>(block.size()));
  feed(a, block, &rec);
  const size_t n_floats = st.geometry().n_layer * st.geometry().layer_floats();
  for (const int64_t n : {1, 3, 6}) {
    SCOPED_TRACE(n);
    st.copy(backup, a.state);
    ASSERT_TRUE(e.model->replay_recurrent(rec[0], n, *e.cache, e.ws, *e.pool).is_ok());
    EXPECT_EQ(st.pos(a.state), static_cast<int64_t>(prefix.size()) + n);
    kv::PageTable c;
    feed(c, prefix, nullptr);
    feed(c, std::vector<int32_t>(block.begin(), block.begin() + n), nullptr);
    const float* got = st.conv(a.state, 0);
    const float* want = st.conv(c.state, 0);
    float diff = 0, mag = 0;
    for (size_t i = 0; i < n_floats; ++i) {
      diff = std::max(diff, std::fabs(got[i] - want[i]));
      mag = std::max(mag, std::fabs(want[i]));
    }
    EXPECT_GT(mag, 0.0f);
    EXPECT_LE(diff, 1e-5f * mag) << "largest difference " << diff << " of " << mag;
    e.cache->release(c);
  }
  // A record that does not hold the positions, or a state elsewhere, is refused.
  EXPECT_FALSE(e.model->replay_recurrent(rec[0], 7, *e.cache, e.ws, *e.pool).is_ok());
  EXPECT_FALSE(e.model->replay_recurrent(rec[0], 2, *e.cache, e.ws, *e.pool).is_ok());
  st.free(backup);
  e.cache->release(a);
}

}  // namespace
}  // namespace sustain::test

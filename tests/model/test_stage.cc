// Pipeline stages (model/stage.h) in one process: the blocks of a model run
// as two or three stages handing the residual stream on through a queue must
// give the logits of the whole forward, with each stage's KV cache holding
// only its own layers, over several forward calls and workspace chunks.
#include <gtest/gtest.h>

#include <deque>
#include <memory>

#include "model/model.h"
#include "stage_feed.h"
#include "test_util.h"

namespace sustain::test {
namespace {

struct Rank {
  std::unique_ptr<Model> model;
  std::optional<kv::KvCache> cache;
  kv::PageTable table;
  Workspace ws;
  PipelineStage stage;
};

constexpr int64_t kCtx = 64;
constexpr int64_t kChunk = 5;  // workspace rows: a 12-token call runs as 3 chunks

std::unique_ptr<Model> load(const std::string& name) {
  auto m = Model::load(ref_path("models/" + name + ".gguf"));
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? std::move(m).value() : nullptr;
}

void check_stages(const std::string& name, const std::vector<int>& bounds) {
  SCOPED_TRACE(name);
  ThreadPool pool(1);
  auto whole = load(name);
  ASSERT_TRUE(whole);
  auto wc = kv::KvCache::create(whole->kv_geometry(), kCtx);
  ASSERT_TRUE(wc.has_value());
  kv::PageTable wt;
  Workspace wws = whole->make_workspace(kChunk, 1);

  std::deque<std::vector<float>> wire;  // hand-offs in flight, in order
  std::vector<Rank> ranks(bounds.size() - 1);
  for (size_t r = 0; r < ranks.size(); ++r) {
    Rank& k = ranks[r];
    k.model = load(name);
    ASSERT_TRUE(k.model);
    k.stage.layer_begin = bounds[r];
    k.stage.layer_end = bounds[r + 1];
    const kv::KvGeometry g = k.model->stage_kv_geometry(k.stage);
    // Only its own blocks' KV layers (and DeltaNet states, for a hybrid).
    const ArchConfig& cfg = k.model->config();
    int kv_before = 0, kv_own = 0, state_own = 0;
    for (int b = 0; b < bounds.back(); ++b) {
      const bool mine = b >= bounds[r] && b < bounds[r + 1];
      kv_before += cfg.kv_layer(static_cast<uint32_t>(b)) >= 0 && b < bounds[r];
      kv_own += cfg.kv_layer(static_cast<uint32_t>(b)) >= 0 && mine;
      state_own += cfg.is_recurrent(static_cast<uint32_t>(b)) && mine;
    }
    EXPECT_EQ(g.n_layer, kv_own);
    EXPECT_EQ(g.state.n_layer, state_own);
    EXPECT_EQ(k.stage.kv_layer_begin, kv_before);
    auto c = kv::KvCache::create(g, kCtx);
    ASSERT_TRUE(c.has_value());
    k.cache.emplace(std::move(c).value());
    k.ws = k.model->make_workspace(kChunk, 1);
    k.stage.recv = [&wire](float* x, int64_t n) -> Status {
      if (wire.empty() || wire.front().size() != static_cast<size_t>(n))
        return Status(Code::kInternal, "nothing of that size on the wire");
      std::copy(wire.front().begin(), wire.front().end(), x);
      wire.pop_front();
      return Status::ok();
    };
    k.stage.send = [&wire](const float* x, int64_t n) {
      wire.emplace_back(x, x + n);
      return Status::ok();
    };
  }
  // Two calls: a 12-token prompt (3 chunks), then one decode token.
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{1, 7, 42, 3, 9, 100, 5, 2, 8, 11, 13, 17}, std::vector<int32_t>{23}}) {
    std::vector<float> want, got, want_hidden, got_hidden;
    ASSERT_TRUE(feed(*whole, *wc, wt, wws, pool, ids, &want, nullptr, &want_hidden).is_ok());
    // The last stage also gives every position's hidden state (what
    // --spec mtp drafts from over a layer split).
    for (Rank& k : ranks) {
      Status st = feed(*k.model, *k.cache, k.table, k.ws, pool, ids, &got, &k.stage,
                       &k == &ranks.back() ? &got_hidden : nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
    EXPECT_TRUE(wire.empty());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
    ASSERT_EQ(got_hidden.size(), want_hidden.size());
    for (size_t i = 0; i < want_hidden.size(); ++i)
      ASSERT_EQ(got_hidden[i], want_hidden[i]) << "hidden " << i;
  }
}

TEST(PipelineStage, StagesGiveTheWholeForward) {
  SUSTAIN_REQUIRE_REF();
  check_stages("tiny-llama-f32", {0, 2, 3});
  check_stages("tiny-llama-Q4_K_M", {0, 1, 2, 3});
  check_stages("tiny-qwen3-Q4_K_M", {0, 1, 3});
  check_stages("tiny-gemma3-f32", {0, 4, 7});
  check_stages("tiny-qwen3moe-Q8_0", {0, 2, 3});
  // qwen35: 3 DeltaNet blocks and a full-attention one (the MTP block is
  // not a stage's); each stage keeps only its own blocks' state.
  check_stages("tiny-qwen35-f32", {0, 2, 4});
  check_stages("tiny-qwen35-f32", {0, 1, 3, 4});
}

TEST(PipelineStage, RefusesWhatItCannotRun) {
  SUSTAIN_REQUIRE_REF();
  ThreadPool pool(1);
  auto m = load("tiny-llama-f32");
  ASSERT_TRUE(m);
  auto c = kv::KvCache::create(m->kv_geometry(), kCtx);
  ASSERT_TRUE(c.has_value());
  Workspace ws = m->make_workspace(kChunk, 1);
  kv::PageTable t;
  std::vector<float> logits;
  PipelineStage bad;
  bad.layer_begin = 2;
  bad.layer_end = 9;
  Status st = feed(*m, *c, t, ws, pool, {1, 2}, &logits, &bad);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  PipelineStage no_link;  // a middle stage with no hand-off
  no_link.layer_begin = 1;
  no_link.layer_end = 2;
  st = feed(*m, *c, t, ws, pool, {1, 2}, &logits, &no_link);
  EXPECT_NE(st.message().find("no hand-off"), std::string::npos) << st.message();
  // Hidden states only from the stage that ends with the last block.
  PipelineStage first;
  first.layer_end = 2;
  first.send = [](const float*, int64_t) { return Status::ok(); };
  std::vector<float> hidden;
  st = feed(*m, *c, t, ws, pool, {1, 2}, &logits, &first, &hidden);
  EXPECT_NE(st.message().find("hidden states come only from"), std::string::npos) << st.message();
  EXPECT_EQ(ws.stage, nullptr);  // the stage never outlives the call
}

}  // namespace
}  // namespace sustain::test

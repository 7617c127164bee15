// The tensor split (model/shard.h): how shares become cuts, and the shards of
// a model run in one process — one thread per rank, the all-reduce and the
// head gather done through shared memory and a barrier — giving the logits
// of the whole model, over several forward calls and workspace chunks, with
// each rank's cache holding only its own KV heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <memory>
#include <thread>

#include "gguf/gguf.h"
#include "model/model.h"
#include "stage_feed.h"
#include "test_util.h"

namespace sustain::test {
namespace {

ArchConfig dense(uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t n_ff) {
  ArchConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 4;
  c.n_embd = n_head * hd;
  c.n_head = n_head;
  c.n_head_kv = n_kv;
  c.head_dim_k = c.head_dim_v = hd;
  c.n_ff = n_ff;
  c.n_vocab = 1000;
  return c;
}

TEST(TensorShards, SharesBecomeCutsOnBlockBoundaries) {
  // Llama 3.2 1B in Q4_K (256-element blocks): 32 heads in 8 KV groups of 4
  // (256 attn_output columns a group), 8192 FFN columns.
  const ArchConfig c = dense(32, 8, 64, 8192);
  auto s = tensor_shards(c, {2.0, 1.5}, {256, 256});
  ASSERT_TRUE(s.has_value()) << s.status().message();
  ASSERT_EQ(s->size(), 2u);
  // 8 groups at 2:1.5 → round(4.57) = 5; 32 FFN blocks → round(18.3) = 18.
  EXPECT_EQ((*s)[0].head_end, 20);
  EXPECT_EQ((*s)[1].head_begin, 20);
  EXPECT_EQ((*s)[0].kv_end, 5);
  EXPECT_EQ((*s)[1].kv_begin, 5);
  EXPECT_EQ((*s)[0].ff_end, 18 * 256);
  EXPECT_EQ((*s)[1].ff_end, 8192);
  for (const TensorShard& t : *s) {
    EXPECT_EQ(t.sub_group, 4);
    EXPECT_FALSE(t.expands_kv());
    EXPECT_TRUE(t.o_by_columns);
    EXPECT_EQ(shard_config(c, t).n_head, static_cast<uint32_t>(t.n_heads()));
    EXPECT_EQ(shard_config(c, t).n_head_kv * 4, shard_config(c, t).n_head);
  }
}

TEST(TensorShards, FewKvHeadsAreSharedByCuttingTheirGroups) {
  // 8 heads, 2 KV heads, 3 ranks: groups of 4 cannot go round, halves can.
  const ArchConfig c = dense(8, 2, 32, 768);
  auto s = tensor_shards(c, {1.0, 1.0, 1.0}, {1, 1});
  ASSERT_TRUE(s.has_value()) << s.status().message();
  EXPECT_EQ((*s)[0].sub_group, 2);
  EXPECT_EQ((*s)[1].head_begin, 2);
  EXPECT_EQ((*s)[1].head_end, 6);  // half of group 0 and half of group 1
  EXPECT_EQ((*s)[1].kv_begin, 0);
  EXPECT_EQ((*s)[1].kv_end, 2);
  EXPECT_FALSE((*s)[1].expands_kv());
  auto u = tensor_shards(c, {2.0, 1.5, 1.0}, {1, 1});
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ((*u)[0].head_end, 4);  // all of group 0, cached as two halves
  EXPECT_EQ((*u)[0].n_kv_cached(), 2);
  EXPECT_TRUE((*u)[0].expands_kv());
  // 32-element f32 heads in 256-column blocks: no cut between heads falls on
  // a block boundary, so attn_output stays whole.
  auto q = tensor_shards(c, {1.0, 1.0}, {256, 256});
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE((*q)[0].o_by_columns);
}

TEST(TensorShards, RefusesWhatCannotBeCut) {
  const ArchConfig c = dense(8, 2, 32, 768);
  auto heads = tensor_shards(c, {100.0, 1.0}, {1, 1});
  ASSERT_FALSE(heads.has_value());
  EXPECT_NE(heads.status().message().find("rank 1 without a query head"), std::string::npos)
      << heads.status().message();
  auto ffn = tensor_shards(c, {1, 1, 1, 1}, {1, 256});
  ASSERT_FALSE(ffn.has_value());
  EXPECT_NE(ffn.status().message().find("without a block of the FFN's 768 columns"),
            std::string::npos)
      << ffn.status().message();
  EXPECT_FALSE(tensor_shards(c, {1.0, -1.0}, {1, 1}).has_value());
}

// A mixture of experts is cut by whole experts, in proportion to the shares.
TEST(TensorShards, MixtureOfExpertsByWholeExperts) {
  ArchConfig moe = dense(8, 2, 32, 768);
  moe.n_expert = 8;
  moe.n_expert_used = 2;
  auto s = tensor_shards(moe, {2.0, 1.5, 1.0}, {1, 1});
  ASSERT_TRUE(s.has_value()) << s.status().message();
  // round(8 · 2/4.5) = 4, round(8 · 3.5/4.5) = 6.
  EXPECT_EQ((*s)[0].expert_begin, 0);
  EXPECT_EQ((*s)[0].expert_end, 4);
  EXPECT_EQ((*s)[1].expert_end, 6);
  EXPECT_EQ((*s)[2].expert_end, 8);
  EXPECT_NE(describe((*s)[1]).find("experts 4-5"), std::string::npos) << describe((*s)[1]);
  auto few = tensor_shards(moe, {8, 1}, {1, 1});  // round(8 · 8/9) = 7: still one each
  ASSERT_TRUE(few.has_value());
  ArchConfig wide = moe;  // heads enough for 9 ranks, experts not
  wide.n_head = wide.n_head_kv = 32;
  auto none = tensor_shards(wide, std::vector<double>(9, 1.0), {1, 1});
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.status().message().find("without an expert of the model's 8"), std::string::npos)
      << none.status().message();
}

// A hybrid's DeltaNet blocks are cut by key heads in runs that fill whole
// blocks of ssm_out's format.
TEST(TensorShards, DeltaNetByKeyHeads) {
  ArchConfig h = dense(8, 2, 32, 768);
  h.arch = Arch::kQwen35;
  h.full_attention_interval = 4;
  h.ssm_n_k_heads = 4;
  h.ssm_n_v_heads = 8;
  h.ssm_head_dim = 32;
  h.ssm_inner = 8 * 32;
  h.ssm_conv_kernel = 4;
  ASSERT_TRUE(h.is_hybrid());
  ShardGranules g;
  auto s = tensor_shards(h, {1, 1}, g);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  EXPECT_EQ((*s)[0].ssm_k_begin, 0);
  EXPECT_EQ((*s)[0].ssm_k_end, 2);
  EXPECT_EQ((*s)[1].ssm_k_end, 4);
  const ArchConfig r1 = shard_config(h, (*s)[1]);
  EXPECT_EQ(r1.ssm_n_k_heads, 2u);
  EXPECT_EQ(r1.ssm_n_v_heads, 4u);  // value heads 2, 3, 6, 7
  EXPECT_EQ(r1.ssm_inner, 4u * 32);
  // ssm_out in 64-column blocks: runs of 2 key heads of 32 columns, so 3
  // ranks leave one without a run.
  g.ssm_out_block = 64;
  auto three = tensor_shards(h, {1, 1, 1}, g);
  ASSERT_FALSE(three.has_value());
  EXPECT_NE(three.status().message().find("without a DeltaNet key head of the model's 4 (cut in "
                                          "runs of 2"),
            std::string::npos)
      << three.status().message();
  // 256-column blocks cannot be met by 4 key heads of 32 columns at all.
  g.ssm_out_block = 256;
  EXPECT_FALSE(tensor_shards(h, {1, 1}, g).has_value());
  h.ssm_n_v_heads = 6;  // not a multiple of the key heads
  EXPECT_FALSE(tensor_shards(h, {1, 1}, ShardGranules{}).has_value());
}

// Ranks in threads: all_reduce and gather_heads through shared slots.
class Group {
 public:
  explicit Group(int n) : n_(n), slots_(static_cast<size_t>(n)), sync_(n) {}

  Status all_reduce(int r, float* x, int64_t k) {
    slots_[static_cast<size_t>(r)].assign(x, x + k);
    sync_.arrive_and_wait();
    // Rank order on every rank, as the sums must agree.
    for (int64_t i = 0; i < k; ++i) {
      float s = 0.0f;
      for (int j = 0; j < n_; ++j) s += slots_[static_cast<size_t>(j)][static_cast<size_t>(i)];
      x[i] = s;
    }
    sync_.arrive_and_wait();
    return Status::ok();
  }

  Status gather(int r, const float* own, float* all, int64_t tokens, int64_t width) {
    slots_[static_cast<size_t>(r)].assign(own, own + tokens * width);
    sync_.arrive_and_wait();
    int64_t total = 0;
    for (const auto& s : slots_) total += static_cast<int64_t>(s.size()) / tokens;
    int64_t col = 0;
    for (const auto& s : slots_) {
      const int64_t w = static_cast<int64_t>(s.size()) / tokens;
      for (int64_t t = 0; t < tokens; ++t) std::copy_n(s.data() + t * w, w, all + t * total + col);
      col += w;
    }
    sync_.arrive_and_wait();
    return Status::ok();
  }

 private:
  int n_;
  std::vector<std::vector<float>> slots_;
  std::barrier<> sync_;
};

constexpr int64_t kCtx = 64;
constexpr int64_t kChunk = 5;  // workspace rows: a 12-token call runs as 3 chunks

// Largest |a - b| over max(1, |a|).
float worst(const std::vector<float>& a, const std::vector<float>& b) {
  float w = 0.0f;
  for (size_t i = 0; i < a.size(); ++i)
    w = std::max(w, std::fabs(a[i] - b[i]) / std::max(1.0f, std::fabs(a[i])));
  return w;
}

void check_shards(const std::string& name, const std::vector<double>& shares, float bound,
                  bool split_head = true) {
  SCOPED_TRACE(fmt::format("{} over {} ranks, head {}", name, shares.size(),
                           split_head ? "split" : "on rank 0"));
  const std::string path = ref_path("models/" + name + ".gguf");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.has_value()) << whole.status().message();
  const kv::KvGeometry wg = (*whole)->kv_geometry(QType::F32, QType::F32);
  auto wc = kv::KvCache::create(wg, kCtx);
  ASSERT_TRUE(wc.has_value());
  kv::PageTable wt;
  ThreadPool wpool(1);
  Workspace wws = (*whole)->make_workspace(kChunk, 1);

  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.has_value());
  auto granules = shard_granules((*whole)->config(), *file);
  ASSERT_TRUE(granules.has_value());
  auto shards = tensor_shards((*whole)->config(), shares, *granules, split_head);
  ASSERT_TRUE(shards.has_value()) << shards.status().message();
  const int R = static_cast<int>(shares.size());
  Group group(R);
  struct Rank {
    std::unique_ptr<Model> model;
    std::optional<kv::KvCache> cache;
    kv::PageTable table;
    Workspace ws;
    PipelineStage stage;
    std::unique_ptr<ThreadPool> pool;
    std::vector<float> logits, hidden;
    Status st;
  };
  std::vector<Rank> ranks(static_cast<size_t>(R));
  int kv_heads = 0;
  for (int r = 0; r < R; ++r) {
    Rank& k = ranks[static_cast<size_t>(r)];
    const TensorShard& sh = (*shards)[static_cast<size_t>(r)];
    auto m = Model::load(path, &sh);
    ASSERT_TRUE(m.has_value()) << m.status().message();
    k.model = std::move(m).value();
    kv_heads += sh.n_kv_cached();
    const kv::KvGeometry g = k.model->kv_geometry(QType::F32, QType::F32);
    EXPECT_EQ(g.n_head_kv, sh.n_kv_cached());  // only its own KV heads
    auto c = kv::KvCache::create(g, kCtx);
    ASSERT_TRUE(c.has_value());
    k.cache.emplace(std::move(c).value());
    k.ws = k.model->make_workspace(kChunk, 1);
    k.pool = std::make_unique<ThreadPool>(1);
    k.stage.layer_end = static_cast<int>(k.model->config().n_main_layer());
    k.stage.head = split_head || r == 0;
    if (split_head) {
      const int64_t cols = sh.n_vocab();
      k.stage.gather_vocab = [&group, r, cols](const float* own, float* all, int64_t rows) {
        return group.gather(r, own, all, rows, cols);
      };
    }
    k.stage.all_reduce = [&group, r](float* x, int64_t n) { return group.all_reduce(r, x, n); };
    const int64_t width = int64_t{sh.n_heads()} * k.model->config().head_dim_v;
    k.stage.gather_heads = [&group, r, width](const float* own, float* all, int64_t tokens) {
      return group.gather(r, own, all, tokens, width);
    };
  }
  EXPECT_GE(kv_heads, static_cast<int>((*whole)->config().n_head_kv));
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{1, 7, 42, 3, 9, 100, 5, 2, 8, 11, 13, 17}, std::vector<int32_t>{23},
        std::vector<int32_t>{4, 6}}) {
    std::vector<float> want, want_hidden;
    ASSERT_TRUE(feed(**whole, *wc, wt, wws, wpool, ids, &want, nullptr, &want_hidden).is_ok());
    std::vector<std::thread> threads;
    // Rank 0 also gives every position's hidden state (what --spec mtp
    // drafts from over a tensor split): its residual stream is whole.
    for (Rank& k : ranks)
      threads.emplace_back([&k, &ids, first = &k == &ranks[0]] {
        k.st = feed(*k.model, *k.cache, k.table, k.ws, *k.pool, ids, &k.logits, &k.stage,
                    first ? &k.hidden : nullptr);
      });
    for (auto& t : threads) t.join();
    for (const Rank& k : ranks) ASSERT_TRUE(k.st.is_ok()) << k.st.message();
    ASSERT_EQ(ranks[0].logits.size(), want.size());
    EXPECT_LE(worst(want, ranks[0].logits), bound);
    ASSERT_EQ(ranks[0].hidden.size(), want_hidden.size());
    EXPECT_LE(worst(want_hidden, ranks[0].hidden), bound);
  }
  // A rank that does not compute the logits has no hidden states to give
  // (refused before any collective, so no rank is left waiting).
  if (!split_head && !ranks[1].cache->has_state()) {  // (a hybrid's one state slot is taken)
    Rank& k = ranks[1];
    std::vector<float> logits, hidden;
    kv::PageTable t;
    const Status st = feed(*k.model, *k.cache, t, k.ws, *k.pool, {5}, &logits, &k.stage, &hidden);
    EXPECT_NE(st.message().find("without the head"), std::string::npos) << st.message();
    k.cache->release(t);
  }
}

TEST(TensorShards, ShardsGiveTheWholeForward) {
  SUSTAIN_REQUIRE_REF();
  // f32 weights and K/V: reassociation noise only.
  check_shards("tiny-llama-f32", {1.0, 1.0}, 1e-5f);
  check_shards("tiny-llama-f32", {1.0, 1.0}, 1e-5f, /*split_head=*/false);
  check_shards("tiny-llama-f32", {2.0, 1.5, 1.0}, 1e-5f);  // a KV group cut in two
  check_shards("tiny-gemma3-f32", {1.0, 2.0}, 1e-5f);      // post-norms, sliding window
  check_shards("tiny-gemma3-f32", {1.0, 1.0, 1.0}, 1e-5f);
  check_shards("tiny-qwen35-f32", {1.0, 1.0}, 1e-5f,
               /*split_head=*/false);  // DeltaNet by key heads
  // Quantized: attn_output whole (one 256-column block a row), biases
  // (qwen2), Q/K norms (qwen3). An activation whose int8 code the noise
  // moves by one step may move a logit by ~1e-2 on these random models.
  check_shards("tiny-llama-Q4_K_M", {2.0, 1.5, 1.0}, 3e-2f);
  check_shards("tiny-qwen2-Q4_K_M", {1.0, 1.0}, 3e-2f);
  check_shards("tiny-qwen3-Q4_K_M", {1.0, 1.0, 1.0}, 3e-2f);
}

TEST(TensorShards, AShardRunsOnlyBesideTheOtherRanks) {
  SUSTAIN_REQUIRE_REF();
  const std::string path = ref_path("models/tiny-llama-f32.gguf");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.has_value());
  auto shards = tensor_shards((*whole)->config(), {1.0, 1.0}, {1, 1});
  ASSERT_TRUE(shards.has_value());
  EXPECT_EQ((*shards)[1].vocab_begin, 256);  // half of the 512 output rows
  auto m = Model::load(path, &(*shards)[1]);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ((*m)->config().n_head, 4u);
  EXPECT_EQ((*m)->file_config().n_head, 8u);
  auto c = kv::KvCache::create((*m)->kv_geometry(), kCtx);
  ASSERT_TRUE(c.has_value());
  kv::PageTable t;
  ThreadPool pool(1);
  Workspace ws = (*m)->make_workspace(kChunk, 1);
  std::vector<float> logits;
  const Status st = feed(**m, *c, t, ws, pool, {1, 2}, &logits, nullptr);
  EXPECT_NE(st.message().find("beside the other ranks"), std::string::npos) << st.message();
  // A cut the file's formats cannot take is refused at load.
  TensorShard bad = (*shards)[1];
  bad.ff_begin = 100;
  bad.ff_end = 50;
  EXPECT_FALSE(Model::load(path, &bad).has_value());
}

}  // namespace
}  // namespace sustain::test

// The memory plan against published figures, against what the KV cache and
// the workspace really allocate, and its split / fit / speed arithmetic.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "model/weights.h"
#include "plan/parse.h"
#include "plan/plan.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/quant_mix.h"
#include "tools/synth.h"

namespace sustain::test {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

ArchConfig preset_arch(const char* name) {
  const tools::Preset* p = tools::find_preset(name);
  EXPECT_NE(p, nullptr) << name;
  return p ? p->arch : ArchConfig{};
}

// The preset's tensors in the formats the quantizer gives them for `ft`.
std::vector<plan::TensorEntry> preset_tensors(const char* name, tools::FileType ft) {
  const tools::Preset* p = tools::find_preset(name);
  std::vector<plan::TensorEntry> out;
  if (!p) return out;
  const auto table = default_weight_table(p->arch, p->llama3_rope);
  const auto types = tools::plan_tensor_types(p->arch, table, ft);
  for (size_t i = 0; i < table.size(); ++i) {
    const uint64_t n_in = static_cast<uint64_t>(table[i].shape.back());
    out.push_back({table[i].name, types[i], table[i].shape,
                   table[i].n_elements() / n_in * qtype_row_bytes(types[i], n_in)});
  }
  return out;
}

plan::PlanInput input_for(const ArchConfig& a) {
  plan::PlanInput in;
  in.arch = a;
  in.host_capacity = uint64_t{1} << 40;  // 1 TiB: room for anything
  in.headroom = 0.0;
  return in;
}

// A preset with its tensors as the quantizer writes them for `ft`.
plan::PlanInput preset_input(const char* name, tools::FileType ft) {
  plan::PlanInput in = input_for(preset_arch(name));
  in.tensors = preset_tensors(name, ft);
  const tools::Preset* p = tools::find_preset(name);
  in.rope_freqs = p && p->llama3_rope;
  return in;
}

plan::Plan must_plan(const plan::PlanInput& in) {
  auto p = plan::make_plan(in);
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p ? *p : plan::Plan{};
}

// Seed 000 §3.1: a Llama 3 8B-shaped model (32 layers, 8 KV heads of 128)
// with an f16 cache needs 2 × 32 × 8 × 128 × 2 B = 131072 B ≈ 131 KB per
// token, and 32K tokens need 32768 × 131072 B = 4294967296 B ≈ 4.29 GB.
TEST(PlanPublished, Llama3_8B_F16_32K) {
  plan::PlanInput in = input_for(preset_arch("llama-3.1-8b"));
  in.n_ctx = 32768;
  const plan::Plan p = must_plan(in);
  EXPECT_EQ(p.kv_bytes_per_token, 131072u);
  EXPECT_EQ(p.kv_bytes, 4294967296u);
  EXPECT_EQ(p.kv_tokens, 32768);
  // 128K: 17179869184 B, the seed's "approaching 17 GB".
  in.n_ctx = 131072;
  EXPECT_EQ(must_plan(in).kv_bytes, 17179869184u);
}

// vLLM's documentation: Qwen3-4B with an 11.47 GiB KV budget holds about
// 83.5K tokens in bf16, twice that in fp8. bf16: 2 × 36 layers × 8 KV heads ×
// 128 × 2 B = 147456 B per token, a page of 32 tokens 4718592 B;
// floor(11.47 × 2^30 B) = 12315818721 B holds floor(12315818721 / 4718592) =
// 2610 pages = 83520 tokens. fp8: 73728 B per token, 5220 pages = 167040.
TEST(PlanPublished, Qwen3_4B_KvBudget) {
  plan::PlanInput in = input_for(preset_arch("qwen3-4b"));
  auto budget = plan::parse_bytes("11.47GiB", "--kv-budget");
  ASSERT_TRUE(budget.has_value());
  EXPECT_EQ(*budget, 12315818721u);
  in.kv_budget_bytes = static_cast<int64_t>(*budget);
  in.k_type = in.v_type = QType::BF16;
  const plan::Plan bf = must_plan(in);
  EXPECT_EQ(bf.kv_bytes_per_token, 147456u);
  EXPECT_EQ(bf.budget_tokens, 83520);
  EXPECT_NEAR(static_cast<double>(bf.budget_tokens), 83.5e3, 100.0);
  EXPECT_LE(bf.kv_bytes, *budget);
  in.k_type = in.v_type = QType::FP8_E4M3;
  const plan::Plan f8 = must_plan(in);
  EXPECT_EQ(f8.kv_bytes_per_token, 73728u);
  EXPECT_EQ(f8.budget_tokens, 167040);
  EXPECT_EQ(f8.budget_tokens, 2 * bf.budget_tokens);
}

// The plan's KV bytes are what KvCache::create allocates for the same pool:
// n_ctx × n_parallel tokens, or floor(budget / page_bytes) pages.
TEST(PlanKv, EqualsCacheAllocation) {
  struct Case {
    int n_layer, n_head_kv, head_dim;
    QType k, v;
  };
  const Case cases[] = {{2, 2, 64, QType::F16, QType::F16},
                        {3, 1, 32, QType::Q8_0, QType::Q4_0},
                        {1, 4, 64, QType::BF16, QType::FP8_E4M3},
                        {2, 3, 128, QType::F32, QType::Q5_1}};
  for (const Case& c : cases) {
    ArchConfig a = preset_arch("tiny-llama");
    a.n_layer = c.n_layer;
    a.n_head_kv = c.n_head_kv;
    a.n_head = c.n_head_kv * 2;
    a.head_dim_k = a.head_dim_v = c.head_dim;
    a.rope_dim = c.head_dim;
    a.n_embd = a.n_head * c.head_dim;
    plan::PlanInput in = input_for(a);
    in.k_type = c.k;
    in.v_type = c.v;
    for (int64_t ctx : {1, 31, 32, 33, 100}) {
      for (int par : {1, 3}) {
        in.n_ctx = ctx;
        in.n_parallel = par;
        in.kv_budget_bytes = 0;
        const plan::Plan p = must_plan(in);
        auto cache = kv::KvCache::create(p.geometry, ctx * par);
        ASSERT_TRUE(cache.has_value()) << cache.status().message();
        EXPECT_EQ(p.kv_bytes, cache->bytes_allocated()) << c.n_layer << " " << ctx << " " << par;
        EXPECT_EQ(p.kv_pages, cache->n_pages());
        EXPECT_EQ(p.kv_bytes_per_token, p.geometry.bytes_per_token());
        // Budget mode: a budget of a few pages and a half.
        in.kv_budget_bytes = static_cast<int64_t>(p.kv_page_bytes * 5 + p.kv_page_bytes / 2);
        const plan::Plan b = must_plan(in);
        EXPECT_EQ(b.kv_pages, 5);
        auto bcache = kv::KvCache::create(b.geometry, b.budget_tokens);
        ASSERT_TRUE(bcache.has_value());
        EXPECT_EQ(b.kv_bytes, bcache->bytes_allocated());
      }
    }
  }
}

TEST(PlanWorkspace, MatchesMakeWorkspace) {
  const tools::Preset* preset = tools::find_preset("tiny-qwen3");
  ASSERT_NE(preset, nullptr);
  const std::string path = tmp_path("plan_workspace_tiny_qwen3.gguf");
  ThreadPool pool(2);
  tools::SynthOptions opt;
  opt.type = tools::FileType::kQ8_0;
  auto res = tools::synth_model(*preset, path, opt, pool);
  ASSERT_TRUE(res.has_value()) << res.status().message();
  auto model = Model::load(path);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  for (int64_t ub : {1, 7, 512}) {
    const Workspace ws = (*model)->make_workspace(ub, 2);
    const size_t floats = ws.x.size() + ws.cur.size() + ws.q.size() + ws.k.size() + ws.v.size() +
                          ws.attn_out.size() + ws.gate.size() + ws.up.size() + ws.hidden.size() +
                          ws.logits_in.size();
    EXPECT_EQ(plan::workspace_bytes((*model)->config(), ub, 0), floats * sizeof(float)) << ub;
    EXPECT_EQ(plan::workspace_bytes((*model)->config(), ub, 1000), floats * sizeof(float) + 1000);
  }
}

TEST(PlanWeights, GroupsAndStepBytes) {
  const ArchConfig a = preset_arch("smollm2-135m");  // tied embeddings
  plan::PlanInput in = input_for(a);
  in.tensors = preset_tensors("smollm2-135m", tools::FileType::kQ4_K_M);
  uint64_t transformer = 0;
  for (const auto& t : in.tensors) transformer += t.bytes;
  in.tensors.push_back({"mm.0.weight", QType::F16, {1024, 1152}, 1024 * 1152 * 2});
  in.tensors.push_back({"blk.30.nextn.eh_proj.weight", QType::Q8_0, {576, 1152}, 576 * 1224});
  in.tensors.push_back({"something.else", QType::F32, {10}, 40});
  in.sidecar.push_back({"v.blk.0.attn_q.weight", QType::F16, {1152, 1152}, 1152 * 1152 * 2});
  const plan::Plan p = must_plan(in);
  EXPECT_EQ(p.transformer_bytes, transformer);
  EXPECT_EQ(p.projector_bytes, uint64_t{1024 * 1152 * 2 + 1152 * 1152 * 2});
  EXPECT_EQ(p.projector_tensors, 2);
  EXPECT_EQ(p.mtp_bytes, uint64_t{576 * 1224});
  EXPECT_EQ(p.mtp_tensors, 1);
  EXPECT_EQ(p.other_bytes, 40u);
  EXPECT_EQ(p.weights_bytes, transformer + p.projector_bytes + p.mtp_bytes + 40);
  // Tied: the embedding is the output matrix, read whole each step; projector
  // and MTP heads are not read by a text decode step.
  EXPECT_EQ(p.step_weight_bytes, transformer);

  // Untied (llama-3.1-8b): one embedding row per step, not the table.
  plan::PlanInput in8 = preset_input("llama-3.1-8b", tools::FileType::kQ4_K_M);
  const plan::Plan p8 = must_plan(in8);
  uint64_t embd = 0;
  for (const auto& t : in8.tensors)
    if (t.name == "token_embd.weight") embd = t.bytes;
  ASSERT_GT(embd, 0u);
  EXPECT_EQ(p8.step_weight_bytes, p8.weights_bytes - embd + embd / 128256);
}

TEST(PlanWeights, Classify) {
  EXPECT_EQ(plan::classify_tensor("blk.0.attn_q.weight", true), plan::Group::kTransformer);
  EXPECT_EQ(plan::classify_tensor("mm.2.bias", false), plan::Group::kProjector);
  EXPECT_EQ(plan::classify_tensor("v.patch_embd.weight", false), plan::Group::kProjector);
  EXPECT_EQ(plan::classify_tensor("blk.46.nextn.shared_head_head.weight", false),
            plan::Group::kMtp);
  EXPECT_EQ(plan::classify_tensor("mtp.0.proj.weight", false), plan::Group::kMtp);
  EXPECT_EQ(plan::classify_tensor("blk.0.ffn_gate_exps.weight", false), plan::Group::kOther);
}

// Seed 000 §5.2's simulated table: 8B at Q4_K_M (~5 GB), f16 KV at 131 KB
// per token, decode bound by bandwidth: relative speed ~54% at 32K and ~23%
// at 128K. The model: tok/s = bandwidth / (weights read + L × KV bytes/token).
TEST(PlanSpeed, BandwidthModel) {
  plan::PlanInput in = preset_input("llama-3.1-8b", tools::FileType::kQ4_K_M);
  in.host_bandwidth_gbps = 100.0;
  in.n_ctx = 131072;
  in.n_parallel = 2;
  const plan::Plan p = must_plan(in);
  ASSERT_FALSE(p.speed.empty());
  auto at = [&](int64_t ctx) -> const plan::SpeedPoint* {
    for (const auto& s : p.speed)
      if (s.ctx == ctx) return &s;
    return nullptr;
  };
  for (int64_t ctx : {0, 4096, 16384, 32768, 131072}) {
    const plan::SpeedPoint* s = at(ctx);
    ASSERT_NE(s, nullptr) << ctx;
    const double bytes = static_cast<double>(p.step_weight_bytes) + ctx * 131072.0;
    EXPECT_EQ(s->bytes_per_step, p.step_weight_bytes + uint64_t(ctx) * 131072u);
    EXPECT_NEAR(s->tok_s, 100e9 / bytes, 1e-9 * s->tok_s);
    // Two sequences: each step reads the weights once and both KV caches.
    EXPECT_NEAR(s->aggregate_tok_s, 2 * 100e9 / (p.step_weight_bytes + 2.0 * ctx * 131072.0),
                1e-9 * s->aggregate_tok_s);
  }
  EXPECT_NEAR(at(32768)->tok_s / at(0)->tok_s, 0.54, 0.03);
  EXPECT_NEAR(at(131072)->tok_s / at(0)->tok_s, 0.23, 0.03);
  // The curve runs up to the largest context that fits.
  EXPECT_EQ(p.speed.back().ctx, std::max<int64_t>(p.max_ctx, in.n_ctx));
  // No bandwidth, no curve.
  in.host_bandwidth_gbps = 0;
  EXPECT_TRUE(must_plan(in).speed.empty());
}

TEST(PlanFit, LargestContextAndConcurrency) {
  plan::PlanInput in = preset_input("qwen3-4b", tools::FileType::kQ4_K_M);
  in.host = plan::default_host_costs(in.arch, in.tensors);
  in.host_capacity = 16 * kGiB;
  in.headroom = 0.15;
  in.n_ctx = 32768;
  const plan::Plan p = must_plan(in);
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_EQ(p.devices[0].usable, static_cast<uint64_t>(std::floor(16.0 * kGiB * 0.85)));
  EXPECT_EQ(p.total_bytes,
            p.weights_bytes + p.kv_bytes + p.scratch_bytes + p.logits_bytes + p.host_bytes);
  EXPECT_TRUE(p.fits) << p.verdict;
  EXPECT_EQ(p.verdict.rfind("fits: 32768 tokens × 1 sequence", 0), 0u) << p.verdict;
  // max_ctx is the edge: it fits, one token more does not.
  ASSERT_GT(p.max_ctx, in.n_ctx);
  in.n_ctx = p.max_ctx;
  EXPECT_TRUE(must_plan(in).fits);
  in.n_ctx = p.max_ctx + 1;
  const plan::Plan over = must_plan(in);
  EXPECT_FALSE(over.fits);
  EXPECT_EQ(over.verdict.rfind("does not fit", 0), 0u) << over.verdict;
  EXPECT_EQ(over.max_ctx, p.max_ctx);
  // max_parallel likewise.
  in.n_ctx = 32768;
  in.n_parallel = static_cast<int>(p.max_parallel);
  EXPECT_TRUE(must_plan(in).fits);
  in.n_parallel = static_cast<int>(p.max_parallel) + 1;
  EXPECT_FALSE(must_plan(in).fits);
  // Weights larger than the device: nothing fits.
  in.n_parallel = 1;
  in.host_capacity = kGiB;
  const plan::Plan none = must_plan(in);
  EXPECT_FALSE(none.fits);
  EXPECT_EQ(none.max_ctx, 0);
  EXPECT_EQ(none.max_parallel, 0);
  EXPECT_NE(none.verdict.find("no context fits"), std::string::npos) << none.verdict;
}

// A budget pool smaller than one context is refused by the engine: the plan says so.
TEST(PlanFit, BudgetBelowOneContext) {
  plan::PlanInput in = input_for(preset_arch("qwen3-4b"));
  in.kv_budget_bytes = int64_t{1} << 30;  // 1 GiB / 4718592 B per page = 227 pages = 7264 tokens
  in.n_ctx = 7264;
  plan::Plan p = must_plan(in);
  EXPECT_EQ(p.budget_tokens, 7264);
  EXPECT_TRUE(p.fits) << p.verdict;
  in.n_ctx = 7265;
  p = must_plan(in);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.verdict.find("holds 7264 tokens, fewer than one context of 7265"), std::string::npos)
      << p.verdict;
}

TEST(PlanSplit, LayerSplit) {
  plan::PlanInput in = preset_input("llama-3.1-8b", tools::FileType::kQ4_K_M);
  in.host = plan::default_host_costs(in.arch, in.tensors);
  in.devices = {{"dev0", 16 * kGiB, 2.0, 0.0}, {"dev1", 12 * kGiB, 1.5, 0.0}};
  in.split = plan::Split::kLayer;
  in.n_ctx = 32768;
  in.headroom = 0.15;
  const plan::Plan p = must_plan(in);
  ASSERT_EQ(p.devices.size(), 2u);
  // 32 layers in the ratio 2 : 1.5 → round(32 × 2 / 3.5) = 18 and 14.
  EXPECT_EQ(p.devices[0].layer_begin, 0);
  EXPECT_EQ(p.devices[0].layer_end, 18);
  EXPECT_EQ(p.devices[1].layer_begin, 18);
  EXPECT_EQ(p.devices[1].layer_end, 32);
  // KV by layers: 18 × 8 heads × (256 + 256) B per token on dev0.
  EXPECT_EQ(p.devices[0].kv_bytes_per_token, 18u * 8 * 512);
  EXPECT_EQ(p.devices[1].kv_bytes_per_token, 14u * 8 * 512);
  EXPECT_EQ(p.devices[0].kv + p.devices[1].kv, p.kv_bytes);
  EXPECT_EQ(p.devices[0].weights + p.devices[1].weights, p.weights_bytes);
  // Each device holds its layers' matrices; embeddings first, output head last.
  uint64_t first = 0, last = 0;
  for (const auto& t : in.tensors) {
    const bool blk = t.name.rfind("blk.", 0) == 0;
    const int layer = blk ? std::stoi(t.name.substr(4)) : -1;
    if (t.name == "output.weight" || t.name == "output_norm.weight" || layer >= 18)
      last += t.bytes;
    else
      first += t.bytes;
  }
  EXPECT_EQ(p.devices[0].weights, first);
  EXPECT_EQ(p.devices[1].weights, last);
  EXPECT_EQ(p.devices[0].logits, 0u);
  EXPECT_EQ(p.devices[1].logits, p.logits_bytes);
  EXPECT_EQ(p.total_bytes, p.devices[0].total + p.devices[1].total + p.host_bytes);
  EXPECT_EQ(p.devices[0].usable, static_cast<uint64_t>(std::floor(16.0 * kGiB * 0.85)));
  for (const auto& d : p.devices) EXPECT_EQ(d.fits, d.total <= d.usable);
}

// Seed 002's tensor split of a Llama 3 8B-shaped model at 2 : 1.5, cut as a
// run cuts it (model/shard.h): whole KV groups, FFN blocks, output rows.
TEST(PlanSplit, TensorSplitCutsAsARunDoes) {
  plan::PlanInput in = preset_input("llama-3.1-8b", tools::FileType::kQ8_0);
  in.devices = {{"dev0", 16 * kGiB, 2.0, 0.0}, {"dev1", 12 * kGiB, 1.5, 0.0}};
  in.split = plan::Split::kTensor;
  in.n_ctx = 8192;
  const plan::Plan p = must_plan(in);
  ASSERT_EQ(p.devices.size(), 2u);
  // 8 KV groups in the ratio 2 : 1.5 → round(8 × 2 / 3.5) = 5 and 3, every layer.
  EXPECT_EQ(p.devices[0].kv_heads, 5);
  EXPECT_EQ(p.devices[1].kv_heads, 3);
  EXPECT_EQ(p.devices[0].kv_bytes_per_token, 32u * 5 * 512);
  EXPECT_EQ(p.devices[0].kv + p.devices[1].kv, p.kv_bytes);
  EXPECT_NE(p.devices[1].cut.find("query heads 20-31"), std::string::npos) << p.devices[1].cut;
  // dev1's share of one block: 12 of 32 query heads' rows of Q, 3 of 8 KV
  // heads' rows of K and V, those heads' columns of attn_output, and the
  // FFN's 14336 columns (448 Q8_0 blocks of 32) after round(448 × 2 / 3.5)
  // = 256 blocks.
  auto shards = tensor_shards(in.arch, {2.0, 1.5}, {32, 32});
  ASSERT_TRUE(shards.has_value());
  const TensorShard& s1 = (*shards)[1];
  EXPECT_EQ(s1.head_begin, 20);
  EXPECT_EQ(s1.ff_begin, 256 * 32);
  // Every rank sends its share of 2 ring all-reduces a block of 4096
  // floats and of the logits: 32 × 2 × 16 KiB × 2 · 1/2 + 501 KiB / 2.
  EXPECT_EQ(p.comm_bytes_per_token,
            static_cast<uint64_t>(32 * 2 * 4096 * 4 * 2 * 0.5 + 128256 * 4 * 0.5));
}

// --spec mtp: the block drafts on the first device, which then reads its
// tensors and the whole output head — beside its own rows of a tensor
// split's head, or as a copy of the layer split's last device's.
TEST(PlanSplit, TheMtpBlockRunsOnTheFirstDevice) {
  for (const plan::Split split : {plan::Split::kLayer, plan::Split::kTensor}) {
    SCOPED_TRACE(split == plan::Split::kLayer ? "layer" : "tensor");
    plan::PlanInput in = preset_input("qwen3.5-27b", tools::FileType::kQ4_K_M);
    in.devices = {{"dev0", 16 * kGiB, 2.0, 0.0}, {"dev1", 12 * kGiB, 1.5, 0.0}};
    in.split = split;
    in.n_ctx = 8192;
    const plan::Plan off = must_plan(in);
    in.spec.on = true;
    in.spec.mtp = true;
    const plan::Plan on = must_plan(in);
    uint64_t head = 0, norm = 0;
    for (const auto& t : in.tensors) {
      if (t.name == "output.weight") head = t.bytes;
      if (t.name == "output_norm.weight") norm = t.bytes;
    }
    ASSERT_GT(head, 0u);  // qwen3.5-27b's head is untied
    ASSERT_GT(on.mtp_bytes, 0u);
    if (split == plan::Split::kLayer) {
      // The block moves from the last device to the first; the head and its
      // norm are read on both.
      EXPECT_EQ(on.devices[0].weights, off.devices[0].weights + on.mtp_bytes + head + norm);
      EXPECT_EQ(on.devices[1].weights, off.devices[1].weights - on.mtp_bytes);
    } else {
      // The block was on the first device already; it now also reads the
      // other device's rows of the head.
      EXPECT_GT(on.devices[0].weights, off.devices[0].weights);
      EXPECT_LT(on.devices[0].weights - off.devices[0].weights, head);
      EXPECT_EQ(on.devices[1].weights, off.devices[1].weights);
    }
  }
}

// What `plan --split tensor` puts on each device is what Model::load holds
// for that rank: its rows and columns of every matrix, its output rows, the
// norms; the untied embedding table on the first device.
TEST(PlanSplit, TensorSplitEqualsWhatEachRankLoads) {
  SUSTAIN_REQUIRE_REF();
  for (const auto& [name, shares] :
       {std::pair<std::string, std::vector<double>>{"tiny-llama-f32", {2.0, 1.5}},
        {"tiny-llama-Q4_K_M", {1.0, 1.0, 1.0}},
        {"tiny-qwen2-Q4_K_M", {1.0, 1.0}},
        {"tiny-qwen3-Q4_K_M", {1.0, 2.0}},
        {"tiny-qwen35-f32", {2.0, 1.5}},
        {"tiny-qwen35-Q8_0", {1.0, 1.0}},
        {"tiny-qwen3moe-Q8_0", {2.0, 1.5}}}) {
    SCOPED_TRACE(name);
    const std::string path = ref_path("models/" + name + ".gguf");
    auto whole = Model::load(path);
    ASSERT_TRUE(whole.has_value()) << whole.status().message();
    plan::PlanInput in = input_for((*whole)->config());
    for (const gguf::TensorInfo& t : (*whole)->file().tensors())
      in.tensors.push_back({t.name, t.type, t.shape, t.n_bytes});
    for (size_t d = 0; d < shares.size(); ++d)
      in.devices.push_back({fmt::format("dev{}", d), kGiB, shares[d], 0.0});
    in.split = plan::Split::kTensor;
    in.n_ctx = 64;
    const plan::Plan p = must_plan(in);
    auto granules = shard_granules((*whole)->config(), (*whole)->file());
    ASSERT_TRUE(granules.has_value());
    auto shards = tensor_shards((*whole)->config(), shares, *granules);
    ASSERT_TRUE(shards.has_value());
    for (size_t d = 0; d < shares.size(); ++d) {
      auto m = Model::load(path, &(*shards)[d]);
      ASSERT_TRUE(m.has_value()) << m.status().message();
      const ModelWeights& w = (*m)->weights();
      uint64_t held = 0;
      auto mat = [&](const kernels::WeightView& v) {
        held += static_cast<uint64_t>(v.n_out) * v.row_bytes;
      };
      auto vec = [&](const std::vector<float>& v) { held += v.size() * sizeof(float); };
      const ArchConfig& fc = (*m)->file_config();
      for (uint32_t il = 0; il < fc.n_layer; ++il) {
        // An MTP block (qwen35) stays whole as mapped, which the plan puts
        // on the first device (rank 0 runs it under --spec mtp).
        if (fc.is_nextn(il) && d > 0) continue;
        const LayerWeights& L = w.layers[il];
        for (const auto* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.ssm_qkv,
                              &L.ssm_gate, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out, &L.nextn_eh_proj,
                              &L.nextn_embed, &L.nextn_head, &L.router})
          if (v->data) mat(*v);
        for (const auto* exps : {&L.gate_exps, &L.up_exps, &L.down_exps})
          for (const kernels::WeightView& v : *exps)
            if (v.data) mat(v);  // the rank's experts
        for (const auto* v :
             {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm, &L.attn_post_norm, &L.ffn_post_norm,
              &L.bq, &L.bk, &L.bv, &L.ssm_dt_bias, &L.ssm_a, &L.ssm_conv, &L.ssm_norm,
              &L.nextn_enorm, &L.nextn_hnorm, &L.nextn_head_norm})
          vec(*v);
      }
      mat(w.output);
      vec(w.output_norm);
      if (d == 0 && !(*m)->config().tied_output) mat(w.token_embd);
      EXPECT_EQ(p.devices[d].weights, held) << "device " << d;
      EXPECT_EQ(p.devices[d].kv_heads, static_cast<int>((*m)->config().n_head_kv));
      // A hybrid's recurrent state per sequence: the rank's DeltaNet heads.
      if (fc.is_hybrid()) {
        const kv::KvGeometry g = (*m)->kv_geometry(QType::F16, QType::F16, 16, 1);
        EXPECT_EQ(p.devices[d].state_per_sequence, g.state.slot_bytes()) << "device " << d;
      }
    }
  }
}

TEST(PlanErrors, NameTheField) {
  plan::PlanInput in = input_for(preset_arch("tiny-llama"));  // head_dim 32
  in.k_type = QType::Q4_K;                                    // 256-element blocks
  auto p = plan::make_plan(in);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("K type Q4_K"), std::string::npos) << p.status().message();
  in = input_for(preset_arch("tiny-llama"));
  in.devices = {{"dev0", kGiB, 0.0, 0.0}};
  p = plan::make_plan(in);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("--ratio"), std::string::npos) << p.status().message();
  in = input_for(preset_arch("tiny-llama"));
  in.headroom = 1.0;
  p = plan::make_plan(in);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("--headroom"), std::string::npos);
  in = input_for(preset_arch("tiny-llama"));
  in.n_ctx = int64_t{1} << 40;
  in.n_parallel = 1 << 20;
  p = plan::make_plan(in);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.status().message().find("too large"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace sustain::test

namespace sustain::test {
namespace {

// Hybrid models (qwen35): KV for the full-attention blocks only, and the
// recurrent state of every sequence and snapshot, exactly what the engine's
// cache and prefix cache allocate for the same model; the workspace as
// make_workspace sizes it.
TEST(PlanHybrid, KvStateAndWorkspaceEqualWhatTheEngineAllocates) {
  const tools::Preset* preset = tools::find_preset("tiny-qwen35");
  ASSERT_NE(preset, nullptr);
  const std::string path = tmp_path("plan_tiny_qwen35.gguf");
  ThreadPool pool(2);
  tools::SynthOptions opt;
  opt.type = tools::FileType::kQ8_0;
  auto res = tools::synth_model(*preset, path, opt, pool);
  ASSERT_TRUE(res.has_value()) << res.status().message();
  auto model = Model::load(path);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  const ArchConfig& c = (*model)->config();
  for (int par : {1, 3}) {
    plan::PlanInput in = input_for(c);
    in.n_ctx = 100;
    in.n_parallel = par;
    in.state_snapshots = 2 * par;
    in.k_type = in.v_type = QType::Q8_0;
    const plan::Plan p = must_plan(in);
    EXPECT_EQ(p.kv_layers, 1);
    auto cache = kv::KvCache::create((*model)->kv_geometry(QType::Q8_0, QType::Q8_0, 32, par),
                                     in.n_ctx * par);
    ASSERT_TRUE(cache.has_value()) << cache.status().message();
    EXPECT_EQ(p.kv_bytes, cache->bytes_allocated());
    kv::PrefixCache prefix(*cache, in.state_snapshots);
    EXPECT_EQ(p.state_bytes,
              cache->states().bytes_allocated() + prefix.snapshot_pool().bytes_allocated());
    EXPECT_EQ(p.state_bytes_per_sequence, c.recurrent_state_bytes());
    EXPECT_EQ(p.state_slots, 3 * par);
  }
  for (int64_t ub : {1, 7, 512}) {
    const Workspace ws = (*model)->make_workspace(ub, 1);
    const size_t floats = ws.x.size() + ws.cur.size() + ws.q.size() + ws.k.size() + ws.v.size() +
                          ws.attn_out.size() + ws.gate.size() + ws.up.size() + ws.hidden.size() +
                          ws.logits_in.size() + ws.q_gate.size() + ws.attn_gate.size() +
                          ws.ssm_mixed.size() + ws.ssm_conv.size() + ws.ssm_z.size() +
                          ws.ssm_o.size() + ws.ssm_beta.size() + ws.ssm_g.size();
    EXPECT_EQ(plan::workspace_bytes(c, ub, 0), floats * sizeof(float)) << ub;
  }
}

// The dual-GPU seed (002): Qwen3.5-27B in 4-bit weights with a 4-bit KV cache
// at 256K context and a 0.9 GB vision projector, "about 25 GB", on a 16 GB
// and a 12 GB card. KV is kept by 16 of the 64 blocks; 48 DeltaNet blocks
// carry 149.6 MiB of state per sequence.
TEST(PlanHybrid, Qwen35_27B_At256KFitsTwoCards) {
  plan::PlanInput in = preset_input("qwen3.5-27b", tools::FileType::kQ4_K_M);
  in.host_capacity = 0;
  in.n_ctx = 256000;
  in.k_type = in.v_type = QType::Q4_0;
  in.state_snapshots = 1;
  in.sidecar.push_back({"mmproj", QType::F16, {}, 900'000'000});
  in.devices = {{"dev0", uint64_t{16} << 30, 16.0, 0.0}, {"dev1", uint64_t{12} << 30, 12.0, 0.0}};
  in.headroom = 0.15;
  const plan::Plan p = must_plan(in);
  EXPECT_EQ(p.kv_layers, 16);
  // q4_0: 18 bytes per 32 values; 16 layers × 4 heads × (K + V) of 256.
  EXPECT_EQ(p.kv_bytes_per_token, 16u * 4u * 2u * (256u / 32u * 18u));
  EXPECT_EQ(p.state_bytes_per_sequence, 48ull * (3 * 10240 + 48 * 128 * 128) * 4);
  EXPECT_GT(p.mtp_tensors, 0);
  const double gb = static_cast<double>(p.total_bytes) / 1e9;
  EXPECT_GT(gb, 21.0);
  EXPECT_LT(gb, 27.0);
  EXPECT_TRUE(p.fits) << p.verdict;
  uint64_t kv = 0;
  for (const auto& d : p.devices) kv += d.kv;
  EXPECT_EQ(kv, p.kv_bytes);
}

}  // namespace
}  // namespace sustain::test

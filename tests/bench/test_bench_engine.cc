// The in-process workloads on a real (synthetic, tiny) model: the context
// ladder with its timed fills, the prefill points, the concurrency ladder's
// engine target, and the conditions the report records about the model.
#include <gtest/gtest.h>

#include "bench/ablation.h"
#include "bench/report.h"
#include "bench/verify_curve.h"
#include "bench/workloads.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::bench {
namespace {

const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = test::tmp_path("bench_tiny_llama_q8.gguf");
    ThreadPool pool(2);
    tools::SynthOptions opt;
    opt.type = tools::FileType::kQ8_0;
    auto r = tools::synth_model(*tools::find_preset("tiny-llama"), p, opt, pool);
    EXPECT_TRUE(r.has_value()) << r.status().message();
    return p;
  }();
  return path;
}

std::unique_ptr<engine::Engine> make_engine(int n_parallel = 1) {
  engine::EngineConfig c;
  c.model_path = tiny_model();
  c.n_threads = 2;
  c.n_ctx = 512;
  c.n_parallel = n_parallel;
  c.kv_tokens = 2048;
  auto e = engine::Engine::create(c);
  EXPECT_TRUE(e.has_value()) << e.status().message();
  return e ? std::move(*e) : nullptr;
}

TEST(BenchEngine, RandomPromptsAreSeededPrefixesWithoutEog) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  const auto a = random_prompt(*e, 300, 7), b = random_prompt(*e, 100, 7);
  ASSERT_EQ(a.size(), 300u);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));
  EXPECT_NE(random_prompt(*e, 100, 8), b);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_FALSE(e->tokenizer().is_eog(a[i]));
    EXPECT_GE(a[i], 0);
    EXPECT_LT(a[i], static_cast<int32_t>(e->model().config().n_vocab));
    if (i > 0) EXPECT_NE(a[i], e->tokenizer().bos());
  }
}

TEST(BenchEngine, ContextLadderReusesThePreviousRung) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  LadderOptions o;
  o.ctx = {64, 128, 256};
  o.n_tokens = 5;
  o.reps = 2;
  auto r = run_context_ladder(*e, o);
  ASSERT_TRUE(r) << r.status().message();
  ASSERT_EQ(r->rungs.size(), 3u);
  const auto& g = r->rungs[1];
  EXPECT_EQ(g.ctx, 128);
  // The fill computed only the tail the previous rung did not hold (page-aligned reuse).
  EXPECT_GE(g.fill_from, 32);
  EXPECT_LE(g.fill_from, 64);
  EXPECT_EQ(g.fill_from + g.fill_new_tokens, 128);
  EXPECT_GT(g.fill_ttft_s, 0);
  ASSERT_EQ(g.rep_gaps_s.size(), 2u);
  for (const auto& gaps : g.rep_gaps_s) EXPECT_EQ(gaps.size(), 4u);  // 5 tokens, first excluded
  for (int64_t v : g.rep_visible_tokens) EXPECT_EQ(v, 5);
  for (double v : g.rep_tok_s) EXPECT_GT(v, 0);
  // KV of 128 + 5 tokens; the pool held at least the sequence's 5 pages... or
  // pages shared with the prefix cache, never fewer than the tokens need.
  const auto geo = e->model().kv_geometry();
  EXPECT_EQ(g.kv_bytes, static_cast<int64_t>(133 * geo.bytes_per_token()));
  EXPECT_GE(g.kv_pool_used_bytes, static_cast<int64_t>(3 * geo.page_bytes()));
  EXPECT_EQ(g.kv_pool_used_bytes % static_cast<int64_t>(geo.page_bytes()), 0);
  EXPECT_GT(g.peak_rss_bytes, 0);
  EXPECT_TRUE(r->notes.empty());
}

TEST(BenchEngine, LadderErrorsNameTheFlag) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  LadderOptions o;
  o.ctx = {128, 64};
  auto r = run_context_ladder(*e, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--ctx"), std::string::npos);
  o.ctx = {600};
  r = run_context_ladder(*e, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("512"), std::string::npos) << r.status().message();
  o.ctx = {64};
  o.n_tokens = 1;
  EXPECT_FALSE(run_context_ladder(*e, o));
}

TEST(BenchEngine, BudgetStopsTheLadder) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  LadderOptions o;
  o.ctx = {32, 64, 480};
  o.n_tokens = 3;
  o.reps = 1;
  o.budget_s = 1e-6;  // nothing after the first rung fits
  auto r = run_context_ladder(*e, o);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->rungs.size(), 1u);
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("skipped: 64, 480"), std::string::npos) << r->notes[0];
}

TEST(BenchEngine, PrefillPointsComputeEveryToken) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  auto p = run_prefill_points(*e, {100, 200}, 2, 99, nullptr);
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[1].ctx, 200);
  EXPECT_EQ((*p)[1].new_tokens, 200);
  EXPECT_EQ((*p)[1].from_ctx, 0);
  EXPECT_EQ((*p)[1].ttft_s.size(), 2u);
  EXPECT_FALSE(run_prefill_points(*e, {600}, 1, 1, nullptr));
}

TEST(BenchEngine, ConcurrencyLadderInProcess) {
  auto e = make_engine(4);
  ASSERT_TRUE(e);
  EngineTarget target(*e, 40, 6, 5);
  LoadOptions lo;
  lo.concurrency = {1, 4};
  lo.requests_per_client = 2;
  lo.poisson_fractions = {0.5};
  lo.poisson_requests = 3;
  auto levels = run_load(target, lo);
  ASSERT_TRUE(levels) << levels.status().message();
  ASSERT_EQ(levels->size(), 3u);
  for (const auto& l : *levels) {
    EXPECT_EQ(l.metrics.failed, 0) << l.error;
    EXPECT_EQ(l.metrics.output_tokens, 6 * l.metrics.requests);
    EXPECT_EQ(l.metrics.prompt_tokens, 40 * l.metrics.requests);
    EXPECT_EQ(l.metrics.tpot.n, l.metrics.requests);
  }
  EXPECT_EQ((*levels)[1].metrics.requests, 8);
  EXPECT_GT((*levels)[2].rate, 0);
}

// An oracle row (gate off) whose cells got few tokens out of verify steps
// lost its first pass's path there: the note names the row and those
// cells, and the remedy when the run was not batch-invariant.
TEST(BenchEngine, AnOracleThatLostItsPathIsNamed) {
  engine::EngineConfig c;
  c.spec.types = {"oracle:0.8"};
  c.spec.gate = false;
  auto cell = [](int64_t ctx, double share) {
    return nlohmann::json{{"ctx", ctx},
                          {"spec", {{"decoded_tokens", 94}, {"verify_token_share", share}}}};
  };
  const nlohmann::json kept = {cell(512, 0.97), cell(4096, 0.9)};
  const nlohmann::json lost = {cell(512, 0.97), cell(4096, 0.2)};
  EXPECT_EQ(lost_path_note("ablation row 'r'", c, kept), "");
  const std::string n = lost_path_note("ablation row 'r'", c, lost);
  EXPECT_NE(n.find("'r'"), std::string::npos) << n;
  EXPECT_NE(n.find("ctx 4096 (20 %"), std::string::npos) << n;
  EXPECT_EQ(n.find("ctx 512"), std::string::npos) << n;
  EXPECT_NE(n.find("rerun with --batch-invariant"), std::string::npos) << n;
  c.batch_invariant = true;
  EXPECT_EQ(lost_path_note("ablation row 'r'", c, lost).find("rerun"), std::string::npos);
  // Under the gate few drafts is the gate's choice; other proposers have no path.
  c.spec.gate = true;
  EXPECT_EQ(lost_path_note("ablation row 'r'", c, lost), "");
  c.spec.gate = false;
  c.spec.types = {"ngram"};
  EXPECT_EQ(lost_path_note("ablation row 'r'", c, lost), "");
}

// The verify curve's pricing: a chain of k drafts at acceptance α yields
// 1 + α + … + α^k tokens; the best k at each α is the one with the most
// tokens per unit of its step's cost, from the P50 of each k's samples.
TEST(BenchEngine, VerifyCurvePricesEachAcceptance) {
  EXPECT_DOUBLE_EQ(chain_tokens(0.5, 0), 1.0);
  EXPECT_DOUBLE_EQ(chain_tokens(0.5, 1), 1.5);
  EXPECT_DOUBLE_EQ(chain_tokens(0.5, 4), 1.9375);
  VerifyCurveOptions o;
  o.ks = {0, 1, 4};
  VerifyCurvePoint p;
  p.depth = 4096;
  p.ms = {{10, 9, 30}, {12, 11, 13}, {20, 21, 19}};  // P50 10, 12, 20 ms: ratios 1, 1.2, 2
  const nlohmann::json j = verify_curve_json({p}, o);
  const nlohmann::json& pt = j["points"][0];
  EXPECT_DOUBLE_EQ(pt["ratio"][1].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(pt["ratio"][2].get<double>(), 2.0);
  // α = 0.5: k = 1 gives 1.5 / 1.2 = 1.25, k = 4 1.9375 / 2 < 1.
  EXPECT_EQ(pt["best"][0]["alpha"], 0.5);
  EXPECT_EQ(pt["best"][0]["k"], 1);
  EXPECT_NEAR(pt["best"][0]["speedup"].get<double>(), 1.25, 1e-12);
  // α = 0.9: k = 4 gives 4.0951 / 2, more than k = 1's 1.9 / 1.2.
  EXPECT_EQ(pt["best"][4]["alpha"], 0.9);
  EXPECT_EQ(pt["best"][4]["k"], 4);
  EXPECT_NEAR(pt["best"][4]["speedup"].get<double>(), 4.0951 / 2, 1e-9);
  // The list: 0 added in front, ascending, 0..16.
  EXPECT_EQ(*parse_verify_ks("1,2,4"), (std::vector<int64_t>{0, 1, 2, 4}));
  EXPECT_EQ(*parse_verify_ks("0,16"), (std::vector<int64_t>{0, 16}));
  EXPECT_FALSE(parse_verify_ks("").has_value());
  EXPECT_FALSE(parse_verify_ks("2,2").has_value());
  EXPECT_FALSE(parse_verify_ks("-1").has_value());
}

TEST(BenchEngine, ModelConditions) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  const auto j = model_conditions(*e);
  EXPECT_EQ(j["arch"], "llama");
  EXPECT_EQ(j["n_layer"], 3);
  EXPECT_EQ(j["tensor_formats"]["attn_q"], "Q8_0×3");
  EXPECT_GT(j["parameters"].get<uint64_t>(), 0u);
  const ModelCost c = model_cost(*e);
  // tiny-llama: 3 layers of d=256, ff=768, 8 heads of 32, 2 KV heads; vocab 512.
  const int64_t layer = 256 * 256 * 2 + 256 * 64 * 2 + 3 * 256 * 768;
  EXPECT_EQ(c.matmul_params, 3 * layer + 512 * 256);
  EXPECT_EQ(c.kv_bytes_per_token, 3 * 2 * 2 * 32 * 2);  // f16 K and V
  EXPECT_GT(c.weight_bytes_per_step, c.matmul_params);  // Q8_0: 34 bytes per 32 weights
  EXPECT_LT(c.weight_bytes_per_step, c.matmul_params * 2);
  const auto kv = kv_conditions(*e);
  EXPECT_EQ(kv["k_type"], "F16");
}

}  // namespace
}  // namespace sustain::bench

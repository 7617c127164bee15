// eval::run_kl, the lockstep KL pass shared by `sustain eval kl` and
// `sustain bench --ablate`: identical configurations give KL exactly 0, a
// 4-bit KV cache gives KL > 0, a saved baseline brackets the recomputed KL,
// and bad specs are refused with errors that name the problem.
#include <map>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "eval/kl_run.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::eval {
namespace {

// A random-weight model with the shapes of the reference tiny-llama (512 tokens).
const std::string& tiny_model(const char* preset) {
  static std::map<std::string, std::string> made;
  auto it = made.find(preset);
  if (it != made.end()) return it->second;
  const std::string path = test::tmp_path(std::string("kl_run_") + preset + ".gguf");
  const tools::Preset* p = tools::find_preset(preset);
  EXPECT_NE(p, nullptr) << preset;
  ThreadPool pool(2);
  tools::SynthOptions opt;
  opt.type = tools::FileType::kF16;
  auto r = tools::synth_model(*p, path, opt, pool);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return made.emplace(preset, path).first->second;
}

RunnerOptions runner(const std::string& model, const char* k, const char* v) {
  RunnerOptions o;
  o.model = model;
  o.cache_k = k;
  o.cache_v = v;
  o.threads = 2;
  o.batch = 64;
  return o;
}

TEST(KlRun, IdenticalConfigurationsGiveZero) {
  const std::string m = tiny_model("tiny-llama");
  KlRunSpec spec;
  spec.base = runner(m, "f16", "f16");
  spec.tests = {runner(m, "f16", "f16"), runner(m, "q4_0", "q4_0")};
  spec.tokens = random_tokens(300, 512, 7);
  spec.edges = {128};
  spec.chunk = 100;  // not a multiple of the runner's batch: chunks and batches differ
  int calls = 0;
  spec.progress = [&](const KlProgress& p) {
    ++calls;
    EXPECT_EQ(p.total, 300);
    EXPECT_EQ(static_cast<int>(p.chunk_s.size()), calls);
    return true;
  };
  auto runs = run_kl(spec);
  ASSERT_TRUE(runs.has_value()) << runs.status().message();
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(runs->size(), 2u);
  const auto& same = (*runs)[0];
  ASSERT_EQ(same.buckets.size(), 3u);  // [0, 128), [128, 300), all
  EXPECT_EQ(same.buckets[0].n, 128);
  EXPECT_EQ(same.buckets[1].lo, 128);
  EXPECT_EQ(same.buckets[1].hi, 300);
  for (const auto& b : same.buckets) {
    EXPECT_EQ(b.kl.max, 0.0);
    EXPECT_EQ(b.same_top1, 1.0);
    EXPECT_EQ(b.ppl_ratio, 1.0);
  }
  EXPECT_EQ(same.test_label, "f16/f16");
  const auto& q4 = (*runs)[1];
  EXPECT_EQ(q4.test_label, "q4_0/q4_0");
  EXPECT_FALSE(q4.from_saved);
  const auto& all = q4.buckets.back();
  EXPECT_EQ(all.n, 300);
  EXPECT_GT(all.kl.mean, 0.0);
  EXPECT_LT(all.kl.mean, 1.0);  // a perturbation, not a different model
  EXPECT_GE(all.kl.p99, all.kl.median);
  EXPECT_GT(all.same_top1, 0.5);
}

TEST(KlRun, SavedBaselineBracketsTheRecomputedKl) {
  const std::string m = tiny_model("tiny-llama");
  KlRunSpec spec;
  spec.base = runner(m, "f16", "f16");
  spec.tests = {runner(m, "q4_0", "f16")};
  spec.tokens = random_tokens(200, 512, 3);
  spec.edges = {100};
  SavedBaseline top16, full;
  spec.save_to = &top16;
  spec.save_top_k = 16;
  auto recomputed = run_kl(spec);
  ASSERT_TRUE(recomputed.has_value()) << recomputed.status().message();
  spec.save_to = &full;
  spec.save_top_k = 100000;  // capped at the vocabulary: exact
  ASSERT_TRUE(run_kl(spec).has_value());
  EXPECT_EQ(top16.top_k, 16);
  EXPECT_EQ(full.top_k, 512);
  EXPECT_EQ(top16.rows.size(), 200u);
  EXPECT_EQ(top16.tokens, spec.tokens);

  spec.save_to = nullptr;
  spec.base.model = "no-such-model.gguf";  // never opened: the saved rows are the baseline
  spec.saved = &top16;
  auto bounded = run_kl(spec);
  ASSERT_TRUE(bounded.has_value()) << bounded.status().message();
  spec.saved = &full;
  auto exact = run_kl(spec);
  ASSERT_TRUE(exact.has_value()) << exact.status().message();
  const auto& r = (*recomputed)[0].buckets;
  const auto& b = (*bounded)[0].buckets;
  const auto& e = (*exact)[0].buckets;
  EXPECT_TRUE((*bounded)[0].from_saved);
  EXPECT_EQ((*bounded)[0].top_k, 16);
  EXPECT_FALSE((*exact)[0].from_saved);
  ASSERT_EQ(r.size(), b.size());
  ASSERT_EQ(r.size(), e.size());
  double gap = 0.0;
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_GT(r[i].kl.mean, 0.0) << i;
    EXPECT_LE(b[i].kl.mean, r[i].kl.mean * (1 + 1e-6) + 1e-12) << i;
    EXPECT_GE(b[i].kl_high_mean, r[i].kl.mean * (1 - 1e-6) - 1e-12) << i;
    gap += b[i].kl_high_mean - b[i].kl.mean;
    EXPECT_NEAR(e[i].kl.mean, r[i].kl.mean, 1e-6 * r[i].kl.mean + 1e-9) << i;
    EXPECT_EQ(e[i].same_top1, r[i].same_top1) << i;
    EXPECT_NEAR(e[i].ppl_base, r[i].ppl_base, 1e-6 * r[i].ppl_base) << i;
  }
  EXPECT_GT(gap, 0.0);  // top-16 of 512: a real interval
}

TEST(KlRun, BadSpecsAreNamed) {
  const std::string m = tiny_model("tiny-llama");
  KlRunSpec spec;
  spec.base = runner(m, "f16", "f16");
  spec.tests = {runner(m, "f16", "f16")};
  spec.tokens = {1};
  auto r = run_kl(spec);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("at least 2 tokens"), std::string::npos)
      << r.status().message();

  spec.tokens = random_tokens(40, 512, 1);
  spec.tests = {runner(tiny_model("tiny-qwen3"), "f16", "f16")};
  r = run_kl(spec);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("one vocabulary"), std::string::npos) << r.status().message();

  spec.tests = {runner(m, "q3_0", "f16")};
  r = run_kl(spec);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("q3_0"), std::string::npos) << r.status().message();

  spec.tests = {runner(m, "f16", "f16")};
  spec.tokens.push_back(512);  // outside the vocabulary
  r = run_kl(spec);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("baseline: token id 512"), std::string::npos)
      << r.status().message();

  spec.tokens = random_tokens(200, 512, 1);
  spec.chunk = 64;
  // A budget ends the pass: the results cover what was fed.
  spec.progress = [](const KlProgress& p) { return p.done < 128; };
  r = run_kl(spec);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ((*r)[0].buckets.back().n, 128);
  EXPECT_EQ((*r)[0].buckets.back().hi, 128);

  SavedBaseline other;
  other.tokens = random_tokens(200, 512, 2);
  spec.progress = nullptr;
  spec.saved = &other;
  r = run_kl(spec);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("saved baseline"), std::string::npos) << r.status().message();
}

TEST(KlRun, RandomTokensAreDeterministicAndInRange) {
  const auto a = random_tokens(1000, 100, 5), b = random_tokens(1000, 100, 5);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, random_tokens(1000, 100, 6));
  ASSERT_EQ(a.size(), 1000u);
  EXPECT_EQ(a[0], 1);
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_GE(a[i], 3);
    EXPECT_LT(a[i], 100);
  }
  EXPECT_TRUE(random_tokens(10, 3, 1).empty());  // no id outside 0–2 to draw
}

}  // namespace
}  // namespace sustain::eval

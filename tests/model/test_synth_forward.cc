// `sustain synth` models must behave like an initialised network: run through
// the reference forward pass, every activation stays finite and of a plausible
// size. Speed measurements on synth models are only meaningful if the numbers
// they push through the kernels are ordinary ones (no inf/NaN fast or slow paths).
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/model.h"
#include "model/ref_forward.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::test {
namespace {

struct SynthCase {
  const char* preset;
  tools::FileType type;
};

// Weights have std 1/sqrt(fan_in) and every block starts with an RMSNorm, so
// Q, K, V, gate and up are ~N(0, 1) per element and each block adds an O(1)
// update to the residual stream. Measured maxima: ~6 for the tiny presets,
// 23 (residual) for smollm2-135m's 30 layers. 100 leaves room for other
// seeds while still catching a scale that compounds per layer. The floor
// catches the opposite failure (weights or norms near zero: all collapses).
constexpr float kMaxSaneActivation = 100.0f;
constexpr float kMinLogitRange = 0.5f;

class SynthForward : public ::testing::TestWithParam<SynthCase> {};

TEST_P(SynthForward, ActivationsStayFinite) {
  const SynthCase& c = GetParam();
  const tools::Preset* preset = tools::find_preset(c.preset);
  ASSERT_NE(preset, nullptr) << c.preset;
  const std::string path = tmp_path(std::string("synth_forward_") + c.preset + ".gguf");
  ThreadPool pool(2);
  tools::SynthOptions opt;
  opt.type = c.type;
  auto res = tools::synth_model(*preset, path, opt, pool);
  ASSERT_TRUE(res.has_value()) << res.status().message();

  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto model = RefModel::load(*f);
  ASSERT_TRUE(model.has_value()) << model.status().message();

  // 64 distinct-looking ids spread over the whole vocabulary, special tokens included.
  const uint32_t n_vocab = model->config().n_vocab;
  std::vector<int32_t> tokens;
  for (uint32_t i = 0; i < 64; ++i)
    tokens.push_back(static_cast<int32_t>((uint64_t{i} * 7919 + 13) % n_vocab));

  ForwardStats st;
  const auto logits = model->forward(tokens, &st);
  ASSERT_EQ(logits.size(), tokens.size());
  std::printf(
      "[ measured ] synth %s: max|residual| %.2f  max|score| %.2f  max|ffn| %.2f  "
      "max|logit| %.2f  non-finite %llu\n",
      c.preset, st.max_abs_residual, st.max_abs_attn_score, st.max_abs_ffn, st.max_abs_logit,
      static_cast<unsigned long long>(st.n_non_finite));
  EXPECT_TRUE(st.all_finite()) << st.n_non_finite << " inf/NaN values";
  EXPECT_LT(st.max_abs(), kMaxSaneActivation);
  EXPECT_GT(st.max_abs_logit, kMinLogitRange);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Presets, SynthForward,
                         ::testing::Values(SynthCase{"tiny-llama", tools::FileType::kQ4_K_M},
                                           SynthCase{"tiny-qwen3", tools::FileType::kQ4_K_M},
                                           // The real 30-layer depth is where a scale that grows
                                           // per layer would show; Q8_0 keeps the synth step quick.
                                           SynthCase{"smollm2-135m", tools::FileType::kQ8_0}),
                         [](const auto& info) {
                           std::string s = info.param.preset;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// --layers: the first N blocks in the preset's exact shape and kinds, the
// MTP blocks kept, the cut named in the file; a forward pass through it is
// as sane as through the whole model.
struct CutCase {
  const char* preset;
  uint32_t layers;
  bool ref_forward;  // a dense model: RefModel runs it
};
class SynthCut : public ::testing::TestWithParam<CutCase> {};

TEST_P(SynthCut, KeepsTheFirstBlocksShapesAndKinds) {
  const CutCase& c = GetParam();
  const tools::Preset* preset = tools::find_preset(c.preset);
  ASSERT_NE(preset, nullptr) << c.preset;
  const ArchConfig& whole = preset->arch;
  const std::string path = tmp_path(std::string("synth_cut_") + c.preset + ".gguf");
  ThreadPool pool(2);
  tools::SynthOptions opt;
  opt.type = tools::FileType::kQ8_0;
  opt.n_layer = c.layers;
  auto res = tools::synth_model(*preset, path, opt, pool);
  ASSERT_TRUE(res.has_value()) << res.status().message();

  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto cfg = arch_config_from_gguf(*f);
  ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
  EXPECT_EQ(cfg->n_main_layer(), c.layers);
  EXPECT_EQ(cfg->n_nextn, whole.n_nextn);
  EXPECT_EQ(cfg->n_embd, whole.n_embd);
  EXPECT_EQ(cfg->n_ff, whole.n_ff);
  EXPECT_EQ(cfg->n_head_kv, whole.n_head_kv);
  EXPECT_EQ(cfg->n_expert, whole.n_expert);
  for (uint32_t i = 0; i < c.layers; ++i) {
    EXPECT_EQ(cfg->is_recurrent(i), whole.is_recurrent(i)) << "block " << i;
    EXPECT_EQ(cfg->is_sliding(i), whole.is_sliding(i)) << "block " << i;
  }
  EXPECT_EQ(f->find_tensor(fmt::format("blk.{}.attn_norm.weight", c.layers)) != nullptr,
            whole.n_nextn > 0);  // only an MTP block follows the cut
  auto desc = f->get_string("general.description");
  ASSERT_TRUE(desc.has_value());
  EXPECT_NE(desc->find(fmt::format("first {} of {} blocks", c.layers, whole.n_main_layer())),
            std::string::npos)
      << *desc;

  // The engine's loader checks every tensor against the cut's weight table.
  auto engine_model = Model::load(path);
  ASSERT_TRUE(engine_model.has_value()) << engine_model.status().message();
  EXPECT_EQ((*engine_model)->config().n_layer, cfg->n_layer);
  if (!c.ref_forward) {
    std::remove(path.c_str());
    return;
  }
  auto model = RefModel::load(*f);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  std::vector<int32_t> tokens;
  for (uint32_t i = 0; i < 16; ++i)
    tokens.push_back(static_cast<int32_t>((uint64_t{i} * 7919 + 13) % cfg->n_vocab));
  ForwardStats st;
  const auto logits = model->forward(tokens, &st);
  ASSERT_EQ(logits.size(), tokens.size());
  EXPECT_TRUE(st.all_finite());
  EXPECT_GT(st.max_abs_logit, kMinLogitRange);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Presets, SynthCut,
                         ::testing::Values(CutCase{"tiny-qwen3moe", 2, false},
                                           CutCase{"tiny-qwen35", 3, false},
                                           CutCase{"smollm2-135m", 4, true}),
                         [](const auto& info) {
                           std::string s = info.param.preset;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(SynthCut, MoreBlocksThanThePresetHasIsRefused) {
  const tools::Preset* preset = tools::find_preset("tiny-llama");
  ASSERT_NE(preset, nullptr);
  ThreadPool pool(1);
  tools::SynthOptions opt;
  opt.n_layer = preset->arch.n_layer + 1;
  auto res = tools::synth_model(*preset, tmp_path("synth_cut_refused.gguf"), opt, pool);
  ASSERT_FALSE(res.has_value());
  EXPECT_NE(res.status().message().find("--layers 4 is more than preset tiny-llama's 3 blocks"),
            std::string::npos)
      << res.status().message();
}

}  // namespace
}  // namespace sustain::test

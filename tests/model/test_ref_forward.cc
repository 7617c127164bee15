// The reference forward pass against llama.cpp's logits for the same GGUF
// files and prompts (../shared/ref, see its README for the tolerances).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "model/ref_compare.h"
#include "model/ref_forward.h"
#include "test_util.h"

namespace sustain::test {
namespace {

RefModel load_model(const std::string& stem, const RefOptions& opt = {}) {
  auto f = gguf::File::open(ref_path("models/" + stem + ".gguf"));
  EXPECT_TRUE(f.has_value()) << f.status().message();
  auto m = RefModel::load(*f, opt);
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return std::move(m).value();
}

class RefForwardVsLlamaCpp : public ::testing::TestWithParam<RefCase> {};

TEST_P(RefForwardVsLlamaCpp, LogitsAgree) {
  SUSTAIN_REQUIRE_REF();
  const RefCase& c = GetParam();
  const std::string stem = std::string(c.model) + "." + c.prompt + "." + c.cfg;
  const RefData ref = read_ref(stem);
  ASSERT_FALSE(HasFailure());
  RefOptions opt;
  opt.quantize_activations = opt.kv_f16 = c.llamacpp_rounding;
  const RefModel model = load_model(c.model, opt);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(model.config().n_vocab, static_cast<uint32_t>(ref.n_vocab));

  ForwardStats stats;
  const auto logits = model.forward(ref.tokens, &stats);
  ASSERT_EQ(logits.size(), ref.tokens.size());
  EXPECT_TRUE(stats.all_finite());

  check_against_ref(c, ref, logits, stem + (c.llamacpp_rounding ? " rounded" : ""),
                    stats.max_abs());
}

INSTANTIATE_TEST_SUITE_P(Ref, RefForwardVsLlamaCpp, ::testing::ValuesIn(kPlainCases),
                         [](const auto& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(RefRounded, RefForwardVsLlamaCpp, ::testing::ValuesIn(kRoundedCases),
                         [](const auto& info) { return case_name(info.param); });

// aidreams260K is a real trained model, so its greedy continuation is text
// with few near-ties: the 32 greedy tokens must equal llama.cpp's exactly.
TEST(RefForwardGreedy, Aidreams260KMatchesLlamaCpp) {
  SUSTAIN_REQUIRE_REF();
  const RefModel model = load_model("aidreams260K-f32");
  ASSERT_FALSE(HasFailure());
  for (const char* prompt : {"p1_short", "p2_medium", "p3_long_llama2c"}) {
    const RefData ref = read_ref(std::string("aidreams260K-f32.") + prompt + ".kvf16");
    ASSERT_FALSE(HasFailure());
    const auto want = ref.meta.at("greedy").at("ids").get<std::vector<int32_t>>();
    const auto got = model.generate_greedy(ref.tokens, static_cast<int>(want.size()));
    int same = 0;
    for (size_t i = 0; i < want.size(); ++i) same += got[i] == want[i];
    std::printf("[ measured ] aidreams260K-f32 %s greedy: %d/%zu tokens equal\n", prompt, same,
                want.size());
    EXPECT_EQ(got, want) << prompt;
  }
}

// RoPE pairing is what separates the architectures most silently: a wrong
// choice still gives finite, plausible logits. Pin llama.cpp's choice.
TEST(RefForwardRope, StylePerArchitecture) {
  EXPECT_EQ(rope_style(Arch::kLlama), RopeStyle::kNorm);
  EXPECT_EQ(rope_style(Arch::kQwen2), RopeStyle::kNeox);
  EXPECT_EQ(rope_style(Arch::kQwen3), RopeStyle::kNeox);
}

// Causality: the logits at a position must not depend on later tokens.
TEST(RefForwardCausal, PrefixLogitsIgnoreLaterTokens) {
  SUSTAIN_REQUIRE_REF();
  const RefModel model = load_model("tiny-llama-f32");
  ASSERT_FALSE(HasFailure());
  const std::vector<int32_t> a = {1, 429, 491, 433, 295, 17};
  std::vector<int32_t> b = a;
  b.back() = 300;
  const auto la = model.forward(a), lb = model.forward(b);
  for (size_t p = 0; p + 1 < a.size(); ++p) EXPECT_EQ(la[p], lb[p]) << "position " << p;
  EXPECT_NE(la.back(), lb.back());
}

}  // namespace
}  // namespace sustain::test

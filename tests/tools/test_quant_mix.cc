// The per-tensor format mix must equal llama-quantize's on the same files:
// every llama.cpp-quantized reference model is re-planned from its own
// tensors and file type, and each tensor's planned format is compared with
// the one llama.cpp chose.
#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"
#include "model/weights.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/quant_mix.h"
#include "tools/quantize.h"

namespace sustain::tools {
namespace {

struct Case {
  const char* file;
  const char* type;
};

class QuantMixRef : public ::testing::TestWithParam<Case> {};

TEST_P(QuantMixRef, MatchesLlamaCppChoices) {
  SUSTAIN_REQUIRE_REF();
  const Case c = GetParam();
  auto f = gguf::File::open(test::ref_path(std::string("models/") + c.file));
  ASSERT_TRUE(f) << f.status().message();
  auto ft = file_type_from_name(c.type);
  ASSERT_TRUE(ft);
  const auto planned = plan_file_types(*f, *ft);
  ASSERT_EQ(planned.size(), f->tensors().size());
  int compared = 0;
  for (size_t i = 0; i < planned.size(); ++i) {
    const auto& t = f->tensors()[i];
    EXPECT_EQ(qtype_name(planned[i]), qtype_name(t.type)) << c.file << ": " << t.name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
  // The file records llama.cpp's file type id; ours must agree.
  auto id = f->get_uint("general.file_type");
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, file_type_info(*ft).gguf_file_type);
}

INSTANTIATE_TEST_SUITE_P(
    RefModels, QuantMixRef,
    ::testing::Values(Case{"tiny-llama-Q4_K_M.gguf", "Q4_K_M"}, Case{"tiny-llama-Q5_K_M.gguf", "Q5_K_M"},
                      Case{"tiny-llama-Q6_K.gguf", "Q6_K"}, Case{"tiny-llama-Q8_0.gguf", "Q8_0"},
                      Case{"tiny-llama-Q4_0.gguf", "Q4_0"}, Case{"aidreams260K-Q4_K_M.gguf", "Q4_K_M"},
                      Case{"aidreams260K-Q8_0.gguf", "Q8_0"}, Case{"stories260K-Q4_K_M.gguf", "Q4_K_M"},
                      Case{"stories260K-Q8_0.gguf", "Q8_0"}, Case{"tiny-qwen2-Q4_K_M.gguf", "Q4_K_M"},
                      Case{"tiny-qwen3-Q4_K_M.gguf", "Q4_K_M"}),
    [](const auto& info) {
      std::string s = info.param.file;
      for (auto& ch : s)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return s;
    });

// Layer rules on a real shape: Llama 3.1 8B (32 layers) at Q4_K_M. The layers
// given Q6_K follow llama.cpp's "more bits" pattern: first and last eighth,
// and every third layer between.
TEST(QuantMix, Llama8BQ4KM) {
  const Preset* p = find_preset("llama-3.1-8b");
  ASSERT_NE(p, nullptr);
  const auto table = weight_table(p->arch, p->llama3_rope);
  const auto types = plan_tensor_types(p->arch, table, FileType::kQ4_K_M);
  std::string v6, d6;
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].role == TensorRole::kAttnV && types[i] == QType::Q6_K)
      v6 += std::to_string(table[i].layer) + ",";
    if (table[i].role == TensorRole::kFfnDown && types[i] == QType::Q6_K)
      d6 += std::to_string(table[i].layer) + ",";
    if (table[i].role == TensorRole::kOutput) EXPECT_EQ(types[i], QType::Q6_K);
    if (table[i].role == TensorRole::kTokenEmbd) EXPECT_EQ(types[i], QType::Q4_K);
    if (table[i].role == TensorRole::kAttnQ) EXPECT_EQ(types[i], QType::Q4_K);
    if (!table[i].is_matrix()) EXPECT_EQ(types[i], QType::F32);
  }
  const std::string expect = "0,1,2,3,6,9,12,15,18,21,24,27,28,29,30,31,";
  EXPECT_EQ(v6, expect);
  EXPECT_EQ(d6, expect);
}

TEST(QuantMix, TiedEmbeddingsGetOutputFormat) {
  const Preset* p = find_preset("llama-3.2-1b");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->arch.tied_output);
  const auto table = weight_table(p->arch, p->llama3_rope);
  for (FileType ft : {FileType::kQ4_K_M, FileType::kQ4_0, FileType::kQ5_K_M}) {
    const auto types = plan_tensor_types(p->arch, table, ft);
    for (size_t i = 0; i < table.size(); ++i)
      if (table[i].role == TensorRole::kTokenEmbd) EXPECT_EQ(types[i], QType::Q6_K);
  }
  const auto q8 = plan_tensor_types(p->arch, table, FileType::kQ8_0);
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].role == TensorRole::kTokenEmbd) EXPECT_EQ(q8[i], QType::Q8_0);
}

TEST(QuantMix, RowsThatDoNotFitFallBack) {
  // SmolLM2: 576-wide rows do not fit 256-element K-quant blocks.
  const Preset* p = find_preset("smollm2-135m");
  ASSERT_NE(p, nullptr);
  const auto table = weight_table(p->arch);
  const auto types = plan_tensor_types(p->arch, table, FileType::kQ4_K_M);
  for (size_t i = 0; i < table.size(); ++i) {
    if (!table[i].is_matrix()) continue;
    const int64_t row = table[i].shape.back();
    EXPECT_EQ(row % qtype_traits(types[i]).block_elems, 0) << table[i].name;
    if (table[i].role == TensorRole::kAttnQ) EXPECT_EQ(types[i], QType::Q5_0);
    if (table[i].role == TensorRole::kTokenEmbd) EXPECT_EQ(types[i], QType::Q8_0);  // tied output
    if (table[i].role == TensorRole::kFfnDown) {
      // 1536-wide rows fit: Q4_K, or Q6_K on "more bits" layers.
      EXPECT_TRUE(types[i] == QType::Q4_K || types[i] == QType::Q6_K) << table[i].name;
    }
  }
  // A row of 100 fits no block format: F16.
  ArchConfig c = p->arch;
  std::vector<WeightSpec> odd = {{"blk.0.ffn_up.weight", TensorRole::kFfnUp, 0, {64, 100}}};
  EXPECT_EQ(plan_tensor_types(c, odd, FileType::kQ4_K_M)[0], QType::F16);
  EXPECT_EQ(plan_tensor_types(c, odd, FileType::kQ8_0)[0], QType::F16);
}

TEST(QuantMix, FileTypeNames) {
  for (const char* n : {"F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K"})
    EXPECT_TRUE(file_type_from_name(n)) << n;
  EXPECT_TRUE(file_type_from_name("q4_k_m"));
  EXPECT_FALSE(file_type_from_name("Q3_K_XL"));
  EXPECT_FALSE(file_type_from_name(""));
}

}  // namespace
}  // namespace sustain::tools

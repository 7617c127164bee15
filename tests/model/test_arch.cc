// Architecture config, weight table and KV arithmetic, checked against the
// reference files and against published figures.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "base/mapped_file.h"
#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/weights.h"
#include "test_util.h"
#include "tools/presets.h"

namespace sustain {
namespace {

TEST(ArchConfig, ReadsReferenceModels) {
  SUSTAIN_REQUIRE_REF();
  struct Want {
    const char* file;
    Arch arch;
    uint32_t layers, embd, heads, kv_heads, head_dim, vocab;
    bool tied;
  };
  const Want wants[] = {
      {"tiny-llama-f32.gguf", Arch::kLlama, 3, 256, 8, 2, 32, 512, false},
      {"stories260K-f32.gguf", Arch::kLlama, 5, 64, 8, 4, 8, 512, false},
      {"aidreams260K-Q8_0.gguf", Arch::kLlama, 4, 64, 4, 4, 16, 512, false},
      {"tiny-qwen2-Q4_K_M.gguf", Arch::kQwen2, 0, 256, 0, 0, 0, 50257, true},
      {"tiny-qwen3-Q4_K_M.gguf", Arch::kQwen3, 3, 256, 8, 2, 64, 50257, true},
      {"tiny-qwen3moe-f32.gguf", Arch::kQwen3Moe, 3, 64, 4, 2, 32, 50257, true},
      {"tiny-qwen3moe-Q8_0.gguf", Arch::kQwen3Moe, 3, 64, 4, 2, 32, 50257, true},
      {"tiny-gemma3-f32.gguf", Arch::kGemma3, 7, 64, 4, 2, 32, 50257, true},
      {"tiny-gemma3-Q8_0.gguf", Arch::kGemma3, 7, 64, 4, 2, 32, 50257, true},
      {"tiny-qwen35-f32.gguf", Arch::kQwen35, 5, 64, 4, 2, 64, 50257, true},
      {"tiny-qwen35-Q8_0.gguf", Arch::kQwen35, 5, 64, 4, 2, 64, 50257, true},
  };
  for (const auto& w : wants) {
    auto f = gguf::File::open(test::ref_path(std::string("models/") + w.file));
    ASSERT_TRUE(f) << f.status().message();
    auto c = arch_config_from_gguf(*f);
    ASSERT_TRUE(c) << w.file << ": " << c.status().message();
    EXPECT_EQ(c->arch, w.arch) << w.file;
    if (w.layers) EXPECT_EQ(c->n_layer, w.layers) << w.file;
    EXPECT_EQ(c->n_embd, w.embd) << w.file;
    if (w.heads) EXPECT_EQ(c->n_head, w.heads) << w.file;
    if (w.kv_heads) EXPECT_EQ(c->n_head_kv, w.kv_heads) << w.file;
    if (w.head_dim) EXPECT_EQ(c->head_dim_k, w.head_dim) << w.file;
    EXPECT_EQ(c->n_vocab, w.vocab) << w.file;
    EXPECT_EQ(c->tied_output, w.tied) << w.file;
    EXPECT_EQ(c->is_moe(), w.arch == Arch::kQwen3Moe) << w.file;
    if (c->is_moe()) {
      EXPECT_EQ(c->n_expert, 8u);
      EXPECT_EQ(c->n_expert_used, 2u);
      EXPECT_EQ(c->n_ff_exp, 32u);
      EXPECT_TRUE(c->has_qk_norm());
    }
    if (w.arch == Arch::kGemma3) {
      // Window 16, llama.cpp's default period 6: blocks 0-4 and 6 local, 5 global.
      EXPECT_EQ(c->sliding_window, 16u);
      EXPECT_EQ(c->sliding_window_pattern, 6u);
      for (uint32_t il = 0; il < 7; ++il) EXPECT_EQ(c->is_sliding(il), il != 5) << il;
      EXPECT_EQ(c->rope_freq_base_swa, 10000.0f);
      EXPECT_EQ(c->rope_freq_base, 1e6f);
      EXPECT_EQ(c->rope_scaling, RopeScaling::kLinear);
      EXPECT_EQ(c->rope_scale_factor, 8.0f);
      EXPECT_EQ(c->final_logit_softcap, 0.0f);
    }
    // The weight table describes every tensor of the file, with its shape.
    Status st = validate_weights(*c, *f);
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
}

TEST(ArchConfig, ValidateWeightsNamesTheProblem) {
  SUSTAIN_REQUIRE_REF();
  auto f = gguf::File::open(test::ref_path("models/tiny-llama-f32.gguf"));
  ASSERT_TRUE(f);
  auto c = arch_config_from_gguf(*f);
  ASSERT_TRUE(c);
  ArchConfig wrong = *c;
  wrong.n_ff = 512;
  Status st = validate_weights(wrong, *f);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("blk.0.ffn_gate.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[512, 256]"), std::string::npos) << st.message();
  ArchConfig more = *c;
  more.n_layer = 4;
  st = validate_weights(more, *f);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("blk.3."), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.message();
}

// Expert counts that contradict each other or the tensors are refused,
// naming the key or the tensor.
TEST(ArchConfig, MoeExpertCountsAreChecked) {
  SUSTAIN_REQUIRE_REF();
  std::ifstream in(test::ref_path("models/tiny-qwen3moe-f32.gguf"), std::ios::binary);
  const std::string base((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto with = [&](const std::string& key, uint32_t value) {
    std::string bytes = base;
    std::string needle = key;
    const uint32_t type_u32 = 4;
    needle.append(reinterpret_cast<const char*>(&type_u32), 4);
    const size_t at = bytes.find(needle);
    EXPECT_NE(at, std::string::npos) << key;
    if (at != std::string::npos) std::memcpy(&bytes[at + needle.size()], &value, 4);
    return bytes;
  };
  struct Case {
    const char* key;
    uint32_t value;
    const char* expect;
  };
  const Case cases[] = {
      {"qwen3moe.expert_used_count", 9, "`qwen3moe.expert_used_count` = 9 must be in [1"},
      {"qwen3moe.expert_used_count", 0, "`qwen3moe.expert_used_count` = 0"},
      {"qwen3moe.expert_count", 0, "`qwen3moe.expert_count` = 0"},
      {"qwen3moe.expert_count", 16,
       "tensor `blk.0.ffn_gate_inp.weight` has shape [8, 64], "
       "expected [16, 64]"},
      {"qwen3moe.expert_feed_forward_length", 64, "blk.0.ffn_gate_exps.weight"},
      {"qwen3moe.expert_feed_forward_length", 0, "`qwen3moe.expert_feed_forward_length` is 0"},
  };
  for (const Case& k : cases) {
    const std::string bytes = with(k.key, k.value);
    auto f = gguf::File::parse(MappedFile::from_memory(bytes.data(), bytes.size(), "moe.gguf"));
    ASSERT_TRUE(f) << f.status().message();
    auto c = arch_config_from_gguf(*f);
    Status st = c ? validate_weights(*c, *f) : c.status();
    ASSERT_FALSE(st.is_ok()) << k.key << " = " << k.value;
    EXPECT_NE(st.message().find(k.expect), std::string::npos) << st.message();
  }
}

// qwen35: a layer pattern, head counts or a MTP block count that contradict
// each other or the tensors are refused naming the key or the tensor.
TEST(ArchConfig, Qwen35CountsAreChecked) {
  SUSTAIN_REQUIRE_REF();
  std::ifstream in(test::ref_path("models/tiny-qwen35-f32.gguf"), std::ios::binary);
  const std::string base((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto with = [&](const std::string& key, uint32_t value) {
    std::string bytes = base;
    std::string needle = key;
    const uint32_t type_u32 = 4;
    needle.append(reinterpret_cast<const char*>(&type_u32), 4);
    const size_t at = bytes.find(needle);
    EXPECT_NE(at, std::string::npos) << key;
    if (at != std::string::npos) std::memcpy(&bytes[at + needle.size()], &value, 4);
    return bytes;
  };
  struct Case {
    const char* key;
    uint32_t value;
    const char* expect;
  };
  const Case cases[] = {
      {"qwen35.ssm.time_step_rank", 3, "ssm.time_step_rank 3 (value heads) is not a multiple"},
      {"qwen35.ssm.inner_size", 96, "ssm.inner_size 96 must equal"},
      {"qwen35.full_attention_interval", 0, "`qwen35.full_attention_interval` is 0"},
      {"qwen35.nextn_predict_layers", 5, "`qwen35.nextn_predict_layers` = 5 leaves no main block"},
      // Block 3 becomes DeltaNet: its attention tensors are not expected there.
      {"qwen35.full_attention_interval", 5, "tensor `blk.3.attn_qkv.weight` is missing"},
      // Without an MTP block, block 4 is a main (DeltaNet) block.
      {"qwen35.nextn_predict_layers", 0, "tensor `blk.4.attn_qkv.weight` is missing"},
      {"qwen35.attention.head_count", 8,
       "tensor `blk.3.attn_q.weight` has shape [512, 64], expected [1024, 64]"},
      {"qwen35.ssm.group_count", 4, "tensor `blk.0.attn_qkv.weight` has shape [256, 64], expected"},
  };
  for (const Case& k : cases) {
    const std::string bytes = with(k.key, k.value);
    auto f = gguf::File::parse(MappedFile::from_memory(bytes.data(), bytes.size(), "q35.gguf"));
    ASSERT_TRUE(f) << f.status().message();
    auto c = arch_config_from_gguf(*f);
    Status st = c ? validate_weights(*c, *f) : c.status();
    ASSERT_FALSE(st.is_ok()) << k.key << " = " << k.value;
    EXPECT_NE(st.message().find(k.expect), std::string::npos) << k.key << ": " << st.message();
  }
  // A NextN tensor renamed away: missing, named.
  std::string bytes = base;
  const std::string name = "blk.4.nextn.hnorm.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 16] = 'X';
  auto f = gguf::File::parse(MappedFile::from_memory(bytes.data(), bytes.size(), "q35.gguf"));
  ASSERT_TRUE(f);
  auto c = arch_config_from_gguf(*f);
  ASSERT_TRUE(c);
  Status st = validate_weights(*c, *f);
  EXPECT_NE(st.message().find("tensor `blk.4.nextn.hnorm.weight` is missing"), std::string::npos)
      << st.message();
}

TEST(ArchConfig, RejectsInconsistentHyperparameters) {
  ArchConfig c = tools::find_preset("tiny-llama")->arch;
  EXPECT_TRUE(validate_arch_config(c).is_ok());
  ArchConfig a = c;
  a.n_head_kv = 3;  // 8 heads cannot share 3 KV heads
  EXPECT_FALSE(validate_arch_config(a).is_ok());
  ArchConfig b = c;
  b.rope_dim = 33;
  EXPECT_FALSE(validate_arch_config(b).is_ok());
  ArchConfig d = c;
  d.n_layer = 0;
  EXPECT_FALSE(validate_arch_config(d).is_ok());
}

// Published figures: seed 000 §3.1 gives 131,072 bytes (128 KiB) of f16 KV
// per token for Llama-3-8B, i.e. 4.29 GB at 32K; vLLM's documentation gives
// about 83.5K tokens of bf16 KV for Qwen3-4B in 11.47 GiB, twice that in fp8.
TEST(KvBytes, PublishedFigures) {
  const auto* l8 = tools::find_preset("llama-3.1-8b");
  ASSERT_NE(l8, nullptr);
  EXPECT_EQ(*kv_bytes_per_token(l8->arch, QType::F16, QType::F16), 131072u);
  EXPECT_NEAR(*kv_bytes_per_token(l8->arch, QType::F16, QType::F16) * 32768.0 / 1e9, 4.29, 0.01);
  const auto* q4 = tools::find_preset("qwen3-4b");
  ASSERT_NE(q4, nullptr);
  const double budget = 11.47 * 1024 * 1024 * 1024;
  const double bf16_tokens = budget / *kv_bytes_per_token(q4->arch, QType::BF16, QType::BF16);
  EXPECT_NEAR(bf16_tokens, 83.5e3, 0.2e3);
  const double fp8_tokens =
      budget / *kv_bytes_per_token(q4->arch, QType::FP8_E4M3, QType::FP8_E4M3);
  EXPECT_NEAR(fp8_tokens / bf16_tokens, 2.0, 1e-9);
  // Mixed K/V formats and block scales: q8_0 is 34 bytes per 32 elements.
  EXPECT_EQ(*kv_bytes_per_token(l8->arch, QType::Q8_0, QType::F16),
            32u * 8u * (128u / 32u * 34u + 128u * 2u));
  // smollm2 head dim 64 fits every 32-element block format.
  const auto* s = tools::find_preset("smollm2-135m");
  EXPECT_EQ(*kv_bytes_per_token(s->arch, QType::F16, QType::F16), 2u * 30u * 3u * 64u * 2u);
  EXPECT_EQ(*kv_bytes_per_token(s->arch, QType::Q4_0, QType::Q4_0), 2u * 30u * 3u * 2u * 18u);
  // A 256-element K-quant block does not fit a 64-wide head.
  EXPECT_FALSE(kv_bytes_per_token(s->arch, QType::Q4_K, QType::Q4_K).has_value());
}

// Parameter counts of the presets against the published model sizes.
TEST(Presets, ParameterCountsMatchPublishedSizes) {
  struct Want {
    const char* name;
    double params;
  };
  const Want wants[] = {{"smollm2-135m", 134.5e6},  {"qwen2.5-0.5b", 494.0e6},
                        {"llama-3.2-1b", 1.236e9},  {"qwen3-4b", 4.022e9},
                        {"llama-3.1-8b", 8.030e9},  {"qwen2.5-7b", 7.616e9},
                        {"mistral-7b", 7.248e9},    {"qwen3-32b", 32.76e9},
                        {"llama-3.1-70b", 70.55e9}, {"qwen3-30b-a3b", 30.53e9},
                        {"gemma-3-1b", 999.9e6}};
  for (const auto& w : wants) {
    const auto* p = tools::find_preset(w.name);
    ASSERT_NE(p, nullptr) << w.name;
    ASSERT_TRUE(validate_arch_config(p->arch).is_ok()) << w.name;
    // rope_freqs (64 floats) is not a parameter in the published counts.
    const double n = static_cast<double>(parameter_count(weight_table(p->arch)));
    EXPECT_NEAR(n / w.params, 1.0, 0.005) << w.name << ": " << n;
  }
}

// Qwen3-30B-A3B: "30.5B in total and 3.3B activated" (its model card). A
// token reads the attention, its 8 of 128 experts, the router and the norms.
TEST(Presets, MoeActiveParameters) {
  const auto* p = tools::find_preset("qwen3-30b-a3b");
  ASSERT_NE(p, nullptr);
  const ArchConfig& c = p->arch;
  ASSERT_TRUE(c.is_moe());
  uint64_t active = 0;
  for (const auto& w : weight_table(c)) {
    const bool exps = w.role == TensorRole::kFfnGateExps || w.role == TensorRole::kFfnUpExps ||
                      w.role == TensorRole::kFfnDownExps;
    active += exps ? w.n_elements() / c.n_expert * c.n_expert_used : w.n_elements();
  }
  EXPECT_NEAR(static_cast<double>(active) / 3.35e9, 1.0, 0.01) << active;
}

TEST(Weights, ExpertStacksByName) {
  EXPECT_TRUE(is_expert_stack("blk.0.ffn_gate_exps.weight"));
  EXPECT_TRUE(is_expert_stack("blk.47.ffn_down_exps.weight"));
  EXPECT_FALSE(is_expert_stack("blk.0.ffn_gate_inp.weight"));  // the router is read whole
  EXPECT_FALSE(is_expert_stack("blk.0.ffn_down.weight"));
  EXPECT_FALSE(is_expert_stack("_exps.weight"));
  // Every stacked tensor of the table, and nothing else, is one.
  const auto* p = tools::find_preset("qwen3-30b-a3b");
  ASSERT_NE(p, nullptr);
  for (const auto& w : weight_table(p->arch)) {
    const bool stack = w.role == TensorRole::kFfnGateExps || w.role == TensorRole::kFfnUpExps ||
                       w.role == TensorRole::kFfnDownExps;
    EXPECT_EQ(is_expert_stack(w.name), stack) << w.name;
  }
}

TEST(Presets, Llama3RopeFactors) {
  const auto* p = tools::find_preset("llama-3.1-8b");
  const auto f = tools::llama3_rope_factors(*p);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f.front(), 1.0f);  // highest frequency: unscaled
  EXPECT_FLOAT_EQ(f.back(), 8.0f);   // lowest frequency: scaled by the factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
}

}  // namespace
}  // namespace sustain

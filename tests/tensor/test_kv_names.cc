// The one table of KV-cache format names every command uses (-ctk / -ctv).
#include <gtest/gtest.h>

#include "tensor/kv_names.h"

namespace sustain {
namespace {

TEST(KvNames, EveryLlamaCppSpellingAndFp8) {
  EXPECT_EQ(*kv_cache_type("f16", "-ctk"), QType::F16);
  EXPECT_EQ(*kv_cache_type("q4_1", "-ctk"), QType::Q4_1);
  EXPECT_EQ(*kv_cache_type("fp8", "-ctv"), QType::FP8_E4M3);
  EXPECT_EQ(std::string(kv_cache_type_names()), "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, fp8");
}

TEST(KvNames, UnknownNamesTheFlagTheValueAndTheChoices) {
  for (const char* bad : {"q9_9", "F16", "Q8_0", "", "q4_k", "fp8_e4m3"}) {
    auto t = kv_cache_type(bad, "--cache-type-v");
    ASSERT_FALSE(t.has_value()) << bad;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    const std::string m = t.status().message();
    EXPECT_NE(m.find("--cache-type-v '" + std::string(bad) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("q5_1, fp8"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace sustain

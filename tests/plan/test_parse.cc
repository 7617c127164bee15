// `sustain plan`'s flag values: sizes, lists, percentages, split modes.
// Bad values are errors that name the flag and the value.
#include <string>

#include <gtest/gtest.h>

#include "plan/parse.h"

namespace sustain::test {
namespace {

TEST(PlanParse, Bytes) {
  struct Case {
    const char* in;
    uint64_t want;
  };
  const Case cases[] = {
      {"16G", uint64_t{16} << 30},
      {"16GiB", uint64_t{16} << 30},
      {"16gib", uint64_t{16} << 30},
      {"16GB", 16000000000ull},
      {"512M", uint64_t{512} << 20},
      {"512MiB", uint64_t{512} << 20},
      {"1.5K", 1536},
      {"17179869184", 17179869184ull},
      {"100B", 100},
      {" 2T ", uint64_t{2} << 40},
      {"11.47GiB", 12315818721ull},
      {"0", 0},
  };
  for (const Case& c : cases) {
    auto r = plan::parse_bytes(c.in, "--devices");
    ASSERT_TRUE(r.has_value()) << c.in << ": " << r.status().message();
    EXPECT_EQ(*r, c.want) << c.in;
  }
  for (const char* bad : {"", "G", "16X", "-5", "1.5", "abc", "16 G B", "1e3", "99999999999T"}) {
    auto r = plan::parse_bytes(bad, "--kv-budget");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.status().message().find("--kv-budget"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(PlanParse, Lists) {
  auto sizes = plan::parse_byte_list("16G,12G", "--devices");
  ASSERT_TRUE(sizes.has_value());
  EXPECT_EQ(*sizes, (std::vector<uint64_t>{uint64_t{16} << 30, uint64_t{12} << 30}));
  for (const char* bad : {"16G,,12G", "16G,", "0,12G", "16G;12G"}) {
    auto r = plan::parse_byte_list(bad, "--devices");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.status().message().find("--devices"), std::string::npos);
  }
  auto ratio = plan::parse_number_list("2, 1.5", "--ratio");
  ASSERT_TRUE(ratio.has_value());
  EXPECT_EQ(*ratio, (std::vector<double>{2.0, 1.5}));
  for (const char* bad : {"2,0", "2,-1", "x", "", "2,,1"}) {
    auto r = plan::parse_number_list(bad, "--ratio");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.status().message().find("--ratio"), std::string::npos);
  }
}

TEST(PlanParse, PercentAndSplit) {
  EXPECT_DOUBLE_EQ(*plan::parse_percent("15%", "--headroom"), 0.15);
  EXPECT_DOUBLE_EQ(*plan::parse_percent("0", "--headroom"), 0.0);
  EXPECT_DOUBLE_EQ(*plan::parse_percent("7.5 %", "--headroom"), 0.075);
  for (const char* bad : {"100%", "150", "-1%", "abc", "%"}) {
    auto r = plan::parse_percent(bad, "--headroom");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.status().message().find("--headroom"), std::string::npos);
  }
  EXPECT_EQ(*plan::parse_split("layer", "--split"), plan::Split::kLayer);
  EXPECT_EQ(*plan::parse_split("ROW", "--split"), plan::Split::kTensor);
  EXPECT_EQ(*plan::parse_split("tensor", "--split"), plan::Split::kTensor);
  auto s = plan::parse_split("diagonal", "--split");
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().message().find("'diagonal'"), std::string::npos);
}

}  // namespace
}  // namespace sustain::test

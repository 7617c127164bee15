// Prompt lookup: the longest recent suffix match proposes what followed it.
#include "spec/ngram.h"

#include <gtest/gtest.h>

#include "spec/proposer.h"

namespace sustain::spec {
namespace {

std::vector<int32_t> draft(const std::vector<int32_t>& tokens, int k, int n_max = 4) {
  NgramProposer p(n_max);
  std::vector<int32_t> out;
  p.propose(tokens, k, out);
  return out;
}

TEST(Ngram, ProposesWhatFollowedTheLongestRecentMatch) {
  // "1 2 3" occurred at 0 followed by 4 5 6; the suffix is "1 2 3".
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
  // The most recent occurrence wins: "7 8" later followed by 1.
  EXPECT_EQ(draft({7, 8, 5, 7, 8, 1, 0, 7, 8}, 1), (std::vector<int32_t>{1}));
  // A longer match beats a more recent shorter one: "2 3" → 4 (n = 2) over "3" → 0.
  EXPECT_EQ(draft({2, 3, 4, 3, 0, 2, 3}, 1), (std::vector<int32_t>{4}));
  // Only n = 1: the last token 5 appeared once before, followed by 6.
  EXPECT_EQ(draft({5, 6, 7, 5}, 4, 1), (std::vector<int32_t>{6, 7, 5}));
}

TEST(Ngram, NoMatchNoDraft) {
  EXPECT_TRUE(draft({1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(draft({1}, 4).empty());
  EXPECT_TRUE(draft({}, 4).empty());
  EXPECT_TRUE(draft({1, 1}, 0).empty());
  // A repeated token proposes itself (the run continues).
  EXPECT_EQ(draft({9, 9, 9}, 2), (std::vector<int32_t>{9}));
}

TEST(SpecConfig, RangesAndTypesAreChecked) {
  Config c;
  c.types = {"ngram"};
  EXPECT_TRUE(validate(c).is_ok());
  c.draft_max = 0;
  EXPECT_NE(validate(c).message().find("--draft-max 0"), std::string::npos);
  c.draft_max = 40;
  EXPECT_NE(validate(c).message().find("--draft-max 40"), std::string::npos);
  c.draft_max = 8;
  c.draft_min = 9;
  EXPECT_NE(validate(c).message().find("--draft-min 9"), std::string::npos);
  c.draft_min = 1;
  c.mtp_depth = 17;
  EXPECT_NE(validate(c).message().find("--spec-mtp-depth 17"), std::string::npos);
  c.mtp_depth = 1;
  auto bad = parse_types("ngram,telepathy");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("telepathy"), std::string::npos);
  EXPECT_FALSE(parse_types("ngram,").has_value());
  auto ok = parse_types("ngram");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->size(), 1u);
}

}  // namespace
}  // namespace sustain::spec

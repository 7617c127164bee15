// The matcher on awkward input: characters split across calls, the empty
// sentence, deep nesting, ambiguous grammars, and all-or-nothing advance.
#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace sustain::grammar {
namespace {

using test::accepts;
using test::gbnf;

TEST(Matcher, Utf8SplitAcrossSteps) {
  auto g = gbnf(R"(root ::= "é" [α-ω] "😀")");
  Matcher m(g);
  ASSERT_TRUE(m.advance("\xC3"));
  EXPECT_FALSE(m.state().can_end);
  ASSERT_TRUE(m.advance("\xA9\xCE"));
  EXPECT_FALSE(m.advance("\x80"));  // U+0380 is below α: rejected, state unchanged
  ASSERT_TRUE(m.advance("\xB2"));   // β
  ASSERT_TRUE(m.advance("\xF0\x9F"));
  ASSERT_TRUE(m.advance("\x98"));
  EXPECT_FALSE(m.state().can_end);
  ASSERT_TRUE(m.advance("\x80"));
  EXPECT_TRUE(m.state().can_end);
  EXPECT_TRUE(m.state().tops.empty());
  EXPECT_FALSE(m.advance("x"));
}

TEST(Matcher, EmptySentence) {
  auto g = gbnf(R"(root ::= "")");
  Matcher m(g);
  EXPECT_TRUE(m.state().can_end);
  EXPECT_TRUE(m.state().tops.empty());
  EXPECT_FALSE(m.advance("a"));
  EXPECT_TRUE(m.advance(""));
  auto opt = gbnf(R"(root ::= ( "a" | "" ) ( "b" )?)");
  EXPECT_TRUE(accepts(opt, ""));
  EXPECT_TRUE(accepts(opt, "ab"));
  EXPECT_TRUE(accepts(opt, "b"));
}

TEST(Matcher, AllOrNothing) {
  auto g = gbnf(R"(root ::= "abc" | "abd")");
  Matcher m(g);
  EXPECT_FALSE(m.advance("abx"));
  EXPECT_TRUE(m.advance("ab"));  // the failed call left no trace
  EXPECT_TRUE(m.advance("d"));
  EXPECT_TRUE(m.state().can_end);
}

TEST(Matcher, DeepNestingRunsInBoundedStack) {
  auto g = gbnf(R"(root ::= "[" root? "]")");
  const int depth = 20000;
  const std::string text = std::string(depth, '[') + std::string(depth, ']');
  EXPECT_TRUE(accepts(g, text));
  EXPECT_FALSE(accepts(g, text + "]"));
  EXPECT_FALSE(accepts(g, text.substr(1)));
  // Right recursion (how repetition is compiled) does not grow the stacks:
  // a million repetitions make no more nodes than a few.
  auto rep = gbnf(R"(root ::= ( "ab" | "c" )*)");
  Matcher m(rep);
  ASSERT_TRUE(m.advance("ababc"));
  const size_t nodes = m.n_nodes();
  std::string many;
  for (int i = 0; i < 100000; ++i) many += "abc";
  ASSERT_TRUE(m.advance(many));
  EXPECT_EQ(m.n_nodes(), nodes);
  EXPECT_TRUE(m.state().can_end);
}

TEST(Matcher, AmbiguousGrammarStaysSmall) {
  // Every 'a' could come from either alternative: stacks that are the same
  // are the same node, so the state does not double per byte.
  auto g = gbnf(R"(root ::= ( "a" | "a" | x )* "b"
x ::= "a" | "a")");
  Matcher m(g);
  ASSERT_TRUE(m.advance(std::string(5000, 'a')));
  EXPECT_LE(m.state().tops.size(), 8u);
  ASSERT_TRUE(m.advance("b"));
  EXPECT_TRUE(m.state().can_end);
}

TEST(Matcher, ExponentiallyManyStacksAreRefusedNotFollowed) {
  // After n 'a's there are 2^n different stacks (each a sequence of b/c
  // still owed). Past the bound the next byte is refused rather than
  // followed, so the work per byte stays bounded.
  auto g = gbnf(R"(root ::= s
s ::= "a" s "b" | "a" s "c" | "")");
  Matcher m(g);
  int taken = 0;
  while (taken < 40 && m.advance("a")) ++taken;
  EXPECT_GE(taken, 10);  // about 3 * 2^10 tops are still followed
  EXPECT_LT(taken, 40);
  EXPECT_LE(m.state().tops.size(), Matcher::kMaxStacks);
  ASSERT_TRUE(m.advance(std::string(static_cast<size_t>(taken), 'b')));
  EXPECT_TRUE(m.state().can_end);
}

TEST(Matcher, RollbackForgetsExploredNodes) {
  auto g = gbnf(R"(root ::= "{" ( [a-z] "x" )* "}")");
  Matcher m(g);
  ASSERT_TRUE(m.advance("{"));
  const size_t cp = m.checkpoint();
  MatchState to;
  m.step(m.state(), 'q', to);
  EXPECT_FALSE(to.dead());
  m.rollback(cp);
  EXPECT_EQ(m.n_nodes(), cp);
  ASSERT_TRUE(m.advance("qx}"));
  EXPECT_TRUE(m.state().can_end);
}

}  // namespace
}  // namespace sustain::grammar

// The GBNF parser: every construct of llama.cpp's dialect, checked by what
// the grammar accepts and rejects, and errors that name line, column and
// the problem.
#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace sustain::grammar {
namespace {

using test::accepts;
using test::gbnf;
using test::prefix_ok;

std::string error_of(std::string_view text) {
  auto g = parse_gbnf(text);
  EXPECT_FALSE(g.has_value()) << text;
  return g ? std::string() : g.status().message();
}

TEST(Gbnf, LiteralsAlternationGrouping) {
  auto g = gbnf(R"(root ::= "ab" ("c" | "d" "e") | "x")");
  EXPECT_TRUE(accepts(g, "abc"));
  EXPECT_TRUE(accepts(g, "abde"));
  EXPECT_TRUE(accepts(g, "x"));
  EXPECT_FALSE(accepts(g, "ab"));
  EXPECT_TRUE(prefix_ok(g, "ab"));
  EXPECT_FALSE(accepts(g, "abd"));
  EXPECT_FALSE(prefix_ok(g, "abx"));
  EXPECT_FALSE(accepts(g, "abcx"));
  EXPECT_FALSE(accepts(g, ""));
}

TEST(Gbnf, Repetitions) {
  auto g = gbnf(R"(root ::= "a"* "b"+ "c"? "d"{2} "e"{1,3} "f"{2,})");
  EXPECT_TRUE(accepts(g, "bddeff"));
  EXPECT_TRUE(accepts(g, "aaabbbcddeeefff"));
  EXPECT_FALSE(accepts(g, "ddeff"));      // b+ needs one
  EXPECT_FALSE(accepts(g, "bdeff"));      // d{2}
  EXPECT_FALSE(accepts(g, "bddeeeeff"));  // e{1,3}
  EXPECT_FALSE(accepts(g, "bddef"));      // f{2,}
  EXPECT_FALSE(accepts(g, "bccddeff"));   // c?
  auto z = gbnf(R"(root ::= "x"{0} "y"{0,2})");
  EXPECT_TRUE(accepts(z, ""));
  EXPECT_TRUE(accepts(z, "yy"));
  EXPECT_FALSE(accepts(z, "x"));
  EXPECT_FALSE(accepts(z, "yyy"));
  // A repeated group of several symbols, and repetition of a rule.
  auto s = gbnf("root ::= (\"ab\" c){2}\nc ::= [0-9]");
  EXPECT_TRUE(accepts(s, "ab1ab2"));
  EXPECT_FALSE(accepts(s, "ab1ab"));
}

TEST(Gbnf, CharacterClassesAndEscapes) {
  auto g = gbnf(R"(root ::= [a-cx] [^0-9a-z] . "\x41\u00e9\n\t\\\"" [\]\-] [\x30-\x32])");
  EXPECT_TRUE(accepts(g, "aZ!Aé\n\t\\\"]0"));
  EXPECT_TRUE(accepts(g,
                      "x\xC3\xA9\xF0\x9F\x98\x80"
                      "Aé\n\t\\\"-2"));  // é, then a 4-byte emoji for '.'
  EXPECT_FALSE(accepts(g, "dZ!Aé\n\t\\\"]0"));
  EXPECT_FALSE(accepts(g, "a5!Aé\n\t\\\"]0"));
  EXPECT_FALSE(accepts(g, "aZ!Aé\n\t\\\"]3"));
  auto greek = gbnf(R"(root ::= [α-ω]+)");
  EXPECT_FALSE(accepts(greek, "λόγος"));  // ό (U+03CC) is outside α-ω (U+03B1-U+03C9)
  EXPECT_TRUE(accepts(greek, "λγς"));
  EXPECT_FALSE(accepts(greek, "a"));
  // Not-a-class: '.' never matches a lone continuation byte or a surrogate.
  auto any = gbnf("root ::= .");
  EXPECT_FALSE(accepts(any, "\x80"));
  EXPECT_FALSE(accepts(any, "\xED\xA0\x80"));  // U+D800 encoded
  EXPECT_FALSE(accepts(any, "\xC0\x80"));      // overlong NUL
  EXPECT_TRUE(accepts(any, "\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(accepts(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Gbnf, CommentsLinesAndContinuations) {
  auto g = gbnf(R"(# a comment line
root ::= item ( "," item )*   # trailing comment
item ::= "a"
       | "b"   # continues the rule on the next line
       | (
           "c"
           "d"
         )
)");
  EXPECT_TRUE(accepts(g, "a,b,cd"));
  EXPECT_FALSE(accepts(g, "a,c"));
  auto crlf = gbnf("root ::= x\r\nx ::= \"y\"\r\n");
  EXPECT_TRUE(accepts(crlf, "y"));
}

TEST(Gbnf, RecursionAndOtherRoots) {
  auto g = gbnf(R"g(
root ::= expr
expr ::= term ( [+-] term )*
term ::= [0-9]+ | "(" expr ")"
)g");
  EXPECT_TRUE(accepts(g, "1+(2-(3+4))"));
  EXPECT_FALSE(accepts(g, "1+(2"));
  auto other = parse_gbnf("start ::= \"s\"\n", "start");
  ASSERT_TRUE(other.has_value()) << other.status().message();
}

TEST(Gbnf, Errors) {
  EXPECT_NE(
      error_of("root ::= foo\n").find("rule 'foo' is used at line 1, column 10 but never defined"),
      std::string::npos)
      << error_of("root ::= foo\n");
  EXPECT_NE(error_of("root ::= \"a\"\nx \"b\"").find("line 2, column 3: expected '::='"),
            std::string::npos)
      << error_of("root ::= \"a\"\nx \"b\"");
  EXPECT_NE(error_of("root ::= \"abc").find("line 1, column 10: unterminated string literal"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape '\\q'"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"").find("missing ')'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" )").find("unexpected ')'"), std::string::npos);
  EXPECT_NE(error_of("other ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"")
                .find("line 2, column 1: rule 'root' is defined twice"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= x\nx ::= \"y\"? root").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}").find("maximum is below the minimum"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{99999}").find("over the limit"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]").find("backwards"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\uD800\"").find("not a Unicode scalar value"), std::string::npos);
  EXPECT_NE(error_of("root ::= *").find("'*' follows nothing"), std::string::npos)
      << error_of("root ::= *");
  EXPECT_NE(error_of("root ::= <[12]>").find("token references"), std::string::npos);
  std::string deep = "root ::= " + std::string(1000, '(') + "\"a\"" + std::string(1000, ')');
  EXPECT_NE(error_of(deep).find("nest deeper"), std::string::npos);
  EXPECT_NE(error_of("").find("no rule 'root'"), std::string::npos);
}

}  // namespace
}  // namespace sustain::grammar

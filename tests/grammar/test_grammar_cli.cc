// `sustain run` with --json-schema and --grammar: the printed text follows
// the constraint on a random-weight model, and bad constraints are errors
// that name the problem before the model is loaded.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"

namespace sustain::test {
namespace {

const std::string& model() {
  static const std::string path = [] {
    const std::string p = tmp_path("grammar_cli_tiny_qwen3.gguf");
    auto r = run_cli("synth --preset tiny-qwen3 --seed 5 -t 2 -o " + p);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return path;
}

TEST(GrammarCli, RunFollowsTheSchemaAndTheGrammar) {
  for (const char* temp : {"0", "1"}) {
    auto r = run_cli("run -m " + model() + " -p 'Give a number' -n 40 -t 2 --temp " + temp +
                     R"( -j '{"type": "object", "properties": {"n": {"type": "integer",
                        "minimum": 3, "maximum": 9}}, "required": ["n"]}')");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(r.out)) << r.out;
    ASSERT_TRUE(v.contains("n") && v["n"].is_number_integer()) << r.out;
    EXPECT_GE(v["n"].get<int>(), 3);
    EXPECT_LE(v["n"].get<int>(), 9);
  }
  auto g = run_cli("run -m " + model() +
                   R"( -p 'x' -n 20 -t 2 --temp 1 --grammar 'root ::= ("ja" | "nein") "!"')");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_TRUE(g.out == "ja!\n" || g.out == "nein!\n") << g.out;
}

TEST(GrammarCli, BadConstraintsAreErrors) {
  auto a = run_cli("run -m " + model() + R"( -p x -j '{"type": "string", "format": "ipv6"}')");
  EXPECT_NE(a.exit_code, 0);
  EXPECT_NE(a.err.find("format 'ipv6' is not supported"), std::string::npos) << a.err;
  auto b = run_cli("run -m " + model() + R"( -p x --grammar 'root ::= "a" |')");
  EXPECT_EQ(b.exit_code, 0) << "an empty alternative is allowed: " << b.err;
  auto c = run_cli("run -m " + model() + R"( -p x --grammar 'root ::= ("a"')");
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.err.find("grammar: line 1, column"), std::string::npos) << c.err;
  auto d = run_cli("run -m " + model() + R"( -p x --grammar 'root ::= "a"' -j '{}')");
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.err.find("exclude each other"), std::string::npos) << d.err;
}

}  // namespace
}  // namespace sustain::test

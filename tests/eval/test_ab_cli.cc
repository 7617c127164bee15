// `sustain eval ab` through the real binary on a tiny synth model: A == B
// must agree everywhere and be within noise; f16 vs q4_0 gives the documented
// JSON; bad input fails with a message that names the problem.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"
#include "test_util.h"

namespace sustain::test {
namespace {

std::string tiny_model() {
  const std::string path = tmp_path("ab-tiny-llama.gguf");
  const CliResult r = run_cli("synth --preset tiny-llama -o " + path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = tmp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(EvalAbCli, SameConfigurationAgreesEverywhere) {
  const std::string m = tiny_model();
  const std::string p = write("ab-prompts.txt", "Hello world\nThe quick brown fox\n\nabc\n");
  // Greedy: no seed noise, B is A, so every agreement is 1.
  const CliResult g =
      run_cli("eval ab -m " + m + " --prompts " + p + " -n 12 --repeats 4 --temp 0 -t 1 --json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  auto j = nlohmann::json::parse(g.out);
  EXPECT_EQ(j["greedy"], true);
  EXPECT_EQ(j["repeats"], 1);  // greedy repeats would be copies
  EXPECT_EQ(j["overall"]["verdict"], "within_noise");
  EXPECT_TRUE(j["overall"]["p"].is_null());  // no test without seed noise
  ASSERT_EQ(j["prompts"].size(), 3u);
  EXPECT_EQ(j["prompts"][2]["line"], 4);
  for (const auto& q : j["prompts"]) {
    EXPECT_EQ(double(q["agreement_noise"]), 1.0);
    EXPECT_EQ(double(q["agreement_cross"]), 1.0);
    EXPECT_EQ(double(q["agreement_paired"]), 1.0);
    EXPECT_EQ(double(q["exact_cross"]), 1.0);
    EXPECT_EQ(q["verdict"], "within_noise");
  }
  // Sampled: B shares A''s seed, so B reproduces A' exactly and D = 0 in
  // every repeat, though A and A' differ (other seeds). Two threads: the
  // forward pass must be deterministic for a fixed thread count.
  const CliResult s =
      run_cli("eval ab -m " + m + " --prompts " + p + " -n 12 --repeats 3 --temp 0.8 -t 2 --json");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  j = nlohmann::json::parse(s.out);
  EXPECT_EQ(j["greedy"], false);
  EXPECT_EQ(j["overall"]["n"], 9);
  EXPECT_EQ(double(j["overall"]["agreement_paired"]), 1.0);
  EXPECT_EQ(double(j["overall"]["diff_mean"]), 0.0);
  EXPECT_EQ(j["overall"]["n_nonzero"], 0);
  EXPECT_EQ(double(j["overall"]["p"]), 1.0);
  EXPECT_EQ(j["overall"]["verdict"], "within_noise");
}

TEST(EvalAbCli, F16VersusQ4JsonHasTheDocumentedFields) {
  const std::string m = tiny_model();
  const std::string p =
      write("ab-prompts.jsonl", "{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"1 2 3 4\"}\n");
  const std::string md = tmp_path("ab-report.md"), html = tmp_path("ab-report.html");
  const CliResult r = run_cli("eval ab -m " + m + " --prompts " + p +
                              " --ctk-b q4_0 --ctv-b q4_0 -n 10 --repeats 5 --temp 0.7 --seed 3 "
                              "-t 1 --json --out-md " +
                              md + " --html " + html);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kind"], "ab");
  EXPECT_NE(j["a"].get<std::string>().find("f16/f16"), std::string::npos);
  EXPECT_NE(j["b"].get<std::string>().find("q4_0/q4_0"), std::string::npos);
  EXPECT_EQ(j["repeats"], 5);
  EXPECT_EQ(j["n_predict"], 10);
  EXPECT_DOUBLE_EQ(double(j["alpha"]), 0.05);
  ASSERT_EQ(j["prompts"].size(), 2u);
  EXPECT_EQ(j["prompts"][1]["prompt"], "1 2 3 4");
  for (const auto& q : j["prompts"]) {
    for (const char* k : {"agreement_noise", "agreement_cross", "agreement_paired", "exact_cross",
                          "diff_mean", "p", "p_holm"}) {
      ASSERT_TRUE(q.contains(k)) << k;
      EXPECT_GE(double(q[k]), k == std::string("diff_mean") ? -1.0 : 0.0) << k;
      EXPECT_LE(double(q[k]), 1.0) << k;
    }
    EXPECT_TRUE(q["verdict"] == "within_noise" || q["verdict"] == "beyond_noise");
    EXPECT_EQ(q["repeat_scores"].size(), 5u);
    ASSERT_EQ(q["diff_ci95"].size(), 2u);
    EXPECT_LE(double(q["diff_ci95"][0]), double(q["diff_mean"]) + 1e-12);
    EXPECT_GE(double(q["diff_ci95"][1]), double(q["diff_mean"]) - 1e-12);
    // Per repeat D = noise − cross; the mean matches.
    double d = 0.0;
    for (const auto& x : q["repeat_scores"]) d += double(x["noise"]) - double(x["cross"]);
    EXPECT_NEAR(d / 5, double(q["diff_mean"]), 1e-12);
  }
  EXPECT_EQ(j["overall"]["n"], 10);
  std::ifstream f(md);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("# A/B with repeats"), std::string::npos);
  EXPECT_NE(text.find("q4_0/q4_0"), std::string::npos);
  std::ifstream h(html);
  const std::string page((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<table>"), std::string::npos);
  EXPECT_NE(page.find("Once upon a time"), std::string::npos);
}

TEST(EvalAbCli, BadInputIsNamed) {
  const std::string m = tiny_model();
  const std::string good = write("ab-good.txt", "hello\n");
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"--prompts " + tmp_path("ab-missing.txt"), "ab-missing.txt"},
      {"--prompts " + write("ab-empty.txt", "\n  \n"), "has no prompts"},
      {"--prompts " + good + " --repeats 0", "--repeats 0"},
      {"--prompts " + write("ab-utf8.txt", "fine\nbad \xff\xfe bytes\n"), "line 2"},
      {"--prompts " + write("ab-utf8.jsonl", "{\"prompt\": \"bad \xff\"}\n"), "line 1"},
      {"--prompts " + write("ab-nofield.jsonl", "{\"text\": \"x\"}\n"), "\"prompt\""},
      {"--prompts " + good + " --ctk-b q3_0", "'q3_0'"},
      {"--prompts " + good + " -n 0", "--n-predict 0"},
      {"--prompts " + good + " -c 3 -n 8", "exceed -c 3"},
      {"--prompts " + good + " --model-b " + tmp_path("ab-none.gguf"), "ab-none.gguf"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli("eval ab -m " + m + " -t 1 " + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("sustain: error:"), std::string::npos) << r.err;
  }
  // The invalid UTF-8 message names the byte offset as well as the line.
  const CliResult u = run_cli("eval ab -m " + m + " --prompts " + tmp_path("ab-utf8.txt"));
  EXPECT_NE(u.err.find("UTF-8"), std::string::npos) << u.err;
}

}  // namespace
}  // namespace sustain::test

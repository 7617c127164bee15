// The official `openai` npm client against `sustain serve`: completions,
// chat and streaming (openai_client.mjs under node). Skipped, not passed,
// when node or the package is missing (scripts/setup_npm.sh installs it).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "server/serve_process.h"

namespace sustain::test {
namespace {

using nlohmann::json;

const std::string kDir = SUSTAIN_SERVER_TEST_DIR;

std::optional<std::string> run(const std::string& cmd, int* code) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(ServerNpm, OfficialOpenAiClient) {
  int code = 0;
  if (run("command -v node >/dev/null 2>&1", &code); code != 0)
    GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(kDir + "/node_modules/openai/package.json"))
    GTEST_SKIP() << "npm package openai is not installed (scripts/setup_npm.sh)";
  SUSTAIN_START_SERVER(srv, "-c 512 -np 4 --api-key test-key");
  const std::string log = tmp_path("openai_client_stderr.txt");
  auto out = run("cd '" + kDir + "' && node openai_client.mjs http://127.0.0.1:" +
                     std::to_string(srv->port()) + "/v1 test-key 2>" + log,
                 &code);
  ASSERT_TRUE(out.has_value());
  std::ifstream e(log);
  std::stringstream err;
  err << e.rdbuf();
  ASSERT_EQ(code, 0) << "openai_client.mjs failed:\n" << err.str() << "\nstdout: " << *out;
  const json r = json::parse(*out);
  // What the script saw through the client, checked here against plain HTTP.
  EXPECT_EQ(r["models"][0], "server_tiny_qwen3");
  EXPECT_EQ(r["completion"]["finish_reason"], "length");
  EXPECT_EQ(r["completion"]["completion_tokens"], 8);
  EXPECT_EQ(r["completion_stream"]["text"], r["completion"]["text"]);
  EXPECT_EQ(r["chat"]["finish_reason"], "length");
  EXPECT_EQ(r["chat_stream"]["text"], r["chat"]["text"]);
  EXPECT_EQ(r["chat_stream"]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(r["bad_request"]["status"], 400);
  EXPECT_NE(r["bad_request"]["message"].get<std::string>().find("temperature"), std::string::npos);
  EXPECT_EQ(r["unauthorized"]["status"], 401);

  auto c = srv->client();
  json body = {
      {"prompt", "Hello from npm"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  auto res = c.Post("/v1/completions", {{"Authorization", "Bearer test-key"}}, body.dump(),
                    "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], r["completion"]["text"]);
}

}  // namespace
}  // namespace sustain::test

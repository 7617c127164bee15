// Every malformed request over HTTP gets a 4xx with an OpenAI-style error
// body, and the server keeps serving: bad JSON, wrong types, empty prompts,
// a prompt longer than the context, max_tokens out of range, token ids
// outside the vocabulary, invalid UTF-8, sampling values out of range or NaN,
// stop strings, n, body and header sizes, templates that cannot render, and
// output cut inside a UTF-8 character.
#include <gtest/gtest.h>

#include <fstream>

#include "server/serve_process.h"

namespace sustain::test {
namespace {

using nlohmann::json;

struct Bad {
  const char* path;
  std::string body;
  int status;
  std::string needle;  // in error.message
};

TEST(ServerLimits, MalformedRequestsGet4xxWithErrorBodies) {
  SUSTAIN_START_SERVER(srv, "-c 256 -np 2");
  auto c = srv->client();
  const std::string long_prompt = [] {
    std::string p;
    for (int i = 0; i < 400; ++i) p += "word" + std::to_string(i) + " ";
    return p;
  }();
  const std::vector<Bad> cases = {
      {"/v1/completions", "not json", 400, "not valid JSON"},
      {"/v1/completions", "", 400, "empty"},
      {"/v1/completions", "[1]", 400, "must be a JSON object"},
      {"/v1/completions", R"({"prompt":7})", 400, "'prompt' must be"},
      {"/v1/completions", R"({"prompt":""})", 400, "'prompt' must not be empty"},
      {"/v1/chat/completions", R"({"messages":[]})", 400, "'messages' must not be empty"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":3}]})", 400,
       "messages[0].content"},
      {"/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "but the context holds 256"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":0})", 400,
       "'max_tokens' must be at least 1"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":100000})", 400,
       "'max_tokens' is 100000, but the prompt is"},
      {"/v1/completions", R"({"prompt":[1,2,999999]})", 400, "outside the vocabulary [0, "},
      {"/v1/completions", "{\"prompt\":\"a\xff\xfe\"}", 400, "not valid JSON"},
      {"/v1/completions", R"({"prompt":"x","temperature":NaN})", 400, "not valid JSON"},
      {"/v1/completions", R"({"prompt":"x","temperature":1e999})", 400,
       "number overflow parsing '1e999'"},
      {"/v1/completions", R"({"prompt":"x","temperature":-1})", 400, "'temperature' must be in"},
      {"/v1/completions", R"({"prompt":"x","top_p":7})", 400, "'top_p' must be in"},
      {"/v1/completions", R"({"prompt":"x","top_k":"a"})", 400, "'top_k' must be an integer"},
      {"/v1/completions", R"({"prompt":"x","stop":["a","b","c","d","e"]})", 400, "at most 4"},
      {"/v1/completions", json{{"prompt", "x"}, {"stop", std::string(300, 's')}}.dump(), 400,
       "at most 256"},
      {"/v1/completions", R"({"prompt":"x","n":100})", 400, "at most 8 choices"},
      {"/v1/completions", R"({"prompt":"x","logprobs":50})", 400, "'logprobs' must be in"},
  };
  for (const auto& b : cases) {
    auto r = c.Post(b.path, b.body, "application/json");
    ASSERT_TRUE(r) << b.body.substr(0, 200);
    EXPECT_EQ(r->status, b.status) << b.body.substr(0, 200) << " → " << r->body;
    const json j = json::parse(r->body);
    if (b.status >= 400) {
      ASSERT_TRUE(j.contains("error")) << r->body;
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
      const std::string msg = j["error"]["message"];
      EXPECT_NE(msg.find(b.needle), std::string::npos) << "message: " << msg;
    }
  }
  // Unknown routes and methods get error bodies too.
  auto r = c.Get("/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
  EXPECT_TRUE(srv->alive());
  r = c.Get("/health");
  EXPECT_EQ(r->status, 200);
}

TEST(ServerLimits, OversizedBodiesAndHeaders) {
  SUSTAIN_START_SERVER(srv, "-c 256");
  auto c = srv->client();
  // 413: a body over the 8 MiB limit.
  std::string big = R"({"prompt":")" + std::string(9u << 20, 'a') + R"("})";
  auto r = c.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("larger than"),
            std::string::npos);
  // 431: headers over 16 KiB (each line under httplib's own 8 KiB line limit).
  auto c2 = srv->client();
  httplib::Headers h;
  for (int i = 0; i < 6; ++i) h.emplace("X-Filler-" + std::to_string(i), std::string(4000, 'h'));
  r = c2.Post("/v1/completions", h, R"({"prompt":"x","max_tokens":1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("headers"),
            std::string::npos);
  auto c3 = srv->client();
  r = c3.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerLimits, TemplateThatCannotRenderIsA400) {
  const std::string tmpl = tmp_path("raise.jinja");
  std::ofstream(tmpl) << "{% for m in messages %}{% if m['role'] == 'tool' %}"
                         "{{ raise_exception('tool messages are not supported here') }}"
                         "{% endif %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  SUSTAIN_START_SERVER(srv, "-c 256 --chat-template-file " + tmpl);
  auto c = srv->client();
  auto r =
      c.Post("/v1/chat/completions",
             R"({"messages":[{"role":"tool","content":"x"}],"max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const std::string msg = json::parse(r->body)["error"]["message"];
  EXPECT_NE(msg.find("tool messages are not supported here"), std::string::npos) << msg;
  r = c.Post("/v1/chat/completions",
             R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST(ServerLimits, OutputCutInsideAUtf8CharacterIsStillValidJson) {
  SUSTAIN_START_SERVER(srv, "-c 256 -np 4");
  auto c = srv->client();
  // Random tokens of a byte-level BPE vocabulary end mid-character often;
  // every reply must still parse (nlohmann rejects invalid UTF-8).
  for (int seed = 0; seed < 40; ++seed) {
    json b = {{"prompt", "bytes"}, {"max_tokens", 1 + seed % 3}, {"temperature", 2.0},
              {"seed", seed},      {"ignore_eos", true},         {"logprobs", 3}};
    auto r = c.Post("/v1/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_NO_THROW((void)json::parse(r->body)) << seed;
    b["stream"] = true;
    SseResult s = post_sse(c, "/v1/completions", b);  // parses every event
    EXPECT_TRUE(s.done);
  }
}

}  // namespace
}  // namespace sustain::test

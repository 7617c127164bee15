// Structured output through the real server: response_format json_schema
// and json_object on chat (streaming and not) and a GBNF grammar on
// completions all return what was asked for, whatever the random weights;
// a bad schema, a bad regex, a grammar that does not parse and one no token
// can start are each a 400 that names the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "server/serve_process.h"
#include "tools/chat_templates.h"

namespace sustain::test {
namespace {

using nlohmann::json;

struct Reply {
  int status = -1;
  json body;
};

Reply post_json(httplib::Client& c, const std::string& path, const json& body) {
  Reply r;
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  if (!res) return r;
  r.status = res->status;
  r.body = json::parse(res->body);
  return r;
}

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false
})");

// The schema above, checked by hand.
void expect_valid(const std::string& text) {
  json v;
  ASSERT_NO_THROW(v = json::parse(text)) << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 3u) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int>(), 0);
  EXPECT_LE(v["age"].get<int>(), 120);
  ASSERT_TRUE(v.contains("tags") && v["tags"].is_array()) << text;
  EXPECT_LE(v["tags"].size(), 3u);
  for (const auto& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b" || t == "c") << text;
}

json chat_body(const json& response_format, float temperature) {
  return {{"messages", {{{"role", "user"}, {"content", "Describe a person as JSON."}}}},
          {"max_tokens", 400},
          {"temperature", temperature},
          {"seed", 7},
          {"n", 2},
          {"response_format", response_format}};
}

TEST(ServerStructured, JsonSchemaOnChatStreamingAndNot) {
  SUSTAIN_START_SERVER(srv, "-c 1024 -np 2");
  auto c = srv->client();
  const json rf = {{"type", "json_schema"},
                   {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", kSchema}}}};
  for (float temp : {0.0f, 1.0f}) {
    Reply r = post_json(c, "/v1/chat/completions", chat_body(rf, temp));
    ASSERT_EQ(r.status, 200) << r.body.dump();
    ASSERT_EQ(r.body["choices"].size(), 2u);
    for (const auto& ch : r.body["choices"]) {
      EXPECT_EQ(ch["finish_reason"], "stop") << ch.dump();
      expect_valid(ch["message"]["content"].get<std::string>());
    }
  }
  json body = chat_body(rf, 1.0f);
  body["stream"] = true;
  SseResult s = post_sse(c, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  std::string text[2];
  for (const auto& e : s.events)
    for (const auto& ch : e.value("choices", json::array()))
      if (ch["delta"].contains("content"))
        text[ch["index"].get<int>()] += ch["delta"]["content"].get<std::string>();
  expect_valid(text[0]);
  expect_valid(text[1]);

  Reply o = post_json(c, "/v1/chat/completions", chat_body({{"type", "json_object"}}, 1.0f));
  ASSERT_EQ(o.status, 200) << o.body.dump();
  for (const auto& ch : o.body["choices"]) {
    const std::string t = ch["message"]["content"];
    if (ch["finish_reason"] == "stop") {
      json v;
      ASSERT_NO_THROW(v = json::parse(t)) << t;
      EXPECT_TRUE(v.is_object());
    } else {
      EXPECT_EQ(t.substr(0, 1), "{");  // any object may nest past max_tokens
    }
  }
}

TEST(ServerStructured, GrammarOnCompletions) {
  SUSTAIN_START_SERVER(srv, "-c 512");
  auto c = srv->client();
  json body = {{"prompt", "Answer:"},
               {"max_tokens", 20},
               {"temperature", 1.0},
               {"n", 4},
               {"grammar", "root ::= ( \"yes\" | \"no\" | \"maybe\" ) \".\""}};
  Reply r = post_json(c, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  for (const auto& ch : r.body["choices"]) {
    const std::string t = ch["text"];
    EXPECT_TRUE(t == "yes." || t == "no." || t == "maybe.") << t;
    EXPECT_EQ(ch["finish_reason"], "stop");
  }
}

TEST(ServerStructured, BadConstraintsAre400NamingTheProblem) {
  SUSTAIN_START_SERVER(srv, "-c 512");
  auto c = srv->client();
  auto expect_400 = [&](const json& body, const std::string& path, const std::string& needle,
                        const std::string& param = "") {
    Reply r = post_json(c, path, body);
    ASSERT_EQ(r.status, 400) << body.dump() << " → " << r.body.dump();
    EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(needle), std::string::npos)
        << r.body.dump();
    if (!param.empty()) {
      EXPECT_EQ(r.body["error"]["param"], param);
    }
  };
  json chat = chat_body(json(), 0.0f);
  chat["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "x"}, {"schema", {{"type", "integer"}, {"multipleOf", 5}}}}}};
  expect_400(chat, "/v1/chat/completions", "keyword 'multipleOf' is not supported");
  chat["response_format"]["json_schema"]["schema"] = {{"type", "string"}, {"pattern", "(ab"}};
  expect_400(chat, "/v1/chat/completions", "pattern at offset 3: missing ')'");
  json comp = {{"prompt", "x"}, {"max_tokens", 5}, {"grammar", "root ::= \"a\" | | ("}};
  expect_400(comp, "/v1/completions", "grammar: line 1, column");
  comp["grammar"] = "root ::= [^\\x00-\\U0010FFFF]";
  expect_400(comp, "/v1/completions", "no token of this model's vocabulary can start", "grammar");
  EXPECT_TRUE(srv->alive());
  // And it still serves a constrained request afterwards.
  comp["grammar"] = "root ::= \"ok\"";
  Reply ok = post_json(c, "/v1/completions", comp);
  ASSERT_EQ(ok.status, 200) << ok.body.dump();
  EXPECT_EQ(ok.body["choices"][0]["text"], "ok");
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "minLength": 1, "maxLength": 12},
     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
   "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "noop", "parameters": {"type": "object",
   "properties": {}}}}])");

void expect_valid_call(const json& call) {
  ASSERT_EQ(call["type"], "function") << call.dump();
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  const std::string name = call["function"]["name"];
  json args;
  ASSERT_NO_THROW(args = json::parse(call["function"]["arguments"].get<std::string>()))
      << call.dump();
  ASSERT_TRUE(args.is_object()) << call.dump();
  if (name == "noop") {
    EXPECT_TRUE(args.empty()) << call.dump();
    return;
  }
  ASSERT_EQ(name, "get_weather");
  ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << call.dump();
  for (const auto& [k, v] : args.items()) {
    EXPECT_TRUE(k == "city" || k == "days") << call.dump();
    if (k == "days") {
      ASSERT_TRUE(v.is_number_integer());
      EXPECT_GE(v.get<int>(), 1);
      EXPECT_LE(v.get<int>(), 7);
    }
  }
}

// tool_choice forcing a call returns message.tool_calls (and streams
// delta.tool_calls) with arguments valid for the function's schema.
void check_forced_tool_calls(ServeProcess& srv) {
  auto c = srv.client();
  json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
               {"tools", kTools},
               {"max_tokens", 200},
               {"temperature", 1.0},
               {"seed", 3},
               {"n", 3}};
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    body["tool_choice"] = choice;
    Reply r = post_json(c, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    for (const auto& ch : r.body["choices"]) {
      EXPECT_EQ(ch["finish_reason"], "tool_calls") << ch.dump();
      ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u) << ch.dump();
      EXPECT_TRUE(ch["message"]["content"].is_null()) << ch.dump();
      expect_valid_call(ch["message"]["tool_calls"][0]);
      if (choice.is_object()) {
        EXPECT_EQ(ch["message"]["tool_calls"][0]["function"]["name"], "get_weather");
      }
    }
  }
  body["stream"] = true;
  SseResult s = post_sse(c, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  int calls = 0, finishes = 0;
  for (const auto& e : s.events)
    for (const auto& ch : e.value("choices", json::array())) {
      if (ch["delta"].contains("tool_calls")) {
        for (const auto& call : ch["delta"]["tool_calls"]) {
          EXPECT_EQ(call["index"], 0);
          expect_valid_call(call);
          ++calls;
        }
      }
      if (ch["delta"].contains("content")) {
        EXPECT_EQ(ch["delta"]["content"], "") << "a forced call streams no content";
      }
      if (ch["finish_reason"] == "tool_calls") ++finishes;
    }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(finishes, 3);
  // tool_choice auto: whatever the model writes, streaming it gives the same
  // content (held back only where a call might start) as the whole reply.
  body["tool_choice"] = "auto";
  body["temperature"] = 0;
  body["n"] = 1;
  body["max_tokens"] = 40;
  SseResult as = post_sse(c, "/v1/chat/completions", body);
  body["stream"] = false;
  Reply ab = post_json(c, "/v1/chat/completions", body);
  ASSERT_EQ(ab.status, 200);
  std::string streamed;
  for (const auto& e : as.events)
    for (const auto& ch : e.value("choices", json::array()))
      if (ch["delta"].contains("content")) streamed += ch["delta"]["content"].get<std::string>();
  const json& msg = ab.body["choices"][0]["message"];
  if (!msg.contains("tool_calls")) {
    EXPECT_EQ(streamed, msg["content"].get<std::string>());
  }
  body["n"] = 3;
  // tool_choice none: no calls are read, the text is content.
  body["stream"] = false;
  body["tool_choice"] = "none";
  body["max_tokens"] = 8;
  Reply none = post_json(c, "/v1/chat/completions", body);
  ASSERT_EQ(none.status, 200);
  EXPECT_FALSE(none.body["choices"][0]["message"].contains("tool_calls"));
}

TEST(ServerStructured, ToolCallsQwenTemplate) {
  SUSTAIN_START_SERVER(srv, "-c 2048 -np 3");  // tiny-qwen3 carries Qwen3's template
  check_forced_tool_calls(*srv);
}

TEST(ServerStructured, ToolCallsLlama3Template) {
  const std::string tmpl = tmp_path("llama31_tools.jinja");
  std::ofstream(tmpl) << tools::kChatTemplateLlama31;
  SUSTAIN_START_SERVER(srv, "-c 2048 -np 3 --chat-template-file " + tmpl);
  check_forced_tool_calls(*srv);
  // A template without a known call format cannot force a call.
  const std::string plain = tmp_path("plain.jinja");
  std::ofstream(plain) << "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  SUSTAIN_START_SERVER(p, "-c 512 --chat-template-file " + plain);
  auto c = p->client();
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"tools", kTools},
               {"tool_choice", "required"}};
  Reply r = post_json(c, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 400) << r.body.dump();
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("format this server does not know"),
            std::string::npos);
}

}  // namespace
}  // namespace sustain::test

// Tool calls without a socket: which templates use which call format,
// tool_choice validation, the forced-call grammar, and reading calls back
// out of a reply (finished and streaming).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "grammar/matcher.h"
#include "server/request.h"
#include "server/tool_call_stream.h"
#include "server/tool_calls.h"
#include "test_util.h"
#include "tools/chat_templates.h"

namespace sustain::server {
namespace {

using nlohmann::json;

const char* kTools = R"("tools": [
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer",
    "minimum": 1, "maximum": 7}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "noop"}}])";

Expected<CompletionRequest> chat(const std::string& extra) {
  return parse_request(
      R"({"messages": [{"role": "user", "content": "hi"}], )" + std::string(kTools) + extra + "}",
      Endpoint::kChat, RequestLimits{});
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::Matcher m(g);
  return m.advance(text) && m.state().can_end;
}

TEST(ToolCalls, TemplateFormats) {
  EXPECT_EQ(detect_tool_syntax(tools::kChatTemplateQwen3), ToolSyntax::kHermes);
  EXPECT_EQ(detect_tool_syntax(tools::kChatTemplateQwen25), ToolSyntax::kHermes);
  EXPECT_EQ(detect_tool_syntax(tools::kChatTemplateLlama31), ToolSyntax::kLlama3);
  EXPECT_EQ(detect_tool_syntax("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolSyntax::kNone);
  EXPECT_EQ(detect_tool_syntax("{{- '[TOOL_CALLS][' }}{{ call|tojson }}"), ToolSyntax::kMistral);
  // Mistral Small 3.2's name-then-[ARGS] format is not read.
  EXPECT_EQ(detect_tool_syntax("{{- '[TOOL_CALLS]' + name + '[ARGS]' + args }}"),
            ToolSyntax::kNone);
}

// The published templates in the reference data, where it is present.
TEST(ToolCalls, ReferenceTemplateFormats) {
  SUSTAIN_REQUIRE_REF();
  const std::string base = test::ref_path("templates/");
  auto read = [&](const std::string& f) {
    std::ifstream in(base + f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(detect_tool_syntax(read("mistralai-Mistral-Nemo-Instruct-2407.jinja")),
            ToolSyntax::kMistral);
  EXPECT_EQ(detect_tool_syntax(read("Mistral-Small-3.2-24B-Instruct-2506.jinja")),
            ToolSyntax::kNone);
  EXPECT_EQ(detect_tool_syntax(read("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")),
            ToolSyntax::kHermes);
}

TEST(ToolCalls, ToolChoiceValidation) {
  auto a = chat("");
  ASSERT_TRUE(a.has_value()) << a.status().message();
  EXPECT_EQ(a->tool_choice.mode, ToolChoice::kAuto);
  auto n = chat(R"(, "tool_choice": {"type": "function", "function": {"name": "noop"}})");
  ASSERT_TRUE(n.has_value()) << n.status().message();
  EXPECT_EQ(n->tool_choice.mode, ToolChoice::kNamed);
  EXPECT_EQ(n->tool_choice.name, "noop");
  auto bad = [](const std::string& extra, const std::string& needle) {
    auto r = chat(extra);
    ASSERT_FALSE(r.has_value()) << extra;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad(R"(, "tool_choice": "sometimes")", "\"sometimes\"");
  bad(R"(, "tool_choice": {"type": "function", "function": {"name": "other"}})",
      "not one of the 'tools'");
  bad(R"(, "tool_choice": 3)", "must be a string or an object");
  bad(R"(, "parallel_tool_calls": "yes")", "'parallel_tool_calls' must be a boolean");
  auto single = chat(R"(, "parallel_tool_calls": false)");
  ASSERT_TRUE(single.has_value());
  EXPECT_FALSE(single->tool_choice.parallel);
  EXPECT_TRUE(a->tool_choice.parallel);
  auto no_tools = parse_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})",
      Endpoint::kChat, RequestLimits{});
  ASSERT_FALSE(no_tools.has_value());
  EXPECT_NE(no_tools.status().message().find("needs a non-empty 'tools'"), std::string::npos);
  auto unnamed = parse_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
          "function": {}}]})",
      Endpoint::kChat, RequestLimits{});
  ASSERT_FALSE(unnamed.has_value());
  EXPECT_NE(unnamed.status().message().find("tools[0].function.name"), std::string::npos);
}

TEST(ToolCalls, ForcedCallGrammar) {
  auto r = chat(R"(, "tool_choice": "required")");
  ASSERT_TRUE(r.has_value());
  auto hermes = forced_call_grammar(ToolSyntax::kHermes, r->tools, r->tool_choice);
  ASSERT_TRUE(hermes.has_value()) << hermes.status().message();
  EXPECT_TRUE(accepts(*hermes,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Oslo\", \"days\": 3}}\n</tool_call>"));
  EXPECT_TRUE(
      accepts(*hermes, "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*hermes,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"days\": 3}}\n</tool_call>"));  // city is required
  EXPECT_FALSE(accepts(*hermes, "{\"name\": \"noop\", \"arguments\": {}}"));
  auto named = chat(R"(, "tool_choice": {"type": "function", "function": {"name": "noop"}})");
  auto llama = forced_call_grammar(ToolSyntax::kLlama3, named->tools, named->tool_choice);
  ASSERT_TRUE(llama.has_value()) << llama.status().message();
  EXPECT_TRUE(accepts(*llama, R"({"name": "noop", "parameters": {}})"));
  EXPECT_FALSE(accepts(*llama, R"({"name": "get_weather", "parameters": {"city": "x"}})"));
  // Refs inside a function's parameters still resolve once embedded.
  json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"p": {"$ref": "#/$defs/pt"}}, "required": ["p"],
      "$defs": {"pt": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}}}}}])");
  ToolChoice req;
  req.mode = ToolChoice::kRequired;
  auto refs = forced_call_grammar(ToolSyntax::kLlama3, tools, req);
  ASSERT_TRUE(refs.has_value()) << refs.status().message();
  EXPECT_TRUE(accepts(*refs, R"({"name": "f", "parameters": {"p": [1, 2]}})"));
  json bad = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"p": {"type": "integer", "multipleOf": 2}}}}}])");
  auto err = forced_call_grammar(ToolSyntax::kHermes, bad, req);
  ASSERT_FALSE(err.has_value());
  EXPECT_NE(err.status().message().find("'multipleOf'"), std::string::npos);
}

TEST(ToolCalls, ParallelForcedCalls) {
  auto req = chat(R"(, "tool_choice": "required")");
  ASSERT_TRUE(req.has_value());
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Oslo"}})";
  const std::string noop = R"({"name": "noop", "arguments": {}})";
  auto hermes = forced_call_grammar(ToolSyntax::kHermes, req->tools, req->tool_choice);
  ASSERT_TRUE(hermes.has_value()) << hermes.status().message();
  const std::string two =
      "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + noop + "\n</tool_call>";
  EXPECT_TRUE(accepts(*hermes, two));
  auto mistral = forced_call_grammar(ToolSyntax::kMistral, req->tools, req->tool_choice);
  ASSERT_TRUE(mistral.has_value()) << mistral.status().message();
  EXPECT_TRUE(accepts(*mistral, "[" + weather + "]"));
  EXPECT_TRUE(accepts(*mistral, "[" + weather + ", " + noop + "," + noop + "]"));
  EXPECT_FALSE(accepts(*mistral, "[]"));
  EXPECT_FALSE(accepts(*mistral, weather));
  // A named function, or parallel_tool_calls false: exactly one call.
  auto named = chat(R"(, "tool_choice": {"type": "function", "function": {"name": "noop"}})");
  auto one = forced_call_grammar(ToolSyntax::kMistral, named->tools, named->tool_choice);
  ASSERT_TRUE(one.has_value());
  EXPECT_TRUE(accepts(*one, "[" + noop + "]"));
  EXPECT_FALSE(accepts(*one, "[" + noop + ", " + noop + "]"));
  auto serial = chat(R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  auto h1 = forced_call_grammar(ToolSyntax::kHermes, serial->tools, serial->tool_choice);
  ASSERT_TRUE(h1.has_value());
  EXPECT_TRUE(accepts(*h1, "<tool_call>\n" + noop + "\n</tool_call>"));
  EXPECT_FALSE(accepts(*h1, two));
  // Llama 3.x: one call (its template cannot render two in a turn).
  auto l = forced_call_grammar(ToolSyntax::kLlama3, req->tools, req->tool_choice);
  ASSERT_TRUE(l.has_value());
  EXPECT_TRUE(accepts(*l, R"({"name": "noop", "parameters": {}})"));
  EXPECT_FALSE(accepts(*l, R"([{"name": "noop", "parameters": {}}])"));
}

TEST(ToolCalls, ParseMistralReplies) {
  auto m = parse_tool_calls(ToolSyntax::kMistral,
                            "Sure.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
                            "{\"city\": \"Oslo\", \"days\": 2}, \"id\": \"a1b2c3d4e\"},\n "
                            "{\"name\": \"noop\", \"arguments\": {}}]");
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].name, "get_weather");
  EXPECT_EQ(m.calls[0].arguments, R"({"city":"Oslo","days":2})");
  EXPECT_EQ(m.calls[1].name, "noop");
  EXPECT_EQ(m.calls[1].arguments, "{}");
  EXPECT_EQ(m.content, "Sure.");
  // One object after the marker is one call; arguments given as a string
  // are the JSON text it holds.
  auto o = parse_tool_calls(ToolSyntax::kMistral,
                            R"([TOOL_CALLS]{"name": "f", "arguments": "{\"a\": 1}"})");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].arguments, R"({"a": 1})");
  // Not calls: no marker, a broken array, an empty one, an element that is not a call.
  for (const std::string t :
       {std::string("[{\"name\": \"f\", \"arguments\": {}}]"),
        std::string("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}"),
        std::string("[TOOL_CALLS][]"), std::string("[TOOL_CALLS][{\"name\": 3}]"),
        std::string("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, 7]")}) {
    auto r = parse_tool_calls(ToolSyntax::kMistral, t);
    EXPECT_TRUE(r.calls.empty()) << t;
    EXPECT_EQ(r.content, t);
  }
  // Llama 3: an array of call objects is read too.
  auto l = parse_tool_calls(
      ToolSyntax::kLlama3,
      R"([{"name": "f", "parameters": {}}, {"name": "g", "parameters": {"x": [1, 2]}}])");
  ASSERT_EQ(l.calls.size(), 2u);
  EXPECT_EQ(l.calls[1].arguments, R"({"x":[1,2]})");
  // parallel_tool_calls false keeps the first call only.
  EXPECT_EQ(read_reply(ToolSyntax::kMistral, "[TOOL_CALLS]", R"([{"name": "f", "arguments": {}},
      {"name": "g", "arguments": {}}])",
                       false)
                .calls.size(),
            1u);
  const std::string id = new_call_id(ToolSyntax::kMistral);
  EXPECT_EQ(id.size(), 9u);
  for (char c : id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
  EXPECT_EQ(new_call_id(ToolSyntax::kHermes).rfind("call_", 0), 0u);
}

// Streams `reply` through a ToolCallStream in pieces of `step` bytes and
// checks what OpenAI's clients rely on: each call announced once, first,
// with its id, type and name and empty arguments; then pieces of arguments
// that add up to what the whole reply returns; the content the same.
void check_stream(ToolSyntax syntax, const std::string& prefix, const std::string& reply,
                  size_t step, size_t expect_calls) {
  SCOPED_TRACE(reply + " in steps of " + std::to_string(step));
  ToolCallStream ts(syntax, prefix, true);
  std::string content;
  std::vector<std::string> names, args;
  int deltas = 0;
  for (size_t at = 0; at < reply.size() || at == 0; at += step) {
    const bool end = at + step >= reply.size();
    ToolCallStream::Delta d = ts.push(std::string_view(reply).substr(at, step), end);
    content += d.content;
    for (const auto& c : d.calls) {
      const size_t i = c["index"].get<size_t>();
      if (i == names.size()) {
        ASSERT_TRUE(c.contains("id")) << c.dump();
        EXPECT_EQ(c["type"], "function");
        names.push_back(c["function"]["name"]);
        EXPECT_EQ(c["function"]["arguments"], "");
        args.emplace_back();
      } else {
        ASSERT_LT(i, names.size()) << c.dump();
        EXPECT_FALSE(c.contains("id")) << c.dump();
        EXPECT_FALSE(c["function"].contains("name")) << c.dump();
      }
      args[i] += c["function"]["arguments"].get<std::string>();
      ++deltas;
    }
    if (end) break;
  }
  const ToolReply whole = read_reply(syntax, prefix, reply, true);
  ASSERT_EQ(whole.calls.size(), expect_calls);
  ASSERT_EQ(names.size(), expect_calls);
  for (size_t i = 0; i < expect_calls; ++i) {
    EXPECT_EQ(names[i], whole.calls[i].name);
    EXPECT_EQ(args[i], whole.calls[i].arguments);
    EXPECT_NO_THROW(static_cast<void>(json::parse(args[i]))) << args[i];
  }
  EXPECT_EQ(content, whole.content);
  EXPECT_TRUE(ts.has_calls() == (expect_calls > 0));
  // Arguments are streamed piece by piece, not all at the end.
  if (expect_calls > 0 && step == 1) EXPECT_GT(deltas, static_cast<int>(2 * expect_calls));
}

TEST(ToolCalls, StreamedArgumentsAddUpToTheReply) {
  const std::string hermes =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Os lo\", "
      "\"q\": \"a\\\" }\"}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": "
      "\"noop\"}\n</tool_call>";
  const std::string mistral =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": "
      "[1, 2]}}, {\"name\": \"noop\", \"arguments\": {}}]";
  const std::string forced = R"([{"name": "noop", "arguments": { "a" : 1 }}])";
  const std::string llama = R"({"name": "f", "parameters": {"x": {"y": "}"}}})";
  for (size_t step : {1, 3, 7, 1000}) {
    check_stream(ToolSyntax::kHermes, "", hermes, step, 2);
    check_stream(ToolSyntax::kMistral, "", mistral, step, 2);
    check_stream(ToolSyntax::kMistral, "[TOOL_CALLS]", forced, step, 1);
    check_stream(ToolSyntax::kLlama3, "", llama, step, 1);
    check_stream(ToolSyntax::kHermes, "", "No call <tool here>.", step, 0);
    check_stream(ToolSyntax::kMistral, "", "Plain [TOOL text.", step, 0);
  }
  // parallel_tool_calls false: the second call is never sent.
  ToolCallStream one(ToolSyntax::kMistral, "", false);
  auto d = one.push(mistral, true);
  for (const auto& c : d.calls) EXPECT_EQ(c["index"], 0) << d.calls.dump();
}

// Whatever a model writes: random replies over the characters that matter
// to the scanners, streamed in random pieces, never crash or hang, and the
// arguments sent for a call always extend what was sent before.
TEST(ToolCalls, RandomRepliesStreamSafely) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\",: \\nab";
  const std::vector<std::string> words = {
      "<tool_call>",    "</tool_call>", "[TOOL_CALLS]", "\"name\"", "\"arguments\"",
      "\"parameters\"", "\"f\"",        "{}",           "\\\""};
  for (ToolSyntax syntax : {ToolSyntax::kHermes, ToolSyntax::kLlama3, ToolSyntax::kMistral}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string reply;
      const int n = static_cast<int>(rng() % 40);
      for (int k = 0; k < n; ++k) {
        if (rng() % 3 == 0)
          reply += words[rng() % words.size()];
        else
          reply += alphabet[rng() % alphabet.size()];
      }
      ToolCallStream ts(syntax, "", true);
      std::map<size_t, std::string> args;
      for (size_t at = 0; at <= reply.size();) {
        const size_t step = 1 + rng() % 5;
        const bool end = at + step >= reply.size();
        auto d = ts.push(std::string_view(reply).substr(at, step), end);
        for (const auto& c : d.calls) {
          ASSERT_TRUE(c["function"]["arguments"].is_string()) << reply;
          args[c["index"].get<size_t>()] += c["function"]["arguments"].get<std::string>();
        }
        if (end) break;
        at += step;
      }
      const ToolReply whole = parse_tool_calls(syntax, reply);
      for (size_t i = 0; i < whole.calls.size() && args.count(i); ++i)
        if (!whole.calls[i].arguments.empty() && whole.calls[i].arguments[0] == '{') {
          EXPECT_EQ(args[i], whole.calls[i].arguments) << reply;
        }
    }
  }
}

TEST(ToolCalls, ParseReplies) {
  auto h = parse_tool_calls(ToolSyntax::kHermes,
                            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                            "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n"
                            "{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(h.calls[0].arguments), json::parse(R"({"city": "Oslo"})"));
  EXPECT_EQ(h.calls[1].arguments, "{}");
  EXPECT_EQ(h.content, "Let me check.\n");  // the line break between calls is not content
  auto broken = parse_tool_calls(ToolSyntax::kHermes, "<tool_call>\nnot json\n</tool_call> ok");
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "<tool_call>\nnot json\n</tool_call> ok");
  auto cut = parse_tool_calls(ToolSyntax::kHermes, "a <tool_call>\n{\"name\"");
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "a <tool_call>\n{\"name\"");
  auto l = parse_tool_calls(ToolSyntax::kLlama3, R"( {"name": "f", "parameters": {"x": 1}} )");
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(parse_tool_calls(ToolSyntax::kLlama3, "Hello {x}").content, "Hello {x}");
}

TEST(ToolCalls, StreamingHoldsBackWhatMayBeACall) {
  EXPECT_EQ(streamable_prefix(ToolSyntax::kHermes, "Hello"), 5u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kHermes, "Hello <tool"), 6u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kHermes, "Hello <"), 6u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kHermes, "a<tool_call>{\"x\""), 1u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kHermes, "a <b>"), 5u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kLlama3, "  "), 0u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kLlama3, " {\"name\""), 0u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kLlama3, "Sure"), 4u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kLlama3, " [{"), 0u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kMistral, "Hi [TOOL"), 3u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kMistral, "Hi [TOOL_CALLS][{"), 3u);
  EXPECT_EQ(streamable_prefix(ToolSyntax::kMistral, "Hi [b]"), 6u);
}

}  // namespace
}  // namespace sustain::server

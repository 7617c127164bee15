// Tool calls without a socket: which templates use which call format,
// tool_choice validation, the forced-call grammar, and reading calls back
// out of a reply (finished and streaming).
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/request.h"
#include "server/tool_calls.h"
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

TEST(ToolCalls, ParseReplies) {
  auto h = parse_tool_calls(ToolSyntax::kHermes,
                            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                            "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n"
                            "{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(h.calls[0].arguments), json::parse(R"({"city": "Oslo"})"));
  EXPECT_EQ(h.calls[1].arguments, "{}");
  EXPECT_EQ(h.content, "Let me check.\n\n");
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
}

}  // namespace
}  // namespace sustain::server

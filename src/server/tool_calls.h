// Tool calls on /v1/chat/completions: `tools` reach the chat template as
// before; this adds `tool_choice`, the grammar that forces a call (its
// arguments constrained by the function's JSON schema), and reading the
// model's calls back out of its text into `message.tool_calls`.
//
// The call format is the chat template's: Hermes / Qwen 2.5 / Qwen 3 write
//   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
// and Llama 3.x answers with the bare object {"name": ..., "parameters":
// {...}}. Which one a template uses is read from its text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/request.h"

namespace sustain::grammar {
struct Grammar;
}

namespace sustain::server {

enum class ToolSyntax { kNone, kHermes, kLlama3 };
ToolSyntax detect_tool_syntax(std::string_view template_source);

// Validates `tools` (each {"type": "function", "function": {"name", ...}})
// and `tool_choice` ("none", "auto", "required" or {"type": "function",
// "function": {"name"}} naming one of the tools) into r.tool_choice.
Status parse_tool_choice(const nlohmann::json& body, CompletionRequest& r);

// The grammar a forced call must follow (tool_choice "required" or a named
// function), built from the functions' parameter schemas.
Expected<std::shared_ptr<const grammar::Grammar>> forced_call_grammar(
    ToolSyntax syntax, const nlohmann::ordered_json& tools, const ToolChoice& choice);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as OpenAI sends it
};
struct ToolReply {
  std::string content;  // the text outside the calls, as written
  std::vector<ToolCall> calls;
};
// The calls in a finished reply; text that is not a well-formed call stays
// content.
ToolReply parse_tool_calls(ToolSyntax syntax, const std::string& text);

// How many bytes of a reply in progress can be streamed as content now:
// everything before a call begins (or might begin, with the bytes so far).
size_t streamable_prefix(ToolSyntax syntax, std::string_view text);

}  // namespace sustain::server

// Tool calls on /v1/chat/completions: `tools` reach the chat template as
// before; this adds `tool_choice`, the grammar that forces a call (its
// arguments constrained by the function's JSON schema), and reading the
// model's calls back out of its text into `message.tool_calls`.
//
// The call format is the chat template's: Hermes / Qwen 2.5 / Qwen 3 write
//   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
// (once per call), Llama 3.x answers with the bare object {"name": ...,
// "parameters": {...}}, and Mistral (v0.3, Nemo) with its [TOOL_CALLS]
// control token followed by a JSON array [{"name": ..., "arguments": {...}},
// ...]. Which one a template uses is read from its text.
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

enum class ToolSyntax { kNone, kHermes, kLlama3, kMistral };
ToolSyntax detect_tool_syntax(std::string_view template_source);

// Validates `tools` (each {"type": "function", "function": {"name", ...}})
// and `tool_choice` ("none", "auto", "required" or {"type": "function",
// "function": {"name"}} naming one of the tools) into r.tool_choice.
Status parse_tool_choice(const nlohmann::json& body, CompletionRequest& r);

// Mistral's control token that starts its calls.
inline constexpr std::string_view kMistralCallsToken = "[TOOL_CALLS]";

// The grammar a forced call must follow (tool_choice "required" or a named
// function), built from the functions' parameter schemas. "required" with
// parallel calls allowed takes one or more calls where the format can hold
// several (Hermes blocks, Mistral's array); a named function, or
// parallel_tool_calls false, exactly one; Llama 3.x always one (its template
// cannot render a turn with two). Mistral's grammar is the array alone: the
// server puts [TOOL_CALLS] at the end of the prompt, since a control token is
// never produced under a grammar.
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
// content. An object's `arguments` are the model's JSON text with the
// whitespace outside strings removed (so streamed pieces add up to the same
// text); a string value is taken as the JSON text it holds.
ToolReply parse_tool_calls(ToolSyntax syntax, const std::string& text);

// A call in a reply still being written: its name once that string is
// complete, and the arguments object's text so far (whitespace outside
// strings removed) when the value is an object.
struct PartialCall {
  std::string name;
  bool named = false;
  std::string arguments;
  bool streamable = false;  // the arguments value is an object
};
std::vector<PartialCall> partial_tool_calls(ToolSyntax syntax, std::string_view text);

// A new call id: "call_" and 16 hex digits, or for Mistral 9 letters and
// digits (its templates reject any other id when the call comes back).
std::string new_call_id(ToolSyntax syntax);

// How many bytes of a reply in progress can be streamed as content now:
// everything before a call begins (or might begin, with the bytes so far).
size_t streamable_prefix(ToolSyntax syntax, std::string_view text);

}  // namespace sustain::server

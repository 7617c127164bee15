#include "server/tool_calls.h"

#include <algorithm>

#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/schema.h"

namespace sustain::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

Status invalid(const std::string& field, const std::string& what) {
  return Status(Code::kInvalidArgument, fmt::format("'{}' {}", field, what));
}

// Local $refs of a schema moved to `base` inside a larger one.
void rebase_refs(ojson& s, const std::string& base) {
  if (s.is_object()) {
    for (auto& [k, v] : s.items()) {
      if (k == "$ref" && v.is_string()) {
        const std::string r = v.get<std::string>();
        if (r == "#") v = "#" + base;
        if (r.rfind("#/", 0) == 0) v = "#" + base + r.substr(1);
      } else {
        rebase_refs(v, base);
      }
    }
  } else if (s.is_array()) {
    for (auto& v : s) rebase_refs(v, base);
  }
}

std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(a, b - a + 1));
}

// {"name": string, key: object} as a call, or nothing.
bool read_call(const std::string& text, const char* key, const char* alt_key, ToolCall& out) {
  ojson v = ojson::parse(text, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return false;
  auto name = v.find("name");
  if (name == v.end() || !name->is_string()) return false;
  auto args = v.find(key);
  if (args == v.end()) args = v.find(alt_key);
  if (args == v.end()) return false;
  out.name = name->get<std::string>();
  out.arguments = args->is_string() ? args->get<std::string>() : args->dump();
  return true;
}

}  // namespace

ToolSyntax detect_tool_syntax(std::string_view t) {
  if (t.find(kOpen) != std::string_view::npos) return ToolSyntax::kHermes;
  if (t.find("\"parameters\": ") != std::string_view::npos &&
      t.find("<|start_header_id|>") != std::string_view::npos)
    return ToolSyntax::kLlama3;
  return ToolSyntax::kNone;
}

Status parse_tool_choice(const json& body, CompletionRequest& r) {
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && tools->is_array() && !tools->empty();
  std::vector<std::string> names;
  if (has_tools) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!t.is_object()) return invalid(at, "must be an object");
      auto type = t.find("type");
      if (type == t.end() || *type != "function")
        return invalid(at + ".type", "must be \"function\"");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return invalid(at + ".function", "must be an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
        return invalid(at + ".function.name", "must be a non-empty string");
      if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
        return invalid(at + ".function.parameters", "must be a JSON schema object");
      names.push_back(name->get<std::string>());
    }
  }
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null()) return Status::ok();
  if (!has_tools) return invalid("tool_choice", "needs a non-empty 'tools'");
  if (tc->is_string()) {
    const std::string& m = tc->get_ref<const std::string&>();
    if (m == "auto")
      r.tool_choice.mode = ToolChoice::kAuto;
    else if (m == "none")
      r.tool_choice.mode = ToolChoice::kNone;
    else if (m == "required")
      r.tool_choice.mode = ToolChoice::kRequired;
    else
      return invalid("tool_choice", fmt::format("is \"{}\"; it must be \"auto\", \"none\", "
                                                "\"required\" or a function",
                                                m.substr(0, 64)));
    return Status::ok();
  }
  if (!tc->is_object()) return invalid("tool_choice", "must be a string or an object");
  auto fn = tc->find("function");
  if (fn == tc->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
    return invalid("tool_choice.function.name", "must be a string");
  const std::string name = (*fn)["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), name) == names.end())
    return invalid("tool_choice.function.name",
                   fmt::format("is \"{}\", which is not one of the 'tools'", name.substr(0, 64)));
  r.tool_choice.mode = ToolChoice::kNamed;
  r.tool_choice.name = name;
  return Status::ok();
}

Expected<std::shared_ptr<const grammar::Grammar>> forced_call_grammar(ToolSyntax syntax,
                                                                      const ojson& tools,
                                                                      const ToolChoice& choice) {
  const char* key = syntax == ToolSyntax::kLlama3 ? "parameters" : "arguments";
  std::vector<ojson> calls;
  for (const auto& t : tools) {
    const ojson& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (choice.mode == ToolChoice::kNamed && name != choice.name) continue;
    ojson args = fn.contains("parameters") && fn["parameters"].is_object()
                     ? fn["parameters"]
                     : ojson{{"type", "object"}};
    ojson call = {{"type", "object"},
                  {"properties", {{"name", {{"const", name}}}, {key, args}}},
                  {"required", ojson::array({"name", key})},
                  {"additionalProperties", false}};
    calls.push_back(std::move(call));
  }
  ojson schema;
  if (calls.size() == 1) {
    schema = std::move(calls[0]);
    rebase_refs(schema["properties"][key], std::string("/properties/") + key);
  } else {
    schema = {{"anyOf", ojson::array()}};
    for (size_t i = 0; i < calls.size(); ++i) {
      rebase_refs(calls[i]["properties"][key], fmt::format("/anyOf/{}/properties/{}", i, key));
      schema["anyOf"].push_back(std::move(calls[i]));
    }
  }
  auto text = grammar::schema_to_gbnf(schema);
  if (!text)
    return Status(
        Code::kInvalidArgument,
        "'tools' has a function whose parameters cannot be enforced: " + text.status().message());
  // The converter's first line is "root ::= <call>"; wrap the call in the
  // template's markers.
  std::string g = *text;
  const size_t nl = g.find('\n');
  const std::string call = g.substr(9, nl - 9);
  if (syntax == ToolSyntax::kHermes)
    g = "root ::= \"<tool_call>\\n\" " + call + " \"\\n</tool_call>\"" + g.substr(nl);
  auto parsed = grammar::parse_gbnf(g);
  if (!parsed) return parsed.status();
  return std::make_shared<const grammar::Grammar>(std::move(*parsed));
}

ToolReply parse_tool_calls(ToolSyntax syntax, const std::string& text) {
  ToolReply out;
  if (syntax == ToolSyntax::kLlama3) {
    ToolCall c;
    const std::string t = trim(text);
    if (!t.empty() && t[0] == '{' && read_call(t, "parameters", "arguments", c)) {
      out.calls.push_back(std::move(c));
    } else {
      out.content = text;
    }
    return out;
  }
  if (syntax != ToolSyntax::kHermes) {
    out.content = text;
    return out;
  }
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string::npos) break;
    const size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string::npos) break;
    ToolCall c;
    const std::string inner =
        trim(std::string_view(text).substr(open + kOpen.size(), close - open - kOpen.size()));
    out.content += text.substr(at, open - at);
    if (read_call(inner, "arguments", "parameters", c)) {
      out.calls.push_back(std::move(c));
    } else {
      out.content += text.substr(open, close + kClose.size() - open);
    }
    at = close + kClose.size();
  }
  out.content += text.substr(std::min(at, text.size()));
  return out;
}

size_t streamable_prefix(ToolSyntax syntax, std::string_view text) {
  if (syntax == ToolSyntax::kLlama3) {
    // A reply that starts with '{' may be a call: hold it all back.
    const size_t a = text.find_first_not_of(" \t\r\n");
    if (a == std::string_view::npos || text[a] == '{') return 0;
    return text.size();
  }
  if (syntax != ToolSyntax::kHermes) return text.size();
  const size_t open = text.find(kOpen);
  if (open != std::string_view::npos) return open;
  // Hold back a tail that could be the start of the marker.
  for (size_t k = std::min(text.size(), kOpen.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == kOpen.substr(0, k)) return text.size() - k;
  return text.size();
}

}  // namespace sustain::server

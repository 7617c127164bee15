#include "server/tool_calls.h"

#include <algorithm>
#include <random>

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

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The end of the JSON value that starts at s[at], or npos when the text ends
// first. Only finds the extent (strings, nesting); the JSON parser checks
// the rest.
size_t value_end(std::string_view s, size_t at) {
  if (at >= s.size()) return std::string_view::npos;
  if (s[at] == '"' || s[at] == '{' || s[at] == '[') {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = at; i < s.size(); ++i) {
      const char c = s[i];
      if (in_string) {
        if (escaped)
          escaped = false;
        else if (c == '\\')
          escaped = true;
        else if (c == '"') {
          in_string = false;
          if (depth == 0) return i + 1;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return std::string_view::npos;
  }
  // A number or a literal runs to the next delimiter.
  for (size_t i = at; i < s.size(); ++i)
    if (is_space(s[i]) || s[i] == ',' || s[i] == '}' || s[i] == ']') return i;
  return std::string_view::npos;
}

// JSON text without the whitespace outside strings. Deciding each byte
// needs only the bytes before it, so the result for a prefix is a prefix of
// the result for the whole text: streamed pieces add up to the final text.
std::string without_space(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (is_space(c)) {
      continue;
    }
    out += c;
  }
  return out;
}

// Reads the object at s[at] (which is '{') as far as the text goes: its
// "name" once complete and its arguments (under `key` or `alt_key`). Returns
// the end of the object, or npos when it is incomplete or not a call's shape.
size_t scan_call(std::string_view s, size_t at, const char* key, const char* alt_key,
                 PartialCall& c) {
  size_t i = at + 1;
  for (;;) {
    i = skip_space(s, i);
    if (i >= s.size()) return std::string_view::npos;
    if (s[i] == '}') return i + 1;
    if (s[i] == ',') {
      ++i;
      continue;
    }
    if (s[i] != '"') return std::string_view::npos;
    const size_t kend = value_end(s, i);
    if (kend == std::string_view::npos) return kend;
    const json k = json::parse(s.substr(i, kend - i), nullptr, false);
    if (!k.is_string()) return std::string_view::npos;
    i = skip_space(s, kend);
    if (i >= s.size() || s[i] != ':') return std::string_view::npos;
    i = skip_space(s, i + 1);
    if (i >= s.size()) return std::string_view::npos;
    const size_t vend = value_end(s, i);
    const std::string& name = k.get_ref<const std::string&>();
    if (name == "name") {
      if (vend == std::string_view::npos) return vend;
      const json v = json::parse(s.substr(i, vend - i), nullptr, false);
      if (v.is_string()) {
        c.name = v.get<std::string>();
        c.named = true;
      }
    } else if (name == key || name == alt_key) {
      c.streamable = s[i] == '{';
      if (c.streamable)
        c.arguments =
            without_space(s.substr(i, vend == std::string_view::npos ? s.npos : vend - i));
    }
    if (vend == std::string_view::npos) return vend;
    i = vend;
  }
}

// Text of a reply outside its calls: all of it before the first call,
// after that only pieces that are not whitespace (the line breaks between
// and after calls are not content).
void add_content(ToolReply& out, std::string_view text, size_t from, size_t to) {
  const std::string_view piece = text.substr(from, to - from);
  if (out.calls.empty() || skip_space(piece, 0) < piece.size()) out.content += piece;
}

const char* args_key(ToolSyntax syntax) {
  return syntax == ToolSyntax::kLlama3 ? "parameters" : "arguments";
}
const char* alt_args_key(ToolSyntax syntax) {
  return syntax == ToolSyntax::kLlama3 ? "arguments" : "parameters";
}

// The object at the start of `text` as a call: {"name": string, key: value},
// or nothing. Arguments as ToolReply says.
bool read_call(std::string_view text, ToolSyntax syntax, ToolCall& out) {
  ojson v = ojson::parse(text, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return false;
  auto name = v.find("name");
  if (name == v.end() || !name->is_string()) return false;
  auto args = v.find(args_key(syntax));
  if (args == v.end()) args = v.find(alt_args_key(syntax));
  if (args == v.end()) return false;
  out.name = name->get<std::string>();
  if (args->is_string()) {
    out.arguments = args->get<std::string>();
    return true;
  }
  PartialCall p;
  const size_t a = skip_space(text, 0);
  if (args->is_object() &&
      scan_call(text, a, args_key(syntax), alt_args_key(syntax), p) != std::string_view::npos &&
      p.streamable) {
    out.arguments = std::move(p.arguments);
  } else {
    out.arguments = args->dump();
  }
  return true;
}

// Mistral: the calls in the array (or the one object) that follows the
// marker at s[at]; the end of that value, or npos when it is not calls.
size_t read_call_list(std::string_view s, size_t at, ToolSyntax syntax,
                      std::vector<ToolCall>& calls) {
  const size_t end = value_end(s, at);
  if (end == std::string_view::npos) return end;
  const std::string_view v = s.substr(at, end - at);
  if (v[0] == '{') {
    ToolCall c;
    if (!read_call(v, syntax, c)) return std::string_view::npos;
    calls.push_back(std::move(c));
    return end;
  }
  if (v[0] != '[') return std::string_view::npos;
  std::vector<ToolCall> found;
  size_t i = 1;
  for (;;) {
    i = skip_space(v, i);
    if (i < v.size() && v[i] == ']' && skip_space(v, i + 1) == v.size()) break;
    if (i >= v.size() || v[i] != '{') return std::string_view::npos;
    const size_t e = value_end(v, i);
    if (e == std::string_view::npos) return e;
    ToolCall c;
    if (!read_call(v.substr(i, e - i), syntax, c)) return std::string_view::npos;
    found.push_back(std::move(c));
    i = skip_space(v, e);
    if (i < v.size() && v[i] == ',') ++i;
  }
  if (found.empty()) return std::string_view::npos;
  for (auto& c : found) calls.push_back(std::move(c));
  return end;
}

}  // namespace

ToolSyntax detect_tool_syntax(std::string_view t) {
  if (t.find(kOpen) != std::string_view::npos) return ToolSyntax::kHermes;
  // Mistral v0.3 / Nemo write "[TOOL_CALLS][" and a JSON array; Mistral
  // Small 3.2 writes "[TOOL_CALLS]name[ARGS]{...}", a format not read here.
  if (t.find(kMistralCallsToken) != std::string_view::npos &&
      t.find("[ARGS]") == std::string_view::npos)
    return ToolSyntax::kMistral;
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
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return invalid("parallel_tool_calls", "must be a boolean");
    r.tool_choice.parallel = p->get<bool>();
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
  const char* key = args_key(syntax);
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
  // template's markers, once or repeated.
  std::string g = *text;
  const size_t nl = g.find('\n');
  const std::string call = "( " + g.substr(9, nl - 9) + " )";
  const std::string rules = nl == std::string::npos ? "" : g.substr(nl);
  const bool several = choice.mode == ToolChoice::kRequired && choice.parallel;
  if (syntax == ToolSyntax::kHermes) {
    const std::string block = "\"<tool_call>\\n\" " + call + " \"\\n</tool_call>\"";
    g = "root ::= " + block + (several ? " ( \"\\n\" " + block + " )*" : "") + rules;
  } else if (syntax == ToolSyntax::kMistral) {
    g = "root ::= \"[\" " + call + (several ? " ( \",\" \" \"? " + call + " )*" : "") + " \"]\"" +
        rules;
  }
  auto parsed = grammar::parse_gbnf(g);
  if (!parsed) return parsed.status();
  return std::make_shared<const grammar::Grammar>(std::move(*parsed));
}

ToolReply parse_tool_calls(ToolSyntax syntax, const std::string& text) {
  ToolReply out;
  if (syntax == ToolSyntax::kLlama3) {
    // One object, or (leniently) an array of them.
    const size_t a = skip_space(text, 0);
    const size_t end = a < text.size() && (text[a] == '{' || text[a] == '[')
                           ? read_call_list(text, a, syntax, out.calls)
                           : std::string::npos;
    if (end == std::string::npos || skip_space(text, end) != text.size()) {
      out.calls.clear();
      out.content = text;
    }
    return out;
  }
  if (syntax == ToolSyntax::kMistral) {
    const size_t m = text.find(kMistralCallsToken);
    if (m != std::string::npos) {
      const size_t a = skip_space(text, m + kMistralCallsToken.size());
      const size_t end = read_call_list(text, a, syntax, out.calls);
      if (end != std::string::npos) {
        out.content = text.substr(0, m);
        if (skip_space(text, end) < text.size()) out.content += text.substr(end);
        return out;
      }
    }
    out.content = text;
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
    add_content(out, text, at, open);
    if (read_call(inner, syntax, c)) {
      out.calls.push_back(std::move(c));
    } else {
      out.content += text.substr(open, close + kClose.size() - open);
    }
    at = close + kClose.size();
  }
  add_content(out, text, std::min(at, text.size()), text.size());
  return out;
}

std::vector<PartialCall> partial_tool_calls(ToolSyntax syntax, std::string_view text) {
  std::vector<PartialCall> out;
  const char* key = args_key(syntax);
  const char* alt = alt_args_key(syntax);
  // The objects of a list (Llama 3's lenient array, Mistral's) from s[at].
  auto list = [&](size_t at) {
    at = skip_space(text, at);
    if (at >= text.size()) return;
    if (text[at] == '{') {
      out.emplace_back();
      scan_call(text, at, key, alt, out.back());
      return;
    }
    if (text[at] != '[') return;
    size_t i = at + 1;
    for (;;) {
      i = skip_space(text, i);
      if (i >= text.size() || text[i] != '{') return;
      out.emplace_back();
      const size_t e = scan_call(text, i, key, alt, out.back());
      if (e == std::string_view::npos) return;
      i = skip_space(text, e);
      if (i >= text.size() || text[i] != ',') return;
      ++i;
    }
  };
  if (syntax == ToolSyntax::kLlama3) {
    list(0);
  } else if (syntax == ToolSyntax::kMistral) {
    const size_t m = text.find(kMistralCallsToken);
    if (m != std::string_view::npos) list(m + kMistralCallsToken.size());
  } else if (syntax == ToolSyntax::kHermes) {
    for (size_t open = text.find(kOpen); open != std::string_view::npos;
         open = text.find(kOpen, open + kOpen.size())) {
      const size_t a = skip_space(text, open + kOpen.size());
      if (a >= text.size()) break;
      if (text[a] != '{') continue;
      out.emplace_back();
      scan_call(text, a, key, alt, out.back());
    }
  }
  return out;
}

std::string new_call_id(ToolSyntax syntax) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  if (syntax != ToolSyntax::kMistral) return fmt::format("call_{:016x}", rng());
  constexpr std::string_view kAlnum =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id(9, ' ');
  for (char& c : id) c = kAlnum[rng() % kAlnum.size()];
  return id;
}

size_t streamable_prefix(ToolSyntax syntax, std::string_view text) {
  if (syntax == ToolSyntax::kLlama3) {
    // A reply that starts with '{' or '[' may be a call: hold it all back.
    const size_t a = text.find_first_not_of(" \t\r\n");
    if (a == std::string_view::npos || text[a] == '{' || text[a] == '[') return 0;
    return text.size();
  }
  if (syntax != ToolSyntax::kHermes && syntax != ToolSyntax::kMistral) return text.size();
  const std::string_view marker = syntax == ToolSyntax::kHermes ? kOpen : kMistralCallsToken;
  const size_t open = text.find(marker);
  if (open != std::string_view::npos) return open;
  // Hold back a tail that could be the start of the marker.
  for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return text.size() - k;
  return text.size();
}

}  // namespace sustain::server

#include "server/structured.h"

#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/schema.h"

namespace sustain::server {
namespace {

using nlohmann::json;

Status invalid(const std::string& field, const std::string& what) {
  return Status(Code::kInvalidArgument, fmt::format("'{}' {}", field, what));
}

// The json_object grammar is the same for every request: compiled once.
std::shared_ptr<const grammar::Grammar> json_object_grammar() {
  static const std::shared_ptr<const grammar::Grammar> g = [] {
    auto parsed = grammar::parse_gbnf(grammar::json_object_gbnf());
    SUSTAIN_CHECK(parsed.has_value());
    return std::make_shared<const grammar::Grammar>(std::move(*parsed));
  }();
  return g;
}

Status parse_response_format(const json& rf, std::string_view text, CompletionRequest& r) {
  if (!rf.is_object()) return invalid("response_format", "must be an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    return invalid("response_format.type", "must be a string");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return Status::ok();
  if (t == "json_object") {
    r.grammar = json_object_grammar();
    r.grammar_param = "response_format";
    r.grammar_source = "json_object";
    return Status::ok();
  }
  if (t != "json_schema")
    return invalid("response_format.type",
                   fmt::format("is \"{}\"; it must be \"text\", \"json_object\" or \"json_schema\"",
                               t.substr(0, 64)));
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    return invalid("response_format.json_schema", "must be an object with a 'schema'");
  if (auto n = js->find("name"); n != js->end() && !n->is_string())
    return invalid("response_format.json_schema.name", "must be a string");
  if (auto s = js->find("strict"); s != js->end() && !s->is_null() && !s->is_boolean())
    return invalid("response_format.json_schema.strict", "must be a boolean");
  auto schema = js->find("schema");
  if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
    return invalid("response_format.json_schema.schema", "must be a JSON schema (an object)");
  // Taken again from the text with the key order kept: properties are
  // generated in the order the client wrote them.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
  const auto& sch = ordered["response_format"]["json_schema"]["schema"];
  auto g = grammar::compile_json_schema(sch);
  if (!g)
    return invalid("response_format.json_schema.schema", "is not usable: " + g.status().message());
  r.grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  r.grammar_param = "response_format";
  r.grammar_source = "json_schema:" + sch.dump();
  return Status::ok();
}

}  // namespace

Status parse_structured_output(const json& body, std::string_view text, CompletionRequest& r) {
  auto rf = body.find("response_format");
  if (rf != body.end() && !rf->is_null()) SUSTAIN_TRY(parse_response_format(*rf, text, r));
  auto gr = body.find("grammar");
  if (gr == body.end() || gr->is_null()) return Status::ok();
  if (!gr->is_string()) return invalid("grammar", "must be a string of GBNF text");
  if (r.grammar)
    return invalid("grammar", "cannot be combined with a JSON 'response_format'; send one of them");
  auto g = grammar::parse_gbnf(gr->get_ref<const std::string&>());
  if (!g) return invalid("grammar", "is not usable: " + g.status().message());
  r.grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  r.grammar_param = "grammar";
  r.grammar_source = "gbnf:" + gr->get<std::string>();
  return Status::ok();
}

}  // namespace sustain::server

// response_format and grammar at request validation: what compiles, and
// every bad input a 400 that names the field and the problem.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/api_error.h"
#include "server/request.h"

namespace sustain::server {
namespace {

Expected<CompletionRequest> parse(const std::string& body, Endpoint ep = Endpoint::kChat) {
  return parse_request(body, ep, RequestLimits{});
}

const char* kChat = R"("messages": [{"role": "user", "content": "hi"}])";

std::string error_of(const std::string& fields, Endpoint ep = Endpoint::kChat) {
  const std::string body = ep == Endpoint::kChat ? "{" + std::string(kChat) + ", " + fields + "}"
                                                 : R"({"prompt": "hi", )" + fields + "}";
  auto r = parse(body, ep);
  EXPECT_FALSE(r.has_value()) << body;
  if (r) return "";
  EXPECT_EQ(error_from_status(r.status()).status, 400);
  return r.status().message();
}

bool accepts(const CompletionRequest& r, const std::string& text) {
  grammar::Matcher m(r.grammar);
  return m.advance(text) && m.state().can_end;
}

TEST(StructuredParse, ResponseFormats) {
  auto text = parse("{" + std::string(kChat) + R"(, "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(text->grammar, nullptr);
  auto obj = parse("{" + std::string(kChat) + R"(, "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(obj.has_value()) << obj.status().message();
  ASSERT_NE(obj->grammar, nullptr);
  EXPECT_EQ(obj->grammar_param, "response_format");
  EXPECT_TRUE(accepts(*obj, R"({"a": [1]})"));
  EXPECT_FALSE(accepts(*obj, "[1]"));
  // json_schema keeps the client's property order ("z" before "a").
  auto sch = parse("{" + std::string(kChat) + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "t", "strict": true, "schema": {"type": "object",
      "properties": {"z": {"type": "integer"}, "a": {"type": "boolean"}},
      "required": ["z", "a"], "additionalProperties": false}}}})");
  ASSERT_TRUE(sch.has_value()) << sch.status().message();
  EXPECT_TRUE(accepts(*sch, R"({"z": 1, "a": true})"));
  EXPECT_FALSE(accepts(*sch, R"({"a": true, "z": 1})"));
  // Completions take them too, and a grammar field.
  auto g =
      parse(R"({"prompt": "hi", "grammar": "root ::= \"yes\" | \"no\""})", Endpoint::kCompletions);
  ASSERT_TRUE(g.has_value()) << g.status().message();
  EXPECT_EQ(g->grammar_param, "grammar");
  EXPECT_TRUE(accepts(*g, "no"));
  auto c = parse(R"({"prompt": "hi", "response_format": {"type": "json_object"}})",
                 Endpoint::kCompletions);
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(c->grammar, nullptr);
}

TEST(StructuredParse, BadInputNamesTheProblem) {
  EXPECT_NE(error_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"type": "integer", "multipleOf": 2}}})")
                .find("'response_format.json_schema.schema' is not usable: JSON schema: at the "
                      "root: keyword 'multipleOf' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"j("response_format": {"type": "json_schema", "json_schema": {
      "schema": {"type": "string", "pattern": "a(?<n>b)"}}})j")
                .find("pattern at offset"),
            std::string::npos);
  EXPECT_NE(error_of(R"j("grammar": "root ::= \"a\" )")j", Endpoint::kCompletions)
                .find("'grammar' is not usable: grammar: line 1, column 14: unexpected ')'"),
            std::string::npos)
      << error_of(R"j("grammar": "root ::= \"a\" )")j", Endpoint::kCompletions);
  EXPECT_NE(error_of(R"("grammar": 5)").find("'grammar' must be a string"), std::string::npos);
  EXPECT_NE(error_of(R"("response_format": {"type": "xml"})").find("\"xml\""), std::string::npos);
  EXPECT_NE(error_of(R"("response_format": "json")").find("must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"("response_format": {"type": "json_schema"})").find("json_schema'"),
            std::string::npos);
  EXPECT_NE(error_of(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})")
                .find("must be a JSON schema"),
            std::string::npos);
  EXPECT_NE(error_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": 1,
      "schema": {}}})")
                .find("json_schema.name"),
            std::string::npos);
  EXPECT_NE(error_of(R"("response_format": {"type": "json_object"}, "grammar": "root ::= \"a\"")")
                .find("cannot be combined"),
            std::string::npos);
}

}  // namespace
}  // namespace sustain::server

// JSON Schema → grammar: what each supported keyword accepts and rejects
// (checked on texts through the matcher), integer ranges against every
// integer near them, regex patterns, and errors that name the keyword.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "grammar/schema.h"
#include "grammar_test_util.h"

namespace sustain::grammar {
namespace {

using json = nlohmann::ordered_json;
using test::accepts;

std::shared_ptr<const Grammar> schema(const std::string& text) {
  auto g = compile_json_schema(json::parse(text));
  EXPECT_TRUE(g.has_value()) << g.status().message() << "\n" << text;
  if (!g) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

std::string error_of(const std::string& text) {
  auto g = compile_json_schema(json::parse(text));
  EXPECT_FALSE(g.has_value()) << text;
  return g ? std::string() : g.status().message();
}

TEST(Schema, Primitives) {
  auto s = schema(R"({"type": "string"})");
  EXPECT_TRUE(accepts(s, R"("hi \"there\" \u00e9 \n")"));
  EXPECT_TRUE(accepts(s, "\"é😀\""));
  EXPECT_FALSE(accepts(s, "\"a\nb\""));     // a raw control character
  EXPECT_FALSE(accepts(s, R"("\ud800")"));  // a lone surrogate escape
  EXPECT_FALSE(accepts(s, R"("\q")"));
  auto i = schema(R"({"type": "integer"})");
  EXPECT_TRUE(accepts(i, "-120"));
  EXPECT_TRUE(accepts(i, "0"));
  EXPECT_FALSE(accepts(i, "01"));
  EXPECT_FALSE(accepts(i, "1.5"));
  auto n = schema(R"({"type": "number"})");
  EXPECT_TRUE(accepts(n, "-0.5e+10"));
  EXPECT_TRUE(accepts(n, "3"));
  EXPECT_FALSE(accepts(n, ".5"));
  EXPECT_FALSE(accepts(n, "1."));
  auto b = schema(R"({"type": ["boolean", "null"]})");
  EXPECT_TRUE(accepts(b, "true"));
  EXPECT_TRUE(accepts(b, "null"));
  EXPECT_FALSE(accepts(b, "1"));
  auto any = schema("{}");
  EXPECT_TRUE(accepts(any, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(accepts(schema("true"), "[]"));
}

TEST(Schema, ObjectsRequiredOptionalAndOrder) {
  auto s = schema(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"]})");
  EXPECT_TRUE(accepts(s, R"({"b": "x"})"));
  EXPECT_TRUE(accepts(s, R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(accepts(s, R"({ "a":1,"b":"x" })"));
  EXPECT_TRUE(accepts(s, R"({"b": "x", "c": false})"));
  EXPECT_FALSE(accepts(s, R"({"a": 1})"));            // b is required
  EXPECT_FALSE(accepts(s, R"({"b": "x", "a": 1})"));  // declared order
  EXPECT_FALSE(accepts(s, R"({"b": "x", "d": 1})"));  // no extras by default
  EXPECT_FALSE(accepts(s, R"({"b": "x",})"));
  auto all_optional = schema(R"({"properties": {"a": {"type": "null"}, "b": {"type": "null"}}})");
  EXPECT_TRUE(accepts(all_optional, "{}"));
  EXPECT_TRUE(accepts(all_optional, R"({"b": null})"));
  EXPECT_TRUE(accepts(all_optional, R"({"a": null, "b": null})"));
  EXPECT_FALSE(accepts(all_optional, R"({, "b": null})"));
}

TEST(Schema, AdditionalProperties) {
  auto s = schema(R"({"type": "object", "properties": {"id": {"type": "integer"}},
                      "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(accepts(s, R"({"id": 1, "x": "y", "idx": "z", "i": "w"})"));
  EXPECT_TRUE(accepts(s, R"({"x": "y"})"));
  EXPECT_FALSE(accepts(s, R"({"x": 1})"));
  // An extra key never spells a declared name (its schema would be the
  // declared one), and extra keys use no escapes (which could spell one).
  EXPECT_FALSE(accepts(s, R"({"id": 1, "id": "z"})"));
  EXPECT_FALSE(accepts(s, R"({"\u0069d": "z"})"));
  auto open = schema(R"({"type": "object", "properties": {"a": {"type": "null"}},
                         "additionalProperties": true, "required": ["a"]})");
  EXPECT_TRUE(accepts(open, R"({"a": null, "b": [1]})"));
  auto plain = schema(R"({"type": "object"})");
  EXPECT_TRUE(accepts(plain, R"({"anything": {"goes": 1}})"));
  EXPECT_NE(
      error_of(R"({"required": ["x"], "additionalProperties": false})").find("'x' is required"),
      std::string::npos);
}

TEST(Schema, ArraysEnumsConstAnyOf) {
  auto s = schema(R"({"type": "array", "items": {"enum": ["a", 1, null, {"k": [true]}]},
                      "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(accepts(s, R"(["a"])"));
  EXPECT_TRUE(accepts(s, R"([1, null, {"k":[true]}])"));
  EXPECT_FALSE(accepts(s, "[]"));
  EXPECT_FALSE(accepts(s, R"(["a", "a", "a", "a"])"));
  EXPECT_FALSE(accepts(s, R"(["b"])"));
  auto c = schema(R"({"const": "fixed"})");
  EXPECT_TRUE(accepts(c, R"("fixed")"));
  EXPECT_FALSE(accepts(c, R"("fixe")"));
  auto e = schema(R"({"type": "string", "enum": ["x", 2]})");  // 2 is not a string
  EXPECT_FALSE(accepts(e, "2"));
  auto a = schema(R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"},
                                  "maxItems": 0}]})");
  EXPECT_TRUE(accepts(a, "5"));
  EXPECT_TRUE(accepts(a, "[]"));
  EXPECT_FALSE(accepts(a, "[1]"));
  auto o = schema(R"({"oneOf": [{"type": "string"}, {"type": "null"}]})");
  EXPECT_TRUE(accepts(o, "null"));
}

TEST(Schema, RefsAndRecursion) {
  auto s = schema(R"({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"]}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(accepts(s, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]})"));
  EXPECT_FALSE(accepts(s, R"({"v": 1, "kids": [{}]})"));
  auto d = schema(R"({"definitions": {"x": {"type": "null"}}, "type": "array",
                      "items": {"$ref": "#/definitions/x"}})");
  EXPECT_TRUE(accepts(d, "[null, null]"));
  auto root = schema(R"({"type": "array", "items": {"$ref": "#"}, "maxItems": 2})");
  EXPECT_TRUE(accepts(root, "[[], [[]]]"));
}

TEST(Schema, StringsLengthPatternFormat) {
  auto len = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(accepts(len, R"("ab")"));
  EXPECT_TRUE(accepts(len, R"("é😀\n")"));  // three characters
  EXPECT_FALSE(accepts(len, R"("a")"));
  EXPECT_FALSE(accepts(len, R"("abcd")"));
  auto p = schema(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}(x|yz)?$"})");
  EXPECT_TRUE(accepts(p, R"("AB-123")"));
  EXPECT_TRUE(accepts(p, R"("AB-123yz")"));
  EXPECT_FALSE(accepts(p, R"("AB-12")"));
  EXPECT_FALSE(accepts(p, R"("ab-123")"));
  auto unanchored = schema(R"({"type": "string", "pattern": "ab+"})");
  EXPECT_TRUE(accepts(unanchored, R"("xxabbby")"));
  EXPECT_FALSE(accepts(unanchored, R"("xxay")"));
  auto quote = schema(R"({"type": "string", "pattern": "^a\"\\\\.$"})");
  EXPECT_TRUE(accepts(quote, R"("a\"\\z")"));  // the JSON text escapes " and \ .
  auto dt = schema(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(accepts(dt, R"("2024-02-28T23:59:59.123+05:30")"));
  EXPECT_TRUE(accepts(dt, R"("1999-12-31T00:00:00Z")"));
  EXPECT_FALSE(accepts(dt, R"("2024-02-30T00:00:00Z")"));
  EXPECT_FALSE(accepts(dt, R"("2024-04-31T00:00:00Z")"));
  EXPECT_FALSE(accepts(dt, R"("2024-01-01 00:00:00Z")"));
  auto u = schema(R"({"format": "uuid"})");
  EXPECT_TRUE(accepts(u, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(u, R"("123e4567-e89b-12d3-a456-42661417400")"));
  auto e = schema(R"({"type": "string", "format": "email"})");
  EXPECT_TRUE(accepts(e, R"("first.last+tag@mail.example.org")"));
  EXPECT_FALSE(accepts(e, R"("no-at-sign.example.org")"));
  EXPECT_FALSE(accepts(e, R"("a@b")"));
}

TEST(Schema, IntegerRangesAgainstEveryNearbyInteger) {
  std::mt19937 rng(11);
  struct Case {
    std::string bounds;
    bool has_lo, has_hi;
    int64_t lo, hi;
  };
  std::vector<Case> cases = {
      {R"("minimum": 0)", true, false, 0, 0},
      {R"("minimum": -7, "maximum": 13)", true, true, -7, 13},
      {R"("exclusiveMinimum": 9, "exclusiveMaximum": 101)", true, true, 10, 100},
      {R"("maximum": -3)", false, true, 0, -3},
      {R"("minimum": 95, "maximum": 1005)", true, true, 95, 1005},
      {R"("minimum": 1.5, "maximum": 7.5)", true, true, 2, 7}};
  for (int k = 0; k < 8; ++k) {
    const int64_t a = static_cast<int64_t>(rng() % 3000) - 1500;
    const int64_t b = a + static_cast<int64_t>(rng() % 2000);
    cases.push_back({"\"minimum\": " + std::to_string(a) + ", \"maximum\": " + std::to_string(b),
                     true, true, a, b});
  }
  for (const auto& c : cases) {
    auto g = schema("{\"type\": \"integer\", " + c.bounds + "}");
    ASSERT_TRUE(g);
    const int64_t from = (c.has_lo ? c.lo : c.hi) - 1200, to = (c.has_hi ? c.hi : c.lo) + 1200;
    for (int64_t x = from; x <= to; ++x) {
      const bool want = (!c.has_lo || x >= c.lo) && (!c.has_hi || x <= c.hi);
      ASSERT_EQ(accepts(g, std::to_string(x)), want) << c.bounds << ": " << x;
    }
    EXPECT_FALSE(accepts(g, "-0"));
    EXPECT_FALSE(accepts(g, "007"));
  }
}

// Number bounds against a grid of values written as integers, with
// fractions and as "-0.x": every accepted value lies within the bounds (the
// grammar is sound), every integer within them is accepted, and so is a
// value with a fraction wherever its whole unit interval fits.
TEST(Schema, NumberRangesAgainstAGridOfValues) {
  struct Case {
    std::string bounds;
    double lo, hi;
    bool lo_excl, hi_excl;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {R"("minimum": 0, "maximum": 1)", 0, 1, false, false},
      {R"("minimum": -2.5, "maximum": 3.25)", -2.5, 3.25, false, false},
      {R"("exclusiveMinimum": -1, "exclusiveMaximum": 2)", -1, 2, true, true},
      {R"("minimum": 0.5)", 0.5, inf, false, false},
      {R"("maximum": -0.5)", -inf, -0.5, false, false},
      {R"("exclusiveMaximum": 0)", -inf, 0, false, true},
      {R"("minimum": -12, "maximum": -3)", -12, -3, false, false},
      {R"("minimum": 7, "maximum": 7)", 7, 7, false, false}};
  for (const auto& c : cases) {
    auto g = schema("{\"type\": \"number\", " + c.bounds + "}");
    ASSERT_TRUE(g);
    int fractions = 0;
    for (int q = -60; q <= 60; ++q) {
      for (const std::string text :
           {std::to_string(q), fmt::format("{}.5", q), fmt::format("{}.25", q), fmt::format("{}.0", q)}) {
        const double x = std::stod(text);
        const bool in = (c.lo_excl ? x > c.lo : x >= c.lo) && (c.hi_excl ? x < c.hi : x <= c.hi);
        const bool ok = accepts(g, text);
        if (ok) ASSERT_TRUE(in) << c.bounds << ": accepted " << text;
        if (in && text.find('.') == std::string::npos) ASSERT_TRUE(ok) << c.bounds << ": " << text;
        const double n = std::floor(std::fabs(x));
        const double cell_lo = x < 0 ? -(n + 1) : n, cell_hi = x < 0 ? -n : n + 1;
        if (text.find('.') != std::string::npos && text != "-0.5" && cell_lo >= c.lo &&
            cell_hi <= c.hi && !(c.lo_excl && cell_lo == c.lo) &&
            !(c.hi_excl && cell_hi == c.hi) && in)
          ASSERT_TRUE(ok) << c.bounds << ": " << text;
        fractions += ok && text.find('.') != std::string::npos;
      }
    }
    EXPECT_FALSE(accepts(g, "1e3"));  // bounded numbers have no exponent
    if (c.hi - c.lo >= 2) EXPECT_GT(fractions, 0) << c.bounds;
  }
  auto z = schema(R"({"type": "number", "minimum": -1, "maximum": 0})");
  EXPECT_TRUE(accepts(z, "-0.5"));
  EXPECT_TRUE(accepts(z, "0"));
  EXPECT_FALSE(accepts(z, "0.5"));
}

TEST(Schema, PrefixItemsTuples) {
  auto t = schema(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]})");
  EXPECT_TRUE(accepts(t, R"([1, "a"])"));
  EXPECT_FALSE(accepts(t, R"([1])"));
  EXPECT_FALSE(accepts(t, R"([1, "a", 2])"));  // no items beyond the tuple
  EXPECT_FALSE(accepts(t, R"(["a", 1])"));
  auto rest = schema(R"({"prefixItems": [{"const": "op"}], "items": {"type": "integer"},
                        "maxItems": 3})");
  EXPECT_TRUE(accepts(rest, R"(["op"])"));
  EXPECT_TRUE(accepts(rest, R"(["op", 1, 2])"));
  EXPECT_FALSE(accepts(rest, R"(["op", 1, 2, 3])"));
  EXPECT_FALSE(accepts(rest, R"(["op", "x"])"));
  auto more = schema(R"({"prefixItems": [{"type": "null"}], "minItems": 3})");
  EXPECT_TRUE(accepts(more, R"([null, 1, "x"])"));
  EXPECT_FALSE(accepts(more, R"([null, 1])"));
}

TEST(Schema, MinAndMaxProperties) {
  auto min = schema(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                       "c": {"type": "integer"}}, "minProperties": 2})");
  EXPECT_TRUE(accepts(min, R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(accepts(min, R"({"a": 1, "b": 2, "c": 3})"));
  EXPECT_FALSE(accepts(min, R"({"a": 1})"));
  EXPECT_FALSE(accepts(min, "{}"));
  auto max = schema(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                       "c": {"type": "integer"}}, "required": ["c"], "maxProperties": 2,
                       "additionalProperties": true})");
  EXPECT_TRUE(accepts(max, R"({"a": 1, "c": 3})"));
  EXPECT_TRUE(accepts(max, R"({"c": 3})"));
  EXPECT_FALSE(accepts(max, R"({"a": 1, "b": 2, "c": 3})"));
  EXPECT_FALSE(accepts(max, R"({"c": 3, "z": 1})"));  // extras left out under a maximum
  auto none = schema(R"({"type": "object", "maxProperties": 0})");
  EXPECT_TRUE(accepts(none, "{}"));
  EXPECT_FALSE(accepts(none, R"({"a": 1})"));
}

TEST(Schema, AllOfMerges) {
  auto s = schema(R"({"$defs": {"named": {"type": "object", "properties": {
                          "name": {"type": "string", "maxLength": 8}}, "required": ["name"]}},
                      "allOf": [{"$ref": "#/$defs/named"},
                                {"properties": {"age": {"type": "integer", "minimum": 0},
                                                "name": {"minLength": 2}},
                                 "required": ["age"]}]})");
  EXPECT_TRUE(accepts(s, R"({"name": "ab", "age": 3})"));
  EXPECT_FALSE(accepts(s, R"({"name": "ab"})"));            // age required by part 2
  EXPECT_FALSE(accepts(s, R"({"age": 3})"));                // name required by part 1
  EXPECT_FALSE(accepts(s, R"({"name": "a", "age": 3})"));   // minLength from part 2
  EXPECT_FALSE(accepts(s, R"({"name": "abcdefghi", "age": 3})"));  // maxLength from part 1
  EXPECT_FALSE(accepts(s, R"({"name": "ab", "age": -1})"));
  // A closed part keeps the other part's property out.
  auto closed = schema(R"({"allOf": [{"properties": {"a": {"type": "integer"}},
                                       "additionalProperties": false},
                                      {"properties": {"b": {"type": "integer"}}}]})");
  EXPECT_TRUE(accepts(closed, R"({"a": 1})"));
  EXPECT_FALSE(accepts(closed, R"({"a": 1, "b": 2})"));
  auto nums = schema(R"({"type": "number", "allOf": [{"minimum": 2}, {"maximum": 4},
                                                   {"type": "integer"}]})");
  EXPECT_TRUE(accepts(nums, "3"));
  EXPECT_FALSE(accepts(nums, "3.5"));
  EXPECT_FALSE(accepts(nums, "5"));
  auto enums = schema(R"({"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]})");
  EXPECT_TRUE(accepts(enums, R"("b")"));
  EXPECT_FALSE(accepts(enums, R"("a")"));
  // Bounds from one part filter another part's enum, each on its own kind.
  auto folded = schema(R"({"allOf": [{"enum": [1, 5, 9, "long text", "ok"]},
                                     {"minimum": 4, "maxLength": 3}]})");
  EXPECT_TRUE(accepts(folded, "5"));
  EXPECT_TRUE(accepts(folded, R"("ok")"));
  EXPECT_FALSE(accepts(folded, "1"));
  EXPECT_FALSE(accepts(folded, R"("long text")"));
  EXPECT_NE(error_of(R"({"allOf": [{"const": 3}, {"minimum": 4}]})").find("no value of 'const'"),
            std::string::npos);
}

TEST(Schema, ErrorsNameTheKeyword) {
  EXPECT_EQ(error_of(R"({"type": "integer", "multipleOf": 3})"),
            "JSON schema: at the root: keyword 'multipleOf' is not supported");
  EXPECT_EQ(error_of(R"({"properties": {"a": {"type": "string", "contentEncoding": "x"}}})"),
            "JSON schema: at /properties/a: keyword 'contentEncoding' is not supported");
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "(?=a)b"})").find("lookarounds"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "(a"})")
                .find("at /pattern: pattern at offset 2: missing ')'"),
            std::string::npos)
      << error_of(R"({"type": "string", "pattern": "(a"})");
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "a\\1"})").find("backreferences"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^a{5000}$"})")
                .find("offset 2: a repetition count is over the limit"),
            std::string::npos)
      << error_of(R"({"type": "string", "pattern": "^a{5000}$"})");
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^a{3,2}$"})").find("maximum is below"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "format": "hostname"})").find("format 'hostname'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "http://x/y.json"})").find("not a local reference"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#"})").find("refers to itself"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "number", "minimum": 5, "maximum": 4.5})").find("no number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "frob"})").find("unknown type 'frob'"), std::string::npos);
  EXPECT_NE(error_of("false").find("allows no value"), std::string::npos);
  EXPECT_NE(error_of(R"({"items": [{"type": "null"}]})").find("tuple"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "maxItems": 100000})").find("limit"), std::string::npos);
  EXPECT_NE(error_of(R"({"allOf": []})").find("at /allOf: must be a non-empty array"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})")
                .find("have no value in common"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"allOf": [{"pattern": "^a"}, {"pattern": "b$"}]})")
                .find("'pattern' in more than one part"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
                                   {"required": ["b"]}]})")
                .find("property 'b' is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prefixItems": [{}, {}], "maxItems": 1})").find("below the 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prefixItems": [{}], "items": false, "minItems": 2})")
                .find("'items' is false"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"properties": {"a": {}}, "minProperties": 2})")
                .find("'minProperties' 2 asks for more"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"properties": {"a": {}, "b": {}}, "required": ["a", "b"],
                         "maxProperties": 1})")
                .find("'maxProperties' 1 is below the 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "$ref": "#/x"})").find("'$ref' beside 'type'"),
            std::string::npos);
}

TEST(Schema, JsonObjectGrammar) {
  auto g = test::gbnf(json_object_gbnf());
  EXPECT_TRUE(accepts(g, R"({"a": [1, 2.5e3, "x", true, false, null, {}], "b": {"c": []}})"));
  EXPECT_TRUE(accepts(g, "{\n  \"a\": 1\n}"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"({"a": 1,})"));
  EXPECT_FALSE(accepts(g, R"({'a': 1})"));
}

}  // namespace
}  // namespace sustain::grammar

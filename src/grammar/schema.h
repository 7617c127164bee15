// JSON Schema → GBNF → Grammar, for the subset structured-output clients use
// (docs/structured_output.md lists it):
//
//   type (one or a list), properties / required / additionalProperties,
//   minProperties / maxProperties, enum / const, items / prefixItems /
//   minItems / maxItems, anyOf / oneOf, allOf (merged), $ref into
//   $defs / definitions (recursion included), string minLength / maxLength /
//   pattern / format (date-time, date, time, uuid, email), integer and
//   number minimum / maximum / exclusiveMinimum / exclusiveMaximum;
//   annotations (title,
//   description, default, examples, $schema, $id, $comment) are ignored.
//
// Every other keyword is an error that names it and where it is; nothing is
// silently dropped. The grammar is sound — everything it produces validates —
// but may be narrower than the schema: properties come in the order the
// schema lists them, extra properties only where additionalProperties allows
// them (absent = none; their keys use no escapes and stay within about 32
// characters beyond a declared name), numbers have at most 16 integer and 16 fraction
// digits, and oneOf is generated as anyOf (so alternatives that overlap can
// produce a value that matches two of them).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"

namespace sustain::grammar {

// kInvalidArgument "JSON schema: <where>: <problem>", e.g.
// "JSON schema: at /properties/age: keyword 'multipleOf' is not supported".
// The schema is ordered_json so that properties keep the client's order.
Expected<std::string> schema_to_gbnf(const nlohmann::ordered_json& schema);
Expected<Grammar> compile_json_schema(const nlohmann::ordered_json& schema);

// Any JSON object (OpenAI's response_format json_object), and any JSON value.
const std::string& json_object_gbnf();
const std::string& json_value_gbnf();

}  // namespace sustain::grammar

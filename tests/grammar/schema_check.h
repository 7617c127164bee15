// An independent JSON Schema validator for the tests: written from the
// JSON Schema 2020-12 validation spec for the keywords the grammar module
// supports, sharing no code with it (patterns go through std::regex, formats
// through their RFC definitions with a real calendar).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sustain::grammar::test {

// "" when `value` is valid against `schema` (with `root` for $ref), else
// the first reason it is not, with the path of the value.
std::string validate(const nlohmann::ordered_json& value, const nlohmann::ordered_json& schema,
                     const nlohmann::ordered_json& root, const std::string& path = "$");

}  // namespace sustain::grammar::test

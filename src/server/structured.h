// Structured output on a request: OpenAI's response_format ({"type":
// "json_object"} or {"type": "json_schema", "json_schema": {"name",
// "schema", "strict"}}) and llama.cpp's `grammar` (GBNF text), compiled to
// the request's grammar while the body is validated, so a bad schema or
// grammar is a 400 naming the field before any engine work.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/request.h"

namespace sustain::server {

// Sets r.grammar (and r.grammar_param) from the body's response_format or
// grammar field; leaves r.grammar null when neither asks for a constraint.
Status parse_structured_output(const nlohmann::json& body, std::string_view text,
                               CompletionRequest& r);

}  // namespace sustain::server

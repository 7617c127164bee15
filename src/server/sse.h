// Server-sent events as OpenAI streams them: one `data: <json>` event per
// chunk, a blank line after each, and `data: [DONE]` at the end. Comment
// lines (": ...") keep a connection alive and let a write find out that the
// client has gone; SSE clients ignore them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sustain::server {

// Serializes JSON for the wire. Strings that came from model output are
// valid UTF-8 (the stream decoder never splits a character), but a token's
// raw piece need not be: invalid bytes become U+FFFD instead of throwing.
std::string to_json_text(const nlohmann::json& j);

std::string sse_event(const nlohmann::json& j);    // "data: {...}\n\n"
std::string sse_done();                            // "data: [DONE]\n\n"
std::string sse_comment(const std::string& text);  // ": text\n\n"

}  // namespace sustain::server

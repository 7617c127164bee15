#include "server/sse.h"

namespace sustain::server {

std::string to_json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& j) {
  return "data: " + to_json_text(j) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

std::string sse_comment(const std::string& text) {
  // A newline inside would end the comment and start a field.
  std::string line;
  for (char c : text) line += (c == '\n' || c == '\r') ? ' ' : c;
  return ": " + line + "\n\n";
}

}  // namespace sustain::server

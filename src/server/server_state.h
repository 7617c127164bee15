// What the route handlers share (private to the server module).
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include <httplib.h>

#include "engine/api.h"
#include "server/api_error.h"
#include "server/chat.h"
#include "server/metrics.h"
#include "server/server.h"

namespace sustain::server {

struct ServerState {
  ServerConfig config;
  std::atomic<engine::Engine*> engine{nullptr};
  std::optional<ChatFormatter> chat;  // set by attach() before `engine`
  ServerCounters counters;
};

// Writes an OpenAI error body with its status (and Retry-After for 429).
void send_error(ServerState& s, httplib::Response& res, const ApiError& e);

// The socket descriptor of the connection `req` came on, or -1.
int connection_socket(const httplib::Request& req);
// True once the client has closed (or reset) the connection on socket `fd`.
// Polls without blocking or consuming data; false for fd -1.
bool client_gone(int fd);

// POST /v1/completions and /v1/chat/completions.
void handle_completion(ServerState& s, const httplib::Request& req, httplib::Response& res,
                       Endpoint endpoint);

}  // namespace sustain::server

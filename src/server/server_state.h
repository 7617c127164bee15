// What the route handlers share (private to the server module).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <httplib.h>

#include "engine/api.h"
#include "grammar/constraint.h"
#include "grammar/token_masks.h"
#include "server/api_error.h"
#include "server/chat.h"
#include "server/metrics.h"
#include "server/server.h"

namespace sustain::server {

// Constraints by what they were compiled from, so requests that send the same
// schema or grammar share one and its cache of masks. Bounded: the oldest
// entry goes first.
class ConstraintCache {
 public:
  std::shared_ptr<grammar::GrammarConstraint> find(const std::string& source) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [k, c] : entries_)
      if (k == source) return c;
    return nullptr;
  }
  void insert(const std::string& source, std::shared_ptr<grammar::GrammarConstraint> c) {
    std::lock_guard<std::mutex> l(mu_);
    if (source.empty()) return;
    if (entries_.size() >= kMax) entries_.erase(entries_.begin());
    entries_.emplace_back(source, std::move(c));
  }

 private:
  static constexpr size_t kMax = 16;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::shared_ptr<grammar::GrammarConstraint>>> entries_;
};

struct ServerState {
  ServerConfig config;
  std::atomic<engine::Engine*> engine{nullptr};
  std::optional<ChatFormatter> chat;  // set by attach() before `engine`
  ServerCounters counters;
  // Shutdown (Server::shutdown): while `draining`, new completions get a 503
  // and /health says so; once `aborting`, running requests end with an error
  // (a final SSE error event for streams). `active` counts the completions
  // between their admission and the end of their response.
  std::atomic<bool> draining{false}, aborting{false};
  // Why running requests were cut off, when not the usual shutdown (written
  // once, before `aborting` is set).
  std::string abort_reason;
  std::atomic<int> active{0};
  // The vocabulary's token bytes sorted for grammar masks: built on the
  // first constrained request (a 150K vocabulary takes a moment), then shared.
  std::once_flag grammar_vocab_once;
  std::shared_ptr<const grammar::TokenVocab> grammar_vocab;
  ConstraintCache constraints;
};

// Holds one count of ServerState::active for as long as it lives.
class ActiveRequest {
 public:
  explicit ActiveRequest(std::atomic<int>& n) : n_(&n) { n_->fetch_add(1); }
  ~ActiveRequest() { n_->fetch_sub(1); }
  ActiveRequest(const ActiveRequest&) = delete;
  ActiveRequest& operator=(const ActiveRequest&) = delete;

 private:
  std::atomic<int>* n_;
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

// The HTTP layer: cpp-httplib's server over our connection handling
// (connection.h: read and write deadlines, the handler pool and its
// overflow), limits (408 / 413 / 431 / 503 busy), authentication (401),
// error bodies, and the small routes (/health, /v1/models, /metrics). The
// completion routes are in completions.cc.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "server/connection.h"
#include "server/server_state.h"
#include "server/sse.h"

namespace sustain::server {
namespace {

using nlohmann::json;

// Compares without an early exit, so the time taken does not reveal how much
// of a guessed key was right.
bool same_key(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i % (b.size() + 1)]);
  return diff == 0;
}

size_t header_bytes(const httplib::Request& req) {
  size_t n = req.method.size() + req.target.size() + req.version.size() + 4;
  for (const auto& [k, v] : req.headers) n += k.size() + v.size() + 4;
  return n;
}

const char* default_message(int status) {
  switch (status) {
    case 400:
      return "the HTTP request is malformed";
    case 404:
      return "no such route";
    case 405:
      return "method not allowed on this route";
    case 413:
      return "the request body is too large";
    case 414:
      return "the request URI is too long";
    case 431:
      return "the request headers are too large";
    default:
      return "the request failed";
  }
}

}  // namespace

int connection_socket(const httplib::Request& req) {
  // Handler threads of HttpServer know their connection.
  if (const Connection* c = current_connection(); c != nullptr) return c->fd;
  // Otherwise: httplib 0.11 does not hand the socket to handlers, but the connection is
  // unique by its two ports and the peer's address: find the descriptor
  // among this process's open sockets (a few dozen entries).
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    auto port_of = [](const sockaddr_storage& a) -> int {
      if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
      if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
      return -1;
    };
    if (port_of(local) != req.local_port || port_of(peer) != req.remote_port) continue;
    char host[INET6_ADDRSTRLEN] = {0};
    const void* addr =
        peer.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in&>(peer).sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6&>(peer).sin6_addr);
    if (::inet_ntop(peer.ss_family, addr, host, sizeof host) == nullptr || req.remote_addr != host)
      continue;
    found = fd;
    break;
  }
  ::closedir(dir);
  return found;
}

bool client_gone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    // Data is a pipelined request; 0 bytes is an orderly close.
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

void send_error(ServerState& s, httplib::Response& res, const ApiError& e) {
  if (e.status == 429) {
    s.counters.queue_rejections++;
    res.set_header("Retry-After", "1");
  } else if (e.status >= 400 && e.status < 500) {
    s.counters.client_errors++;
  }
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

struct Server::Impl {
  ServerState state;
  HttpServer http;
  int port = -1;
  // stop() may come before run() has started listening (a model that fails
  // to load at once): run() then returns without listening.
  std::atomic<bool> stop_requested{false}, in_run{false};
};

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->state.config = std::move(config);
}

Server::~Server() {
  stop();
}

Expected<int> Server::bind() {
  auto& st = impl_->state;
  auto& cfg = st.config;
  auto& http = impl_->http;
  if (cfg.port < 0 || cfg.port > 65535)
    return error(Code::kInvalidArgument, "--port must be in [0, 65535], got {}", cfg.port);

  // Every request that can wait on the engine holds a pool thread, so the
  // pool has room for all of them plus the quick routes (health, metrics, 429s).
  // Connections past that are answered by the overflow threads at once.
  const int threads = cfg.http_threads > 0 ? cfg.http_threads : 8;
  http.new_task_queue = [threads] { return new HandlerPool(threads, 2, 64); };
  http.set_payload_max_length(cfg.max_body_bytes);
  http.set_read_timeout(cfg.timeout_s, 0);
  http.set_write_timeout(cfg.timeout_s, 0);
  http.set_tcp_nodelay(true);
  ConnectionLimits lim;
  lim.header = cfg.header_timeout;
  lim.body = cfg.body_timeout;
  lim.write = cfg.write_timeout;
  lim.min_write_rate = cfg.min_write_rate;
  lim.max_wait = std::chrono::seconds(cfg.timeout_s);
  lim.overflow_read = std::min(lim.overflow_read, lim.header);
  // The exact limit is checked once the headers are parsed (431 below); the
  // stream stops reading a little past it, whatever a client sends.
  lim.max_header_bytes = cfg.max_header_bytes + 1024;
  http.configure(lim, &st.counters);

  ServerState* sp = &st;
  const ConnectionLimits* limp = &http.limits();
  http.set_error_handler([sp, limp](const httplib::Request&, httplib::Response& res) {
    // Statuses httplib sets itself (404, 413, malformed requests) get an
    // OpenAI-style body too; handler-written errors already have one.
    if (!res.body.empty()) return;
    // httplib reports a read that failed as a 400; say what failed.
    const Connection* conn = current_connection();
    if (conn != nullptr && conn->read_failure != ReadFailure::kNone && res.status == 400) {
      auto [status, body] = read_failure_response(conn->read_failure, *limp);
      res.status = status;
      sp->counters.client_errors++;
      res.set_content(body, "application/json");
      return;
    }
    ApiError e;
    e.status = res.status;
    e.message = default_message(res.status);
    if (res.status == 413)
      e.message =
          fmt::format("the request body is larger than {} bytes", sp->config.max_body_bytes);
    if (res.status >= 500) e.type = "server_error";
    if (res.status >= 400 && res.status < 500) sp->counters.client_errors++;
    res.set_content(error_body(e), "application/json");
  });
  http.set_exception_handler(
      [sp](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        ApiError e{500, "server_error", "internal error: " + what, "", ""};
        res.status = 500;
        res.set_content(error_body(e), "application/json");
      });

  // Wraps a route: counts it, enforces the header limit and the API key;
  // `heavy` routes (completions) get a 503 on the overflow path.
  auto guarded = [sp](bool needs_key, auto handler, bool heavy = false) {
    return [sp, needs_key, handler, heavy](const httplib::Request& req, httplib::Response& res) {
      sp->counters.http_requests++;
      const size_t hb = header_bytes(req);
      if (hb > sp->config.max_header_bytes) {
        send_error(*sp, res,
                   ApiError{431, "invalid_request_error",
                            fmt::format("the request line and headers are {} bytes, at most {} "
                                        "are allowed",
                                        hb, sp->config.max_header_bytes),
                            "", "headers_too_large"});
        return;
      }
      if (needs_key && !sp->config.api_key.empty()) {
        const std::string auth = req.get_header_value("Authorization");
        const std::string kPrefix = "Bearer ";
        if (auth.rfind(kPrefix, 0) != 0 ||
            !same_key(auth.substr(kPrefix.size()), sp->config.api_key)) {
          ApiError e{401, "invalid_request_error",
                     auth.empty() ? "this server needs an API key: send 'Authorization: Bearer KEY'"
                                  : "the API key is not valid",
                     "", "invalid_api_key"};
          send_error(*sp, res, e);
          return;
        }
      }
      if (heavy) {
        const Connection* conn = current_connection();
        if (conn != nullptr && conn->overflow) {
          sp->counters.busy_rejections++;
          res.set_header("Retry-After", "1");
          res.status = 503;
          res.set_content(
              error_body(ApiError{503, "server_error",
                                  fmt::format("every handler thread is busy ({} connections); "
                                              "retry later",
                                              sp->config.http_threads),
                                  "", "server_busy"}),
              "application/json");
          return;
        }
      }
      handler(req, res);
    };
  };

  http.Get("/health", guarded(false, [sp](const httplib::Request&, httplib::Response& res) {
             if (sp->engine.load() == nullptr) {
               res.status = 503;
               res.set_content(R"({"status":"loading"})", "application/json");
               return;
             }
             if (sp->draining.load()) {
               res.status = 503;
               res.set_content(R"({"status":"shutting down"})", "application/json");
               return;
             }
             res.set_content(R"({"status":"ok"})", "application/json");
           }));
  http.Get("/metrics", guarded(true, [sp](const httplib::Request&, httplib::Response& res) {
             engine::Engine* e = sp->engine.load();
             std::optional<engine::EngineStats> stats;
             if (e != nullptr) stats = e->stats();
             res.set_content(render_metrics(stats ? &*stats : nullptr, snapshot(sp->counters)),
                             "text/plain; version=0.0.4; charset=utf-8");
           }));
  http.Get("/v1/models", guarded(true, [sp](const httplib::Request&, httplib::Response& res) {
             engine::Engine* e = sp->engine.load();
             json m = {{"id", sp->config.model_name},
                       {"object", "model"},
                       {"created", 0},
                       {"owned_by", "sustain"}};
             if (e != nullptr)
               m["meta"] = {{"n_ctx", e->config().n_ctx},
                            {"n_vocab", e->tokenizer().n_vocab()},
                            {"n_parallel", e->config().n_parallel}};
             json body = {{"object", "list"}, {"data", json::array({m})}};
             res.set_content(to_json_text(body), "application/json");
           }));
  auto completion = [sp, &guarded](Endpoint ep) {
    return guarded(
        true,
        [sp, ep](const httplib::Request& req, httplib::Response& res) {
          handle_completion(*sp, req, res, ep);
        },
        true);
  };
  http.Post("/v1/completions", completion(Endpoint::kCompletions));
  http.Post("/v1/chat/completions", completion(Endpoint::kChat));

  if (cfg.port == 0) {
    const int p = http.bind_to_any_port(cfg.host);
    if (p < 0) return error(Code::kIo, "cannot bind to {} on any port", cfg.host);
    impl_->port = p;
  } else {
    if (!http.bind_to_port(cfg.host, cfg.port))
      return error(Code::kIo, "cannot bind to {}:{} (in use, or not an address of this host)",
                   cfg.host, cfg.port);
    impl_->port = cfg.port;
  }
  if (!http.widen_backlog(SOMAXCONN))
    return error(Code::kIo, "cannot set the listen backlog on {}:{}: {}", cfg.host, impl_->port,
                 std::strerror(errno));
  return impl_->port;
}

Status Server::run() {
  if (impl_->port < 0) return Status(Code::kInternal, "Server::run() before bind()");
  impl_->in_run.store(true);
  struct Leave {
    std::atomic<bool>& f;
    ~Leave() { f.store(false); }
  } leave{impl_->in_run};
  if (impl_->stop_requested.load()) return Status::ok();
  if (!impl_->http.listen_after_bind())
    return error(Code::kIo, "the HTTP server on {}:{} stopped with an error",
                 impl_->state.config.host, impl_->port);
  return Status::ok();
}

void Server::set_chat_template(std::string source, std::string origin) {
  impl_->state.config.chat_template = std::move(source);
  impl_->state.config.chat_template_origin = std::move(origin);
}

Status Server::attach(engine::Engine* engine) {
  auto& st = impl_->state;
  if (!st.config.chat_template.empty()) {
    const auto& tok = engine->tokenizer();
    const std::string bos = tok.bos() >= 0 ? tok.token_to_piece(tok.bos(), true) : "";
    const std::string eos = tok.eos() >= 0 ? tok.token_to_piece(tok.eos(), true) : "";
    auto f =
        ChatFormatter::create(st.config.chat_template, st.config.chat_template_origin, bos, eos);
    if (!f) return f.status();
    st.chat.emplace(std::move(*f));
  }
  st.engine.store(engine);
  return Status::ok();
}

void Server::stop() {
  impl_->stop_requested.store(true);
  // run() may be between its check of stop_requested and the listening
  // loop: wait for the loop to start, then stop it.
  for (int i = 0; i < 5000; ++i) {
    if (impl_->http.is_running()) {
      impl_->http.stop();
      return;
    }
    if (!impl_->in_run.load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int Server::drain(std::chrono::milliseconds grace, std::string reason) {
  ServerState& s = impl_->state;
  if (!reason.empty() && !s.aborting.load()) s.abort_reason = std::move(reason);
  s.draining = true;
  auto wait_idle = [&s](std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (s.active.load() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  wait_idle(grace);
  const int cut = s.active.load();
  s.aborting = true;
  // Running handlers notice within one poll interval and end their responses.
  wait_idle(std::chrono::seconds(5));
  return cut;
}

}  // namespace sustain::server

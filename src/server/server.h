// The OpenAI-compatible HTTP server (DESIGN.md §1): /v1/completions,
// /v1/chat/completions (streaming or not), /v1/models, /health, /metrics,
// over cpp-httplib's thread pool. Each request's handler thread validates,
// tokenizes, submits to the engine and reads its Stream, polling so that a
// client that goes away has its request cancelled at once. The server binds
// and answers /health (503) before the model is loaded; attach() hands it the
// engine.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/api.h"
#include "engine/image_input.h"
#include "server/request.h"

namespace sustain::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0 = any free port (bind() says which)
  std::string api_key;               // "" = no authentication
  std::string model_name = "model";  // reported by /v1/models and in responses
  std::string chat_template;         // Jinja source; "" = chat requests get a 400
  std::string chat_template_origin = "tokenizer.chat_template";
  int http_threads = 8;  // handler threads; each waiting request holds one; past them, 503 at once
  int timeout_s = 600;   // any one socket wait, at most
  // A request's line and headers must arrive within header_timeout of its
  // first byte, its body within body_timeout of the headers (else 408); a
  // response write making no progress for write_timeout ends the response
  // (a stream's request is cancelled), and so does a client that, over
  // write_timeout of waiting, took less than min_write_rate bytes a second.
  // connection.h has the details.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds write_timeout{30'000};
  size_t min_write_rate = 1024;  // bytes/s; 0 = no minimum
  size_t max_body_bytes = 8u << 20;             // larger bodies → 413
  size_t max_header_bytes = 16u << 10;          // request line + headers; larger → 431
  int64_t default_max_tokens_completions = 16;  // OpenAI's default for /v1/completions
  RequestLimits limits;
  // Image input (docs/vision.md): the vision projector (--mmproj; without
  // one, image parts get a 400) and the one directory file:// image URLs may
  // name (--image-dir; "" = file:// refused). Remote URLs are never fetched.
  std::shared_ptr<engine::ImageInput> images;
  std::string image_dir;
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one for port 0).
  Expected<int> bind();
  // Serves until stop(); call after bind(), from the thread that will block.
  Status run();
  // Sets the chat template (before attach), e.g. the GGUF's once it is read.
  void set_chat_template(std::string source, std::string origin);
  // The model is loaded: routes start serving. `engine` must outlive the server.
  // Fails (kInvalidArgument) when the chat template does not parse.
  Status attach(engine::Engine* engine);
  // Stops at once: open connections are closed, requests are not answered.
  void stop();
  // The first half of a graceful stop (call stop() after it): new
  // completions get 503 ("shutting_down") and /health 503 at once; requests
  // already running may finish within `grace`; those still running then end
  // with an error (a final SSE error event for a stream). Returns how many
  // were cut off. `reason` (optional) replaces the error's usual message:
  // why the server could not finish them.
  int drain(std::chrono::milliseconds grace, std::string reason = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sustain::server

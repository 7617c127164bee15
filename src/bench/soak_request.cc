#include "bench/soak_request.h"

#include <httplib.h>

#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sustain::bench {

using nlohmann::json;

namespace {

// Requests every OpenAI-compatible server must refuse with a 4xx: broken
// JSON, missing or mistyped fields, values out of range, an unknown route.
struct Malformed {
  const char* name;
  const char* path;
  const char* body;  // "{model}" is replaced by the model's name (JSON-quoted)
};
constexpr Malformed kMalformed[] = {
    {"json_syntax", "/v1/completions", "{\"model\": {model}, \"prompt\": \"unclosed"},
    {"no_prompt", "/v1/completions", "{\"model\": {model}, \"max_tokens\": 4}"},
    {"prompt_type", "/v1/completions", "{\"model\": {model}, \"prompt\": {\"a\": 1}}"},
    {"max_tokens_negative", "/v1/completions",
     "{\"model\": {model}, \"prompt\": \"hi\", \"max_tokens\": -5}"},
    {"temperature_type", "/v1/completions",
     "{\"model\": {model}, \"prompt\": \"hi\", \"temperature\": \"hot\"}"},
    {"messages_type", "/v1/chat/completions", "{\"model\": {model}, \"messages\": \"hello\"}"},
    {"body_not_object", "/v1/completions", "[1, 2, 3]"},
    {"invalid_utf8", "/v1/completions", "{\"model\": {model}, \"prompt\": \"\xff\xfe\"}"},
    {"unknown_route", "/v1/no-such-route", "{\"model\": {model}}"},
};

std::string fill_model(std::string body, const std::string& model) {
  const std::string key = "{model}";
  const size_t at = body.find(key);
  if (at != std::string::npos) body.replace(at, key.size(), json(model).dump());
  return body;
}

// The first choice's text (completions) or message content (chat).
std::string choice_text(const json& j) {
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return "";
  const json& ch = j["choices"][0];
  if (ch.contains("text") && ch["text"].is_string()) return ch["text"].get<std::string>();
  if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
    return ch["delta"]["content"].get<std::string>();
  return "";
}

void read_usage(const json& j, SoakOutcome& o) {
  if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return;
  const json& u = j["usage"];
  if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
    o.completion_tokens = u["completion_tokens"].get<int64_t>();
  if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
    o.prompt_tokens = u["prompt_tokens"].get<int64_t>();
}

// No answer at all: the connection was refused, or broke or timed out
// before a status line.
void no_answer(SoakOutcome& o, const SoakRequest& r, httplib::Error err, double waited_s) {
  o.kind = err == httplib::Error::Connection ? "connect" : "transport";
  o.failed = true;
  o.detail = fmt::format("POST {} ({}): {} after {:.1f} s, no status line", r.path,
                         r.stream ? "stream" : "not streamed", httplib::to_string(err), waited_s);
}

void fail(SoakOutcome& o, const char* kind, std::string detail) {
  o.kind = kind;
  o.failed = true;
  o.detail = std::move(detail);
}

// How an HTTP status ends a request (0 when it is 200 and the body decides).
void classify_status(const SoakRequest& r, int status, const std::string& body, SoakOutcome& o) {
  const std::string what =
      fmt::format("POST {} -> HTTP {}: {}", r.path, status, body.substr(0, 200));
  if (r.malformed) {
    if (status >= 400 && status < 500)
      o.kind = "malformed_4xx";
    else
      fail(o, "malformed_not_4xx", fmt::format("malformed case {}: {}", r.malformed_case, what));
    return;
  }
  if (status == 429) {
    o.kind = "rejected_429";  // the queue was full: overload answered as documented
  } else if (status >= 500) {
    fail(o, "http_5xx", what);
  } else if (status != 200) {
    fail(o, "http_4xx", what);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SoakRequest draw_soak_request(std::mt19937_64& rng, const SoakConfig& c, int64_t index,
                              const std::string& model) {
  std::uniform_real_distribution<double> u01(0, 1);
  SoakRequest r;
  if (u01(rng) < c.malformed_share) {
    const Malformed& m = kMalformed[rng() % (sizeof(kMalformed) / sizeof(kMalformed[0]))];
    r.path = m.path;
    r.body = fill_model(m.body, model);
    r.malformed = true;
    r.malformed_case = m.name;
    return r;
  }
  // Log-uniform lengths: as many short prompts as long ones per octave.
  const double lo = std::log(double(c.min_prompt_tokens)),
               hi = std::log(double(c.max_prompt_tokens));
  const double tokens = std::exp(lo + (hi - lo) * u01(rng));
  // One word a token: SmolLM2's and Qwen's tokenizers make 0.9 to 1 token of
  // each of these words (measured through usage.prompt_tokens), others up to
  // about 1.3, which the started server's context (1.5 x --max-prompt) holds.
  const auto words = std::max<int64_t>(1, static_cast<int64_t>(tokens) - 4);
  const int max_tokens = 8 + static_cast<int>(rng() % std::max(1, c.max_tokens - 7));
  const bool hot = u01(rng) < c.hot_share;
  r.stream = u01(rng) < c.stream_share;
  if (r.stream && u01(rng) < c.disconnect_share)
    r.cut_after_events = 1 + static_cast<int>(rng() % std::max(1, max_tokens / 2));
  json body = {{"model", model},
               {"prompt", word_prompt(c.seed, index, words)},
               {"max_tokens", max_tokens},
               {"temperature", hot ? 0.8 : 0.0},
               {"seed", index},
               {"stream", r.stream}};
  if (r.stream) body["stream_options"] = {{"include_usage", true}};
  r.body = body.dump();
  return r;
}

SoakRequest probe_request(const std::string& model) {
  SoakRequest r;
  r.body = json{
      {"model", model},
      {"prompt", "The determinism probe of the soak: the river runs to the sea and"},
      {"max_tokens", 32},
      {"temperature", 0.0},
      {"ignore_eos", true},
      {"stream",
       false}}.dump();
  return r;
}

SoakOutcome send_soak_request(const HttpUrl& url, const std::string& api_key, const SoakRequest& r,
                              double timeout_s, std::atomic<int64_t>& tokens,
                              const std::atomic<bool>& stop) {
  SoakOutcome o;
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Client cli(url.host, url.port);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(static_cast<time_t>(timeout_s), 0);
  cli.set_write_timeout(static_cast<time_t>(timeout_s), 0);
  httplib::Request req;
  req.method = "POST";
  req.path = url.base_path + r.path;
  if (!api_key.empty()) req.headers.emplace("Authorization", "Bearer " + api_key);
  req.set_header("Content-Type", "application/json");
  req.body = r.body;
  if (!r.stream) {
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    if (!cli.send(req, res, err)) {
      no_answer(o, r, err, seconds_since(t0));
      return o;
    }
    o.status = res.status;
    classify_status(r, res.status, res.body, o);
    if (r.malformed || res.status != 200) return o;
    const json j = json::parse(res.body, nullptr, false);
    if (!j.is_object() || !j.contains("choices")) {
      fail(o, "bad_response", "a 200 body without choices: " + res.body.substr(0, 200));
      return o;
    }
    read_usage(j, o);
    o.text = choice_text(j);
    tokens += o.completion_tokens;
    return o;
  }
  req.headers.emplace("Accept", "text/event-stream");
  SseParser sse;
  std::string raw;
  int events = 0;
  int64_t counted = 0;
  bool done = false, cut = false, at_end = false;
  req.response_handler = [&](const httplib::Response& res) {
    o.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (o.status != 200) {
      raw.append(data, std::min<size_t>(n, 2000));
      return true;
    }
    for (const std::string& ev : sse.feed(data, n)) {
      if (ev == "[DONE]") {
        done = true;
        continue;
      }
      const json j = json::parse(ev, nullptr, false);
      if (!j.is_object()) {
        fail(o, "bad_response", "an SSE event is not JSON: " + ev.substr(0, 200));
        continue;
      }
      if (j.contains("error")) fail(o, "stream_error", "error event: " + j["error"].dump());
      read_usage(j, o);
      const std::string t = choice_text(j);
      if (!t.empty()) {
        o.text += t;
        ++events;
        ++counted;
        ++tokens;
      }
    }
    if (r.cut_after_events > 0 && events >= r.cut_after_events) cut = true;
    if (stop.load()) at_end = true;
    return !cut && !at_end;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  if (o.failed) return o;
  if (cut || at_end) {
    o.kind = cut ? "disconnected" : "cut_at_end";
    return o;
  }
  if (!sent && o.status == 0) {
    no_answer(o, r, err, seconds_since(t0));
    return o;
  }
  classify_status(r, o.status, raw, o);
  if (r.malformed || o.status != 200) return o;
  if (!sent) {
    fail(o, "stream_incomplete",
         fmt::format("POST {}: the stream broke: {}", r.path, httplib::to_string(err)));
  } else if (!done) {
    fail(o, "stream_incomplete", fmt::format("POST {}: no data: [DONE]", r.path));
  } else if (o.completion_tokens > counted) {
    tokens += o.completion_tokens - counted;  // events that carried several tokens
  }
  return o;
}

}  // namespace sustain::bench

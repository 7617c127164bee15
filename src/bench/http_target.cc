#include "bench/http_target.h"

#include <httplib.h>

#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/workloads.h"

namespace sustain::bench {

using nlohmann::json;

Expected<HttpUrl> parse_http_url(const std::string& url) {
  HttpUrl u;
  const std::string kHttp = "http://";
  if (url.rfind(kHttp, 0) != 0)
    return error(Code::kInvalidArgument,
                 "--url '{}': expected http://HOST:PORT (https is not supported by this build)",
                 url);
  u.scheme = "http";
  std::string rest = url.substr(kHttp.size());
  const auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) u.base_path = rest.substr(slash);
  while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
  // "/v1" is where the routes live: accept a URL that already names it.
  if (u.base_path.size() >= 3 && u.base_path.compare(u.base_path.size() - 3, 3, "/v1") == 0)
    u.base_path.resize(u.base_path.size() - 3);
  const auto colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']') == std::string::npos) {
    const std::string port = hostport.substr(colon + 1);
    u.host = hostport.substr(0, colon);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos)
      return error(Code::kInvalidArgument, "--url '{}': port '{}' is not a number", url, port);
    u.port = std::stoi(port);
    if (u.port < 1 || u.port > 65535)
      return error(Code::kInvalidArgument, "--url '{}': port {} is outside 1..65535", url, u.port);
  } else {
    u.host = hostport;
  }
  if (u.host.empty()) return error(Code::kInvalidArgument, "--url '{}': no host", url);
  return u;
}

std::vector<std::string> SseParser::feed(const char* data, size_t n) {
  std::vector<std::string> out;
  buf_.append(data, n);
  size_t start = 0;
  for (;;) {
    const size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = buf_.substr(start, nl - start);
    start = nl + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {  // blank line: the event ends
      if (has_data_) out.push_back(data_);
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line[0] == ':') continue;  // comment / keep-alive
    if (line.rfind("data:", 0) == 0) {
      std::string v = line.substr(5);
      if (!v.empty() && v[0] == ' ') v.erase(0, 1);
      if (has_data_) data_ += "\n";
      data_ += v;
      has_data_ = true;
    }
  }
  buf_.erase(0, start);
  return out;
}

namespace {

// Common short English words: any tokenizer splits them into about one token each.
constexpr const char* kWords[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "that",  "for",   "it",    "as",
    "was",   "with",  "be",    "by",    "on",    "not",   "he",    "this",  "are",   "or",
    "his",   "from",  "at",    "which", "but",   "have",  "an",    "had",   "they",  "you",
    "were",  "their", "one",   "all",   "we",    "can",   "her",   "has",   "there", "been",
    "if",    "more",  "when",  "will",  "would", "who",   "so",    "no",    "time",  "people",
    "water", "river", "house", "light", "world", "small", "large", "place", "years", "number"};

httplib::Headers headers_for(const HttpTargetOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

void set_timeouts(httplib::Client& c, double timeout_s) {
  const auto sec = static_cast<time_t>(timeout_s);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(sec, 0);
  c.set_write_timeout(sec, 0);
}

}  // namespace

Expected<std::unique_ptr<HttpTarget>> HttpTarget::create(const HttpTargetOptions& opt) {
  SUSTAIN_ASSIGN_OR_RETURN(HttpUrl u, parse_http_url(opt.url));
  if (opt.prompt_words < 1)
    return error(Code::kInvalidArgument, "prompt length {} words (need >= 1)", opt.prompt_words);
  if (opt.max_tokens < 1)
    return error(Code::kInvalidArgument, "-n {} (need >= 1 token per request)", opt.max_tokens);
  std::unique_ptr<HttpTarget> t(new HttpTarget(opt, u));
  t->model_ = opt.model;
  if (t->model_.empty()) {
    httplib::Client c(u.host, u.port);
    set_timeouts(c, 30);
    auto r = c.Get(u.base_path + "/v1/models", headers_for(opt));
    if (!r)
      return error(Code::kUnavailable, "--url {}: GET {}/v1/models failed: {}", opt.url,
                   u.base_path, httplib::to_string(r.error()));
    t->model_ = "default";
    if (r->status == 200) {
      const json j = json::parse(r->body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].contains("id") && j["data"][0]["id"].is_string())
        t->model_ = j["data"][0]["id"].get<std::string>();
    }
  }
  return t;
}

std::string word_prompt(uint64_t seed, int64_t index, int64_t words) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index));
  constexpr size_t kN = sizeof(kWords) / sizeof(kWords[0]);
  std::string s = fmt::format("Request {}.", index);
  for (int64_t i = 0; i < words; ++i) {
    s += ' ';
    s += kWords[rng() % kN];
  }
  return s;
}

std::string HttpTarget::prompt(int64_t index) const {
  return word_prompt(opt_.seed, index, opt_.prompt_words);
}

void HttpTarget::set_error(const std::string& e) {
  std::lock_guard<std::mutex> lk(mu_);
  last_error_ = e;
}

std::string HttpTarget::last_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_error_;
}

RequestTiming HttpTarget::run(int64_t index, BenchClock::time_point origin) {
  RequestTiming t;
  json body = {
      {"model", model_},  {"prompt", prompt(index)}, {"max_tokens", opt_.max_tokens},
      {"temperature", 0}, {"stream", true},          {"stream_options", {{"include_usage", true}}}};
  if (opt_.ignore_eos) body["ignore_eos"] = true;
  if (const BenchChain& chain = opt_.chain; chain.temperature > 0.0f) {
    body["temperature"] = chain.temperature;
    body["top_k"] = chain.top_k;
    body["top_p"] = chain.top_p;
    body["min_p"] = chain.min_p;
    body["seed"] = opt_.seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1));
  }
  // Completions' logprobs: the number of alternatives (0: the token's own).
  if (opt_.chain.top_logprobs >= 0) body["logprobs"] = opt_.chain.top_logprobs;
  if (!opt_.json_schema.is_null()) {
    body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "bench"}, {"schema", opt_.json_schema}, {"strict", true}}}};
    body["json_schema"] = opt_.json_schema;
  }
  httplib::Client c(url_.host, url_.port);
  set_timeouts(c, opt_.timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = url_.base_path + "/v1/completions";
  req.headers = headers_for(opt_);
  req.headers.emplace("Accept", "text/event-stream");
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  SseParser sse;
  bool got_usage = false, done = false;
  std::string problem, raw;
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = seconds_between(origin, BenchClock::now());
    if (status != 200) {
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
        problem = "an SSE event is not JSON: " + ev.substr(0, 200);
        continue;
      }
      if (j.contains("error")) problem = "server error: " + j["error"].dump();
      // Only events whose text is non-empty are emissions the user sees; a
      // role-only, empty or usage-only chunk is not.
      if (j.contains("choices") && j["choices"].is_array()) {
        for (const auto& ch : j["choices"]) {
          if (ch.contains("text") && ch["text"].is_string() &&
              !ch["text"].get<std::string>().empty()) {
            t.token_times.push_back(now);
            break;
          }
        }
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        const auto& u = j["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
          t.output_tokens = u["completion_tokens"].get<int64_t>();
          got_usage = true;
        }
        if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
          t.prompt_tokens = u["prompt_tokens"].get<int64_t>();
      }
    }
    return true;
  };
  t.t_submit = seconds_between(origin, BenchClock::now());
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = c.send(req, res, err);
  t.t_end = seconds_between(origin, BenchClock::now());
  if (!sent) {
    problem = fmt::format("POST {}: {}", req.path, httplib::to_string(err));
  } else if (status != 200) {
    problem = fmt::format("POST {}: HTTP {}: {}", req.path, status, raw.substr(0, 300));
  } else if (!problem.empty()) {
    // What the stream itself said (an error event, an event that is not
    // JSON) names the cause better than what it then lacked.
    problem = fmt::format("POST {}: {}", req.path, problem);
  } else if (!got_usage) {
    problem = fmt::format(
        "POST {}: the stream ended without a usage chunk (the server must honour "
        "stream_options.include_usage; tokens are counted from it)",
        req.path);
  } else if (t.token_times.empty()) {
    problem = fmt::format("POST {}: no text event in the stream", req.path);
  } else if (!done) {
    problem = fmt::format("POST {}: the stream ended without data: [DONE]", req.path);
  }
  if (!problem.empty()) {
    t.ok = false;
    set_error(problem);
  }
  return t;
}

}  // namespace sustain::bench

// A LoadTarget that drives any OpenAI-compatible server (sustain serve,
// llama.cpp's llama-server, vLLM) through streaming /v1/completions:
// tokens are counted from the final `usage` chunk (stream_options.
// include_usage), and each SSE event that carries text is one emission, timed
// on arrival — so ITL is the gap between events, which may carry more than
// one token on servers that batch their flushes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/load.h"
#include "bench/workloads.h"

namespace sustain::bench {

struct HttpUrl {
  std::string scheme, host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing slash)
};
// Parses http://HOST[:PORT][/PATH]. kInvalidArgument naming the URL for
// anything else (https is not built in: cpp-httplib without OpenSSL).
Expected<HttpUrl> parse_http_url(const std::string& url);

// Splits a text/event-stream into events' data payloads, across chunk
// boundaries ("data: x\n\n"; several data lines of one event are joined with
// "\n"; comments and other fields are ignored).
class SseParser {
 public:
  // Returns the payloads of the events completed by `chunk`.
  std::vector<std::string> feed(const char* data, size_t n);

 private:
  std::string buf_, data_;
  bool has_data_ = false;
};

// "Request INDEX." and `words` common English words drawn with (seed,
// index): about 1.3 tokens a word in any tokenizer, and prompts of
// different indices share no prefix past their first word.
std::string word_prompt(uint64_t seed, int64_t index, int64_t words);

struct HttpTargetOptions {
  std::string url;
  std::string model;    // "model" field; "" = the first id of GET /v1/models, else "default"
  std::string api_key;  // sent as "Authorization: Bearer ..." when set
  int64_t prompt_words = 512;
  int32_t max_tokens = 64;
  bool ignore_eos = true;  // llama-server and vLLM honour it; generation length stays fixed
  uint64_t seed = 1234;
  // Temperature 0: greedy. Above 0: sent with the chain's top_k, top_p and
  // min_p and a seed per request (bench --temp), so the server pays for
  // sampling.
  BenchChain chain;
  double timeout_s = 600;
  // A JSON schema each request is constrained by (null: none). It goes out
  // twice: as OpenAI's `response_format` (json_schema) and as llama-server's
  // own `json_schema` field, the one its /v1/completions reads; each server
  // reads its own and leaves the other alone.
  nlohmann::json json_schema;
};

class HttpTarget : public LoadTarget {
 public:
  // Checks the URL; with an empty model, asks GET /v1/models (an endpoint
  // that does not answer is reported here, naming the URL).
  static Expected<std::unique_ptr<HttpTarget>> create(const HttpTargetOptions& opt);

  RequestTiming run(int64_t index, BenchClock::time_point origin) override;
  std::string last_error() const override;
  const std::string& model() const { return model_; }
  // The prompt text of request `index`: seeded common English words, so
  // every engine's tokenizer gives about prompt_words × 1.3 tokens.
  std::string prompt(int64_t index) const;

 private:
  HttpTarget(HttpTargetOptions o, HttpUrl u) : opt_(std::move(o)), url_(std::move(u)) {}
  void set_error(const std::string& e);
  HttpTargetOptions opt_;
  HttpUrl url_;
  std::string model_;
  mutable std::mutex mu_;
  std::string last_error_;
};

}  // namespace sustain::bench

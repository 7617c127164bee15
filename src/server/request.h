// OpenAI request bodies → a typed, validated CompletionRequest. Everything a
// client sends is checked here, before any engine work: JSON syntax and
// nesting, field types, ranges (NaN and infinities included), counts and
// sizes. Errors are kInvalidArgument naming the field and the value.
// Checks that need the model (prompt length against the context, token ids
// against the vocabulary) are the functions at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/api.h"

namespace sustain::grammar {
struct Grammar;
}

namespace sustain::server {

enum class Endpoint { kCompletions, kChat };

struct RequestLimits {
  int max_n = 8;                // choices per request
  int max_stop = 4;             // stop strings (OpenAI's limit)
  size_t max_stop_bytes = 256;  // bytes per stop string
  int max_json_depth = 64;      // nesting of the request body
  size_t max_messages = 4096;   // chat messages per request
  size_t max_images = 16;       // image_url parts per request
};

// tool_choice (tool_calls.h): kAuto unless the client says otherwise.
struct ToolChoice {
  enum Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = kAuto;
  std::string name;  // kNamed
  // parallel_tool_calls (default true): false reads at most one call from a
  // reply, and a forced call is exactly one.
  bool parallel = true;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // /v1/completions: a text prompt, or token ids when prompt_is_ids.
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  // /v1/chat/completions, in the request's key order (templates that print
  // tool schemas with tojson show it, as Python's Jinja does).
  nlohmann::ordered_json messages;  // array of message objects
  // Chat image parts ({"type":"image_url","image_url":{"url":...}}), in
  // order; in `messages` each has become a text part holding the
  // `<__media__>` marker, as llama.cpp's server passes them to templates.
  struct ImagePart {
    std::string name;  // "messages[i].content[k]", for errors
    std::string url;   // data: URI, file:// or remote (refused later)
  };
  std::vector<ImagePart> images;
  nlohmann::ordered_json tools;     // null when absent
  ToolChoice tool_choice;
  nlohmann::ordered_json chat_template_kwargs;  // object, or null when absent
  std::optional<int64_t> max_tokens;            // max_tokens / max_completion_tokens
  int n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;  // alternatives per token (0..engine::kMaxTopLogprobs)
  bool echo = false;
  bool ignore_eos = false;
  bool speculative = true;  // "speculative": false opts out of the server's --spec
  double tpot_target_ms = 0;  // "tpot_target_ms": tightens the server's --tpot-target
  // OpenAI's defaults: temperature 1, top_p 1, no top-k / min-p / penalties.
  sampling::SamplerConfig sampling = openai_sampling_defaults();
  bool has_seed = false;
  // Structured output (structured.h): the grammar every choice must follow,
  // null for none, and the field it came from ("response_format" or
  // "grammar") for errors found with the model.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::string grammar_param;
  // What the grammar was compiled from (kind and text), so requests with the
  // same constraint share one, with its cache of masks.
  std::string grammar_source;
  // A control token whose text the reply keeps, so that calls marked by it
  // can be read (Mistral's [TOOL_CALLS]); -1 for none.
  int32_t keep_token = -1;

  static sampling::SamplerConfig openai_sampling_defaults() {
    sampling::SamplerConfig c;
    c.temperature = 1.0f;
    c.top_k = 0;
    c.top_p = 1.0f;
    c.min_p = 0.0f;
    c.repeat_penalty = 1.0f;
    c.presence_penalty = 0.0f;
    c.frequency_penalty = 0.0f;
    return c;
  }
};

// Parses and validates a request body for `endpoint`.
Expected<CompletionRequest> parse_request(std::string_view body, Endpoint endpoint,
                                          const RequestLimits& limits);

// Deepest nesting of arrays/objects in a JSON text (strings skipped), counted
// without recursion so a hostile body cannot exhaust the stack.
int json_depth(std::string_view text);

// Every id in [0, n_vocab); the message names the first id outside.
Status check_token_ids(const std::vector<int32_t>& ids, int32_t n_vocab);
// Every logit_bias key names a token of the vocabulary (OpenAI answers 400
// for one that does not; ignoring it would hide the client's mistake).
Status check_logit_bias(const sampling::SamplerConfig& s, int32_t n_vocab);

// The prompt must leave room for one generated token, and max_tokens (when
// given) must fit beside the prompt; the messages give both numbers. Returns
// the max_tokens to submit: as given, or `default_max` clipped to the room.
Expected<int32_t> resolve_max_tokens(const CompletionRequest& r, int64_t n_prompt, int64_t n_ctx,
                                     int64_t default_max);

}  // namespace sustain::server

#include "server/request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "server/structured.h"
#include "server/tool_calls.h"

namespace sustain::server {
namespace {

using nlohmann::json;

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    default:
      return "unknown";
  }
}

Status invalid(const std::string& field, const std::string& what) {
  return Status(Code::kInvalidArgument, fmt::format("'{}' {}", field, what));
}

Status wrong_type(const std::string& field, const char* want, const json& got) {
  return invalid(field, fmt::format("must be {}, got {}", want, type_name(got)));
}

// The field's value, or nullptr when absent or null (OpenAI clients send
// null for "not set").
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Status get_bool(const json& obj, const char* key, bool& out) {
  const json* v = field(obj, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  out = v->get<bool>();
  return Status::ok();
}

Status get_int(const json& obj, const char* key, int64_t lo, int64_t hi, int64_t& out,
               bool* present = nullptr) {
  const json* v = field(obj, key);
  if (v == nullptr) return Status::ok();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      return invalid(key, fmt::format("must be in [{}, {}], got {}", lo, hi, u));
    out = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      return invalid(key, fmt::format("must be in [{}, {}], got {}", lo, hi, x));
    out = x;
  } else {
    return wrong_type(key, "an integer", *v);
  }
  if (present != nullptr) *present = true;
  return Status::ok();
}

// A finite number in [lo, hi] (or (lo, hi] with lo_open).
Status get_float(const json& obj, const char* key, double lo, double hi, bool lo_open, float& out) {
  const json* v = field(obj, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  const bool below = lo_open ? !(x > lo) : !(x >= lo);
  if (!std::isfinite(x) || below || x > hi)
    return invalid(key,
                   fmt::format("must be in {}{}, {}], got {}", lo_open ? "(" : "[", lo, hi, x));
  out = static_cast<float>(x);
  return Status::ok();
}

Status parse_stop(const json& body, const RequestLimits& lim, std::vector<std::string>& out) {
  const json* v = field(body, "stop");
  if (v == nullptr) return Status::ok();
  std::vector<const json*> items;
  if (v->is_string()) {
    items.push_back(v);
  } else if (v->is_array()) {
    if (v->size() > static_cast<size_t>(lim.max_stop))
      return invalid(
          "stop", fmt::format("has {} strings, at most {} are allowed", v->size(), lim.max_stop));
    for (const auto& s : *v) items.push_back(&s);
  } else {
    return wrong_type("stop", "a string or an array of strings", *v);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const json& s = *items[i];
    const std::string name = v->is_array() ? fmt::format("stop[{}]", i) : "stop";
    if (!s.is_string()) return wrong_type(name, "a string", s);
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) return invalid(name, "must not be empty");
    if (str.size() > lim.max_stop_bytes)
      return invalid(name, fmt::format("is {} bytes long, at most {} are allowed", str.size(),
                                       lim.max_stop_bytes));
    out.push_back(str);
  }
  return Status::ok();
}

Status parse_prompt(const json& body, CompletionRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr) return invalid("prompt", "is required");
  // A one-element array of strings is the same as the string.
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text.empty()) return invalid("prompt", "must not be empty");
    return Status::ok();
  }
  if (!p->is_array()) return wrong_type("prompt", "a string or an array of token ids", *p);
  if (p->empty()) return invalid("prompt", "must not be empty");
  if (p->size() == 1 && (*p)[0].is_array()) p = &(*p)[0];
  if (p->empty()) return invalid("prompt", "must not be empty");
  r.prompt_is_ids = true;
  r.prompt_ids.reserve(p->size());
  for (size_t i = 0; i < p->size(); ++i) {
    const json& t = (*p)[i];
    if (t.is_string() || t.is_array())
      return invalid("prompt",
                     "holds several prompts; this server takes one prompt per request "
                     "(use n for several completions)");
    if (!t.is_number_integer())
      return wrong_type(fmt::format("prompt[{}]", i), "an integer token id", t);
    if (t.is_number_unsigned() ? t.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)
                               : (t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX))
      return invalid(fmt::format("prompt[{}]", i),
                     fmt::format("is token id {}, outside [0, {}]", t.dump(), INT32_MAX));
    r.prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return Status::ok();
}

Status parse_messages(const json& body, std::string_view text, const RequestLimits& lim,
                      CompletionRequest& r) {
  const json* m = field(body, "messages");
  if (m == nullptr) return invalid("messages", "is required");
  if (!m->is_array()) return wrong_type("messages", "an array of message objects", *m);
  if (m->empty()) return invalid("messages", "must not be empty");
  if (m->size() > lim.max_messages)
    return invalid("messages", fmt::format("has {} messages, at most {} are allowed", m->size(),
                                           lim.max_messages));
  size_t n_images = 0;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!msg.is_object()) return wrong_type(name, "an object", msg);
    const json* role = field(msg, "role");
    if (role == nullptr) return invalid(name + ".role", "is required");
    if (!role->is_string()) return wrong_type(name + ".role", "a string", *role);
    const json* content = field(msg, "content");
    if (content == nullptr) {
      // Only an assistant message that calls tools may leave content out.
      if (*role != "assistant" || field(msg, "tool_calls") == nullptr)
        return invalid(name + ".content", "is required");
      continue;
    }
    if (content->is_string()) continue;
    if (!content->is_array())
      return wrong_type(name + ".content", "a string or an array of content parts", *content);
    for (size_t k = 0; k < content->size(); ++k) {
      const json& part = (*content)[k];
      const std::string pname = fmt::format("{}.content[{}]", name, k);
      if (!part.is_object()) return wrong_type(pname, "an object", part);
      const json* type = field(part, "type");
      if (type == nullptr || !type->is_string())
        return invalid(pname + ".type", "must be a string");
      if (*type == "image_url") {
        const json* iu = field(part, "image_url");
        if (iu == nullptr) return invalid(pname + ".image_url", "is required");
        if (!iu->is_object())
          return wrong_type(pname + ".image_url", "an object with a \"url\"", *iu);
        const json* url = field(*iu, "url");
        if (url == nullptr || !url->is_string())
          return invalid(pname + ".image_url.url", "must be a string");
        if (++n_images > lim.max_images)
          return invalid(pname, fmt::format("is image part {}; at most {} are allowed per request",
                                            n_images, lim.max_images));
        continue;
      }
      if (*type != "text")
        return Status(Code::kInvalidArgument,
                      fmt::format("'{}.type' is \"{}\"; this server accepts \"text\" and "
                                  "\"image_url\" parts",
                                  pname, type->get<std::string>()));
      const json* text = field(part, "text");
      if (text == nullptr || !text->is_string())
        return invalid(pname + ".text", "must be a string");
    }
  }
  if (const json* t = field(body, "tools"); t != nullptr && !t->is_array())
    return wrong_type("tools", "an array", *t);
  if (const json* k = field(body, "chat_template_kwargs"); k != nullptr && !k->is_object())
    return wrong_type("chat_template_kwargs", "an object", *k);
  // Validated above; taken again from the text with the key order kept.
  nlohmann::ordered_json o = nlohmann::ordered_json::parse(text);
  r.messages = std::move(o["messages"]);
  // Image parts become the marker, as text parts, in order.
  for (size_t i = 0; i < r.messages.size(); ++i) {
    auto& content = r.messages[i]["content"];
    if (!content.is_array()) continue;
    for (size_t k = 0; k < content.size(); ++k) {
      auto& part = content[k];
      if (part["type"] != "image_url") continue;
      r.images.push_back({fmt::format("messages[{}].content[{}]", i, k),
                          part["image_url"]["url"].get<std::string>()});
      part = nlohmann::ordered_json{{"type", "text"}, {"text", "<__media__>"}};
    }
  }
  if (auto it = o.find("tools"); it != o.end() && it->is_array() && !it->empty())
    r.tools = std::move(*it);
  if (auto it = o.find("chat_template_kwargs"); it != o.end() && it->is_object())
    r.chat_template_kwargs = std::move(*it);
  return Status::ok();
}

// OpenAI's logit_bias: {"<token id>": bias}, bias in [-100, 100]. Keys are
// decimal token ids; the vocabulary bound is checked with the model
// (check_logit_bias). Entries end up sorted by id.
Status parse_logit_bias(const json& j, sampling::SamplerConfig& s) {
  const json* lb = field(j, "logit_bias");
  if (lb == nullptr) return Status::ok();
  if (!lb->is_object())
    return wrong_type("logit_bias", "an object mapping token ids to biases", *lb);
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  for (const auto& [key, value] : lb->items()) {
    int64_t id = 0;
    bool digits = !key.empty() && key.size() <= 10;
    for (char ch : key) digits = digits && ch >= '0' && ch <= '9';
    if (digits) {
      for (char ch : key) id = id * 10 + (ch - '0');
    }
    if (!digits || id > kMaxId)
      return invalid("logit_bias", fmt::format("key '{}' is not a token id (a decimal integer)",
                                               key.substr(0, 64)));
    const std::string name = fmt::format("logit_bias[\"{}\"]", key);
    if (!value.is_number()) return wrong_type(name, "a number", value);
    const double b = value.get<double>();
    if (!std::isfinite(b) || b < -sampling::kMaxLogitBias || b > sampling::kMaxLogitBias)
      return invalid(name, fmt::format("must be in [-100, 100], got {}", value.dump()));
    s.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(b)});
  }
  std::sort(s.logit_bias.begin(), s.logit_bias.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  for (size_t i = 1; i < s.logit_bias.size(); ++i)
    if (s.logit_bias[i].id == s.logit_bias[i - 1].id)
      return invalid("logit_bias", fmt::format("names token {} twice (keys with leading zeros?)",
                                               s.logit_bias[i].id));
  return Status::ok();
}

Status parse_logprobs(const json& body, Endpoint ep, CompletionRequest& r) {
  int64_t top = 0;
  if (ep == Endpoint::kCompletions) {
    // Legacy completions: `logprobs` is the number of alternatives (0..5 in
    // OpenAI's API; up to the engine's bound here).
    const json* v = field(body, "logprobs");
    if (v == nullptr) return Status::ok();
    if (v->is_boolean()) {
      r.logprobs = v->get<bool>();
    } else {
      SUSTAIN_TRY(get_int(body, "logprobs", 0, engine::kMaxTopLogprobs, top));
      r.logprobs = true;
      r.top_logprobs = static_cast<int>(top);
    }
    return Status::ok();
  }
  SUSTAIN_TRY(get_bool(body, "logprobs", r.logprobs));
  bool has_top = false;
  SUSTAIN_TRY(get_int(body, "top_logprobs", 0, engine::kMaxTopLogprobs, top, &has_top));
  if (has_top && !r.logprobs && top > 0) return invalid("top_logprobs", "needs 'logprobs': true");
  r.top_logprobs = static_cast<int>(top);
  return Status::ok();
}

}  // namespace

int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

Expected<CompletionRequest> parse_request(std::string_view body, Endpoint endpoint,
                                          const RequestLimits& lim) {
  if (body.empty())
    return Status(Code::kInvalidArgument, "the request body is empty; send a JSON object");
  if (const int d = json_depth(body); d > lim.max_json_depth)
    return error(Code::kInvalidArgument,
                 "the request body nests {} levels deep, at most {} are allowed", d,
                 lim.max_json_depth);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // nlohmann's message names the byte position and what it found (also for
    // invalid UTF-8 inside strings).
    return error(Code::kInvalidArgument, "the request body is not valid JSON: {}", e.what());
  }
  if (!j.is_object())
    return error(Code::kInvalidArgument, "the request body must be a JSON object, got {}",
                 type_name(j));

  CompletionRequest r;
  r.endpoint = endpoint;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) return wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    SUSTAIN_TRY(parse_prompt(j, r));
    SUSTAIN_TRY(get_bool(j, "echo", r.echo));
    if (r.echo) return invalid("echo", "is not supported by this server");
    if (const json* s = field(j, "suffix"))
      return invalid("suffix",
                     fmt::format("is not supported by this server (got a {})", type_name(*s)));
    int64_t best_of = 1;
    SUSTAIN_TRY(get_int(j, "best_of", 1, 1, best_of));
  } else {
    SUSTAIN_TRY(parse_messages(j, body, lim, r));
    SUSTAIN_TRY(parse_tool_choice(j, r));
  }

  const int64_t kMaxTokensField = std::numeric_limits<int32_t>::max();
  int64_t max_tokens = 0;
  bool has_max = false;
  // max_tokens ≤ 0 gets its own message, before the range check.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const json* v = field(j, key);
    if (v == nullptr) continue;
    if (v->is_number_integer() &&
        (v->is_number_unsigned() ? v->get<uint64_t>() == 0 : v->get<int64_t>() <= 0))
      return invalid(key, fmt::format("must be at least 1, got {}", v->get<int64_t>()));
    SUSTAIN_TRY(get_int(j, key, 1, kMaxTokensField, max_tokens, &has_max));
  }
  if (has_max) r.max_tokens = max_tokens;

  int64_t n = 1;
  if (const json* v = field(j, "n");
      v != nullptr && v->is_number_integer() &&
      (v->is_number_unsigned() ? v->get<uint64_t>() > uint64_t(lim.max_n)
                               : v->get<int64_t>() > lim.max_n))
    return invalid("n", fmt::format("is {}, this server allows at most {} choices per request",
                                    v->dump(), lim.max_n));
  SUSTAIN_TRY(get_int(j, "n", 1, lim.max_n, n));
  r.n = static_cast<int>(n);

  SUSTAIN_TRY(parse_stop(j, lim, r.stop));
  SUSTAIN_TRY(get_bool(j, "stream", r.stream));
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    if (!r.stream) return invalid("stream_options", "is only allowed with 'stream': true");
    const json* u = field(*so, "include_usage");
    if (u != nullptr) {
      if (!u->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *u);
      r.include_usage = u->get<bool>();
    }
  }
  SUSTAIN_TRY(parse_logprobs(j, endpoint, r));
  SUSTAIN_TRY(get_bool(j, "ignore_eos", r.ignore_eos));
  SUSTAIN_TRY(get_bool(j, "speculative", r.speculative));
  float tpot = 0;
  SUSTAIN_TRY(get_float(j, "tpot_target_ms", 0.0, 1e6, true, tpot));
  r.tpot_target_ms = tpot;

  auto& s = r.sampling;
  SUSTAIN_TRY(get_float(j, "temperature", 0.0, 2.0, false, s.temperature));
  SUSTAIN_TRY(get_float(j, "top_p", 0.0, 1.0, true, s.top_p));
  SUSTAIN_TRY(get_float(j, "min_p", 0.0, 1.0, false, s.min_p));
  int64_t top_k = 0;
  SUSTAIN_TRY(get_int(j, "top_k", 0, 1 << 20, top_k));
  s.top_k = static_cast<int32_t>(top_k);
  const double kPen = sampling::kMaxPresenceFrequencyPenalty;
  SUSTAIN_TRY(get_float(j, "presence_penalty", -kPen, kPen, false, s.presence_penalty));
  SUSTAIN_TRY(get_float(j, "frequency_penalty", -kPen, kPen, false, s.frequency_penalty));
  // vLLM's name and llama.cpp's name for the multiplicative penalty.
  SUSTAIN_TRY(
      get_float(j, "repetition_penalty", 0.0, sampling::kMaxRepeatPenalty, true, s.repeat_penalty));
  SUSTAIN_TRY(
      get_float(j, "repeat_penalty", 0.0, sampling::kMaxRepeatPenalty, true, s.repeat_penalty));
  int64_t last_n = s.repeat_last_n;
  SUSTAIN_TRY(get_int(j, "repeat_last_n", 0, 1 << 16, last_n));
  s.repeat_last_n = static_cast<int32_t>(last_n);
  SUSTAIN_TRY(parse_logit_bias(j, s));
  if (const json* seed = field(j, "seed")) {
    if (!seed->is_number_integer()) return wrong_type("seed", "an integer", *seed);
    // Negative seeds are valid in OpenAI's API; their bits are the seed.
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
    r.has_seed = true;
  }
  SUSTAIN_TRY(parse_structured_output(j, body, r));
  // The engine validates the sampler again at submit (sampling::validate);
  // the ranges above are OpenAI's, at least as strict as the sampler's.
  return r;
}

Status check_token_ids(const std::vector<int32_t>& ids, int32_t n_vocab) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab)
      return error(Code::kInvalidArgument,
                   "'prompt[{}]' is token id {}, outside the vocabulary [0, {})", i, ids[i],
                   n_vocab);
  return Status::ok();
}

Status check_logit_bias(const sampling::SamplerConfig& s, int32_t n_vocab) {
  for (const auto& b : s.logit_bias)
    if (b.id >= n_vocab)
      return error(Code::kInvalidArgument,
                   "'logit_bias' key '{}' is not a token id of this model (the vocabulary is [0, "
                   "{}))",
                   b.id, n_vocab);
  return Status::ok();
}

Expected<int32_t> resolve_max_tokens(const CompletionRequest& r, int64_t n_prompt, int64_t n_ctx,
                                     int64_t default_max) {
  if (n_prompt + 1 > n_ctx)
    return error(Code::kInvalidArgument,
                 "the prompt is {} tokens long, but the context holds {} tokens (prompt plus at "
                 "least one generated token)",
                 n_prompt, n_ctx);
  const int64_t room = n_ctx - n_prompt;
  if (r.max_tokens.has_value()) {
    if (*r.max_tokens > room)
      return error(Code::kInvalidArgument,
                   "'max_tokens' is {}, but the prompt is {} tokens long and the context holds {} "
                   "tokens: at most {} tokens can be generated",
                   *r.max_tokens, n_prompt, n_ctx, room);
    return static_cast<int32_t>(*r.max_tokens);
  }
  return static_cast<int32_t>(std::min(default_max > 0 ? default_max : room, room));
}

}  // namespace sustain::server

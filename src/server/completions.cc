// POST /v1/completions and /v1/chat/completions: validate, build the prompt,
// submit n engine requests, then answer in one JSON body or as server-sent
// events. The handler thread polls its streams every kPollInterval and checks
// the socket, so a client that disconnects (mid-prefill or mid-stream) has
// its requests cancelled within one poll plus one engine step.
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "grammar/constraint.h"
#include "server/connection.h"
#include "server/generation.h"
#include "server/media.h"
#include "server/server_state.h"
#include "server/sse.h"
#include "server/tool_call_stream.h"
#include "server/tool_calls.h"

namespace sustain::server {
namespace {

using nlohmann::json;
constexpr std::chrono::milliseconds kPollInterval(25);

// One completion in flight: what the streaming content provider keeps alive
// after the handler returns.
struct Job {
  explicit Job(std::atomic<int>& active) : counted(active) {}
  ActiveRequest counted;  // destroyed last of all: the response has ended
  CompletionRequest req;
  std::string id;
  int64_t created = 0;
  std::string model;
  std::unique_ptr<Generation> gen;
  // Streaming state.
  std::vector<bool> role_sent;
  // Tool calls are read from the text (kNone: no tools, or tool_choice none);
  // streaming holds back what may be a call and streams calls as they come.
  ToolSyntax tools = ToolSyntax::kNone;
  // Text the reply starts with that the model did not write (Mistral's
  // [TOOL_CALLS], put at the end of the prompt to force a call).
  std::string reply_prefix;
  std::vector<ToolCallStream> tool_streams;
  std::vector<int64_t> lp_offset;
  bool finished_stream = false;
  int socket = -1;  // the client's connection, polled for a disconnect
};

ApiError shutting_down(std::string message) {
  return ApiError{503, "server_error", std::move(message), "", "shutting_down"};
}

std::string new_id(Endpoint ep) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", rng());
}

json usage_json(const Generation& g) {
  json u = {{"prompt_tokens", g.prompt_tokens()},
            {"completion_tokens", g.completion_tokens()},
            {"total_tokens", g.prompt_tokens() + g.completion_tokens()}};
  u["prompt_tokens_details"] = {{"cached_tokens", g.cached_prompt_tokens()}};
  if (g.spec_steps() > 0)
    u["speculative"] = {
        {"drafted", g.spec_drafted()}, {"accepted", g.spec_accepted()}, {"steps", g.spec_steps()}};
  return u;
}

// Builds the prompt's token ids, or the 400 that explains why not.
Expected<std::vector<int32_t>> prompt_ids(ServerState& s, engine::Engine& e,
                                          const CompletionRequest& r,
                                          std::shared_ptr<const engine::MediaPrompt>* media) {
  const auto& tok = e.tokenizer();
  SUSTAIN_TRY(check_logit_bias(r.sampling, tok.n_vocab()));
  if (r.endpoint == Endpoint::kCompletions && r.prompt_is_ids) {
    SUSTAIN_TRY(check_token_ids(r.prompt_ids, tok.n_vocab()));
    return r.prompt_ids;
  }
  std::string text;
  if (r.endpoint == Endpoint::kChat) {
    if (!s.chat)
      return Status(Code::kInvalidArgument,
                    "this model has no chat template (tokenizer.chat_template); start the server "
                    "with --chat-template-file, or use /v1/completions");
    SUSTAIN_ASSIGN_OR_RETURN(text, s.chat->render(r));
    if (!r.images.empty()) {
      SUSTAIN_ASSIGN_OR_RETURN(*media, image_prompt(s.config, tok, text, r,
                                                    e.model().config().n_embd, e.config().n_ctx));
      return (*media)->ids;
    }
  } else {
    text = r.prompt_text;
  }
  // Special-token text in the prompt becomes those tokens, as in llama.cpp's
  // server: chat templates write them as text.
  auto ids = tok.encode(text, true, true);
  if (!ids) return ids.status().with_context("prompt");
  if (ids->empty()) return Status(Code::kInvalidArgument, "'prompt' tokenizes to no tokens");
  return ids;
}

// Turns the request's grammar into the sampler's constraint; a 400 naming
// the field when no token of this vocabulary can start it.
Status attach_constraint(ServerState& s, engine::Engine& e, CompletionRequest& r) {
  if (!r.grammar) return Status::ok();
  std::call_once(s.grammar_vocab_once,
                 [&] { s.grammar_vocab = grammar::TokenVocab::from_tokenizer(e.tokenizer()); });
  if (auto c = s.constraints.find(r.grammar_source)) {
    r.sampling.constraint = std::move(c);
    return Status::ok();
  }
  auto c = std::make_shared<grammar::GrammarConstraint>(r.grammar, s.grammar_vocab);
  if (Status st = c->check_startable(); !st)
    return error(Code::kInvalidArgument, "'{}' cannot be used with this model: {}", r.grammar_param,
                 st.message());
  s.constraints.insert(r.grammar_source, c);
  r.sampling.constraint = std::move(c);
  return Status::ok();
}

json tool_calls_json(ToolSyntax syntax, const std::vector<ToolCall>& calls) {
  json a = json::array();
  for (const ToolCall& call : calls)
    a.push_back({{"id", new_call_id(syntax)},
                 {"type", "function"},
                 {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  return a;
}

// The id of the control token that starts Mistral's calls, or -1 when the
// vocabulary has no such single control token.
int32_t mistral_calls_token(const tokenizer::Tokenizer& tok) {
  auto ids = tok.encode(kMistralCallsToken, false, true);
  if (!ids || ids->size() != 1 || !tok.token_to_piece((*ids)[0], false).empty()) return -1;
  return (*ids)[0];
}

// The forced-call grammar for tool_choice "required" or a named function,
// and which call format to read back; a 400 when the template has none.
Status prepare_tools(ServerState& s, const engine::Engine& e, Job& job) {
  CompletionRequest& r = job.req;
  if (r.endpoint != Endpoint::kChat || r.tools.is_null() || r.tool_choice.mode == ToolChoice::kNone)
    return Status::ok();
  const ToolSyntax syntax = s.chat ? s.chat->tool_syntax() : ToolSyntax::kNone;
  const bool forced =
      r.tool_choice.mode == ToolChoice::kRequired || r.tool_choice.mode == ToolChoice::kNamed;
  if (forced) {
    if (syntax == ToolSyntax::kNone)
      return Status(Code::kInvalidArgument,
                    "'tool_choice' forces a call, but this model's chat template writes tool "
                    "calls in a format this server does not know (Hermes/Qwen <tool_call>, "
                    "Llama 3 JSON and Mistral [TOOL_CALLS] are supported)");
    if (r.grammar)
      return Status(Code::kInvalidArgument,
                    "'tool_choice' forcing a call cannot be combined with 'response_format' or "
                    "'grammar'");
    SUSTAIN_ASSIGN_OR_RETURN(r.grammar, forced_call_grammar(syntax, r.tools, r.tool_choice));
    r.grammar_param = "tool_choice";
    r.grammar_source = fmt::format("tools:{}:{}:{}:{}", static_cast<int>(syntax),
                                   r.tool_choice.name, r.tool_choice.parallel, r.tools.dump());
  }
  if (syntax == ToolSyntax::kMistral) {
    // The marker is a control token: the reply keeps its text so the calls
    // can be found, and a forced call starts with it in the prompt.
    r.keep_token = mistral_calls_token(e.tokenizer());
    if (r.keep_token < 0)
      return Status(Code::kInvalidArgument,
                    "this model's chat template writes Mistral tool calls, but its vocabulary "
                    "has no [TOOL_CALLS] control token");
    if (forced) job.reply_prefix = std::string(kMistralCallsToken);
  }
  job.tools = syntax;
  return Status::ok();
}

json choice_json(const Job& job, int index, const std::string& text, const json& logprobs,
                 const char* finish) {
  json c = {{"index", index}};
  if (job.req.endpoint == Endpoint::kChat && job.tools != ToolSyntax::kNone) {
    const ToolReply rep =
        read_reply(job.tools, job.reply_prefix, text, job.req.tool_choice.parallel);
    const bool calls = !rep.calls.empty();
    const size_t a = rep.content.find_first_not_of(" \t\r\n");
    c["message"] = {{"role", "assistant"},
                    {"content", calls && a == std::string::npos ? json() : json(rep.content)}};
    if (calls) {
      c["message"]["tool_calls"] = tool_calls_json(job.tools, rep.calls);
      if (finish != nullptr && std::string(finish) == "stop") finish = "tool_calls";
    }
  } else if (job.req.endpoint == Endpoint::kChat) {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    c["text"] = text;
  }
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish != nullptr ? json(finish) : json();
  return c;
}

json envelope(const Job& job, bool chunk) {
  const bool chat = job.req.endpoint == Endpoint::kChat;
  return {
      {"id", job.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", job.created},
      {"model", job.model},
      {"system_fingerprint", nullptr}};
}

void run_blocking(ServerState& s, Job& job, httplib::Response& res) {
  const int n = job.gen->n();
  std::vector<std::string> text(n);
  std::vector<std::vector<TokenLogprobEntry>> lps(n);
  std::vector<const char*> finish(n, nullptr);
  Status failed;
  while (!job.gen->done()) {
    job.gen->poll(kPollInterval, [&](ChoiceUpdate& u) {
      text[u.index] += u.text;
      for (auto& e : u.logprobs) lps[u.index].push_back(std::move(e));
      if (u.finish_reason != nullptr) finish[u.index] = u.finish_reason;
      if (!u.error.is_ok() && failed.is_ok()) failed = u.error;
    });
    if (!job.gen->done() && client_gone(job.socket)) {
      job.gen->cancel();
      s.counters.disconnects++;
      return;
    }
    if (!job.gen->done() && s.aborting.load()) {
      job.gen->cancel();
      send_error(s, res,
                 shutting_down(s.abort_reason.empty()
                                   ? "the server shut down before this request finished; it was "
                                     "cancelled"
                                   : s.abort_reason));
      return;
    }
  }
  if (!failed.is_ok()) {
    ApiError e = error_from_status(failed);
    if (e.status < 500) e = ApiError{500, "server_error", failed.message(), "", ""};
    send_error(s, res, e);
    return;
  }
  json out = envelope(job, false);
  out["choices"] = json::array();
  for (int i = 0; i < n; ++i) {
    json lp;
    if (job.req.logprobs) {
      int64_t off = 0;
      lp = job.req.endpoint == Endpoint::kChat ? chat_logprobs_json(lps[i])
                                               : completion_logprobs_json(lps[i], off);
    }
    out["choices"].push_back(choice_json(job, i, text[i], lp, finish[i]));
  }
  out["usage"] = usage_json(*job.gen);
  s.counters.completions_ok++;
  res.status = 200;
  res.set_content(to_json_text(out), "application/json");
}

// One call of the chunked content provider: waits for the next events and
// writes them as SSE chunks. Returns false to end the response.
bool stream_step(ServerState& s, Job& job, httplib::DataSink& sink) {
  const bool chat = job.req.endpoint == Endpoint::kChat;
  auto write = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
  if (job.finished_stream) return false;
  if (s.aborting.load()) {
    // The shutdown deadline passed: a final error event, then the end.
    job.gen->cancel();
    const ApiError e =
        shutting_down(s.abort_reason.empty() ? "the server shut down before this stream finished; "
                                               "it was cancelled"
                                             : s.abort_reason);
    write("data: " + error_body(e) + "\n\n");
    job.finished_stream = true;
    sink.done();
    return true;
  }
  bool ok = true;
  std::string out;
  Status failed;
  job.gen->poll(kPollInterval, [&](ChoiceUpdate& u) {
    if (!u.error.is_ok()) failed = u.error;
    const bool first = chat && !job.role_sent[u.index];
    if (u.text.empty() && u.logprobs.empty() && u.finish_reason == nullptr && !first) return;
    // A finish with text: the text first, then an empty delta carrying the reason.
    auto chunk = [&](const std::string& text, const std::vector<TokenLogprobEntry>& lps,
                     const char* finish, bool role, const json* tool_calls = nullptr) {
      json c = envelope(job, true);
      json choice = {{"index", u.index}};
      if (chat) {
        json delta = json::object();
        if (role) delta["role"] = "assistant";
        if (!text.empty() || role) delta["content"] = text;
        if (tool_calls != nullptr) delta["tool_calls"] = *tool_calls;
        choice["delta"] = delta;
      } else {
        choice["text"] = text;
      }
      json lp;
      if (job.req.logprobs && !lps.empty())
        lp = chat ? chat_logprobs_json(lps) : completion_logprobs_json(lps, job.lp_offset[u.index]);
      choice["logprobs"] = lp;
      choice["finish_reason"] = finish != nullptr ? json(finish) : json();
      c["choices"] = json::array({choice});
      if (job.req.include_usage) c["usage"] = nullptr;
      out += sse_event(c);
    };
    if (first) {
      job.role_sent[u.index] = true;
      chunk("", {}, nullptr, true);
    }
    const char* finish = u.finish_reason;
    json calls;
    if (chat && job.tools != ToolSyntax::kNone) {
      // Content while it cannot be part of a call; calls as they are written.
      ToolCallStream& ts = job.tool_streams[static_cast<size_t>(u.index)];
      ToolCallStream::Delta d = ts.push(u.text, finish != nullptr);
      if (finish != nullptr && ts.has_calls() && std::string(finish) == "stop")
        finish = "tool_calls";
      u.text = std::move(d.content);
      if (!d.calls.empty()) calls = std::move(d.calls);
    }
    if (!u.text.empty() || !u.logprobs.empty()) chunk(u.text, u.logprobs, nullptr, false);
    for (const json& call : calls) {
      const json one = json::array({call});
      chunk("", {}, nullptr, false, &one);
    }
    if (finish != nullptr) chunk("", {}, finish, false);
  });
  if (!out.empty()) ok = write(out);
  if (ok && !failed.is_ok()) {
    ApiError e{500, "server_error", failed.message(), "", ""};
    ok = write("data: " + error_body(e) + "\n\n");
  }
  if (ok && job.gen->done()) {
    std::string tail;
    if (job.req.include_usage) {
      json c = envelope(job, true);
      c["choices"] = json::array();
      c["usage"] = usage_json(*job.gen);
      tail += sse_event(c);
    }
    tail += sse_done();
    ok = write(tail);
    if (ok) {
      s.counters.completions_ok++;
      job.finished_stream = true;
      sink.done();
      return true;
    }
  }
  if (ok && out.empty() && client_gone(job.socket)) ok = false;
  if (!ok) {
    job.gen->cancel();
    s.counters.disconnects++;
    return false;
  }
  return true;
}

}  // namespace

void handle_completion(ServerState& s, const httplib::Request& req, httplib::Response& res,
                       Endpoint endpoint) {
  engine::Engine* e = s.engine.load();
  if (e == nullptr) {
    send_error(s, res, ApiError{503, "server_error", "the model is still loading", "", "loading"});
    return;
  }
  // Counted before the drain check, so a shutdown that starts now waits for it.
  auto job = std::make_shared<Job>(s.active);
  // The count ends when the response is on the wire, not when this returns.
  if (Connection* c = current_connection(); c != nullptr) c->held = job;
  if (s.draining.load()) {
    send_error(s, res, shutting_down("the server is shutting down and takes no new requests"));
    return;
  }
  auto parsed = parse_request(req.body, endpoint, s.config.limits);
  if (!parsed) {
    send_error(s, res, error_from_status(parsed.status()));
    return;
  }
  job->req = std::move(*parsed);
  CompletionRequest& r = job->req;
  if (!r.has_seed) {
    // No seed given: a fresh one, drawn here at the edge (the sampler takes
    // seeds as given).
    thread_local std::mt19937_64 rng{std::random_device{}()};
    r.sampling.seed = rng();
  }
  std::shared_ptr<const engine::MediaPrompt> media;
  auto ids = prompt_ids(s, *e, r, &media);
  if (!ids) {
    send_error(s, res, error_from_status(ids.status()));
    return;
  }
  if (Status st = prepare_tools(s, *e, *job); !st) {
    send_error(s, res, error_from_status(st));
    return;
  }
  if (!job->reply_prefix.empty()) {
    // A forced Mistral call: the reply starts with [TOOL_CALLS].
    ids->push_back(r.keep_token);
    if (media) {
      auto m = std::make_shared<engine::MediaPrompt>(*media);
      m->ids.push_back(r.keep_token);
      media = std::move(m);
    }
  }
  if (Status st = attach_constraint(s, *e, r); !st) {
    ApiError err = error_from_status(st);
    err.param = r.grammar_param;
    send_error(s, res, err);
    return;
  }
  const int64_t default_max =
      endpoint == Endpoint::kCompletions ? s.config.default_max_tokens_completions : 0;
  auto max_tokens =
      resolve_max_tokens(r, static_cast<int64_t>(ids->size()), e->config().n_ctx, default_max);
  if (!max_tokens) {
    send_error(s, res, error_from_status(max_tokens.status()));
    return;
  }
  job->id = new_id(endpoint);
  job->created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  job->model = s.config.model_name;
  job->socket = connection_socket(req);
  job->gen = std::make_unique<Generation>(*e, r, static_cast<int64_t>(ids->size()));
  if (Status st = job->gen->submit(*ids, *max_tokens, media); !st) {
    send_error(s, res, error_from_status(st));
    return;
  }
  if (!r.stream) {
    run_blocking(s, *job, res);
    return;
  }
  job->role_sent.assign(r.n, false);
  job->tool_streams.assign(r.n,
                           ToolCallStream(job->tools, job->reply_prefix, r.tool_choice.parallel));
  job->lp_offset.assign(r.n, 0);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  ServerState* sp = &s;
  res.set_chunked_content_provider(
      "text/event-stream",
      [sp, job](size_t, httplib::DataSink& sink) { return stream_step(*sp, *job, sink); },
      // Runs however the response ends: a stream not read to the end is cancelled.
      [job](bool) { job->gen->cancel(); });
}

}  // namespace sustain::server

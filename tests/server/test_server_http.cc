// `sustain serve` over real HTTP on 127.0.0.1: completions and chat,
// streaming and not, stop strings, n, seeds, logprobs, 16 concurrent clients,
// disconnects freeing KV pages, auth, a full queue, preemption.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <thread>

#include "server/serve_process.h"

namespace sustain::test {
namespace {

using nlohmann::json;

struct Reply {
  int status = -1;
  json body;
  httplib::Headers headers;
};

Reply post(httplib::Client& c, const std::string& path, const json& body,
           const httplib::Headers& h = {}) {
  Reply r;
  auto res = c.Post(path.c_str(), h, body.dump(), "application/json");
  if (!res) return r;
  r.status = res->status;
  r.headers = res->headers;
  r.body = json::parse(res->body);  // throws (fails the test) on invalid JSON or UTF-8
  return r;
}

std::string metrics(httplib::Client& c) {
  auto r = c.Get("/metrics");
  return r && r->status == 200 ? r->body : std::string();
}

json completion(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

std::string stream_text(const SseResult& s, bool chat, int index = 0) {
  std::string t;
  for (const auto& e : s.events)
    for (const auto& c : e.value("choices", json::array()))
      if (c["index"] == index) {
        if (chat) {
          if (c["delta"].contains("content")) t += c["delta"]["content"].get<std::string>();
        } else {
          t += c["text"].get<std::string>();
        }
      }
  return t;
}

std::string finish_of(const SseResult& s, int index = 0) {
  for (const auto& e : s.events)
    for (const auto& c : e.value("choices", json::array()))
      if (c["index"] == index && !c["finish_reason"].is_null()) return c["finish_reason"];
  return "";
}

// Splits UTF-8 text into characters.
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

TEST(ServerHttp, RoutesCompletionsAndStreaming) {
  SUSTAIN_START_SERVER(srv, "-c 512 -np 4");
  auto c = srv->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "server_tiny_qwen3");
  EXPECT_EQ(models["data"][0]["meta"]["n_ctx"], 512);

  Reply a = post(c, "/v1/completions", completion("Once upon a time", 12));
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["object"], "text_completion");
  EXPECT_EQ(a.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 12);
  const int prompt_tokens = a.body["usage"]["prompt_tokens"];
  EXPECT_GT(prompt_tokens, 0);
  EXPECT_EQ(a.body["usage"]["total_tokens"], prompt_tokens + 12);
  const std::string text = a.body["choices"][0]["text"];
  // Temperature 0 replays exactly.
  Reply b = post(c, "/v1/completions", completion("Once upon a time", 12));
  EXPECT_EQ(b.body["choices"][0]["text"], text);

  // Streaming gives the same text, chunk by chunk, then usage and [DONE].
  json sbody = completion("Once upon a time", 12);
  sbody["stream"] = true;
  sbody["stream_options"] = {{"include_usage", true}};
  SseResult s = post_sse(c, "/v1/completions", sbody);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(stream_text(s, false), text);
  EXPECT_EQ(finish_of(s), "length");
  ASSERT_FALSE(s.events.empty());
  EXPECT_TRUE(s.events.back()["choices"].empty());
  EXPECT_EQ(s.events.back()["usage"]["completion_tokens"], 12);
  EXPECT_EQ(s.events.back()["usage"]["prompt_tokens"], prompt_tokens);
  for (size_t i = 0; i + 1 < s.events.size(); ++i) EXPECT_TRUE(s.events[i]["usage"].is_null());

  // A prompt of token ids is used as given (no BOS added).
  json ids = completion("", 4);
  ids["prompt"] = {1, 2, 3, 4, 5};
  Reply r = post(c, "/v1/completions", ids);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 4);
}

TEST(ServerHttp, ChatWithTemplateKwargsAndStreaming) {
  SUSTAIN_START_SERVER(srv, "-c 512 -np 2");
  auto c = srv->client();
  json body = {{"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"}, {"content", "Hello there"}}}},
               {"max_tokens", 10},
               {"temperature", 0},
               {"ignore_eos", true}};
  Reply a = post(c, "/v1/chat/completions", body);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["object"], "chat.completion");
  EXPECT_EQ(a.body["choices"][0]["message"]["role"], "assistant");
  const std::string text = a.body["choices"][0]["message"]["content"];
  const int with_thinking = a.body["usage"]["prompt_tokens"];
  // Qwen3's template writes an empty think block when thinking is off.
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  Reply b = post(c, "/v1/chat/completions", body);
  ASSERT_EQ(b.status, 200) << b.body.dump();
  EXPECT_GT(b.body["usage"]["prompt_tokens"].get<int>(), with_thinking);
  body.erase("chat_template_kwargs");

  body["stream"] = true;
  SseResult s = post_sse(c, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  ASSERT_GE(s.events.size(), 2u);
  EXPECT_EQ(s.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(stream_text(s, true), text);
  EXPECT_EQ(finish_of(s), "length");
}

TEST(ServerHttp, StopStringsAreNeverSent) {
  SUSTAIN_START_SERVER(srv, "-c 512 -np 2");
  auto c = srv->client();
  Reply full = post(c, "/v1/completions", completion("The stop test", 40));
  ASSERT_EQ(full.status, 200);
  const std::string text = full.body["choices"][0]["text"];
  const auto chars = utf8_chars(text);
  ASSERT_GE(chars.size(), 8u) << text;
  // A stop string from the middle of the output, likely spanning tokens.
  std::string stop;
  size_t start_char = chars.size() / 2;
  for (size_t i = start_char; i < chars.size() && i < start_char + 3; ++i) stop += chars[i];
  const std::string want = text.substr(0, text.find(stop));
  for (bool stream : {false, true}) {
    json body = completion("The stop test", 40);
    body["stop"] = {stop, "\x01never"};
    if (!stream) {
      Reply r = post(c, "/v1/completions", body);
      ASSERT_EQ(r.status, 200);
      EXPECT_EQ(r.body["choices"][0]["text"], want) << "stop " << json(stop).dump();
      EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
      EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 40);
    } else {
      body["stream"] = true;
      SseResult s = post_sse(c, "/v1/completions", body);
      EXPECT_EQ(stream_text(s, false), want);
      EXPECT_EQ(finish_of(s), "stop");
      EXPECT_TRUE(s.done);
    }
  }
}

// Exact replay of sampled text across batch compositions (request a's choices
// prefill the prompt, b's find it cached; choice 2 against a request alone)
// is what --deterministic promises: without it the kernels for a batch of 4+
// rows (Q8_0/Q4_0/Q5_0) or 9+ (K-quants) round differently from one row's,
// and a temperature-1 sample near a boundary may flip (engine.md, Determinism).
TEST(ServerHttp, SeedsChoicesAndLogprobs) {
  SUSTAIN_START_SERVER(srv, "-c 512 -np 4 --deterministic");
  auto c = srv->client();
  json body = {{"prompt", "Random"}, {"max_tokens", 8}, {"temperature", 1.0},
               {"seed", 42},         {"n", 3},          {"ignore_eos", true}};
  Reply a = post(c, "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ASSERT_EQ(a.body["choices"].size(), 3u);
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 24);
  Reply b = post(c, "/v1/completions", body);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.body["choices"][i]["index"], i);
    EXPECT_EQ(b.body["choices"][i]["text"], a.body["choices"][i]["text"]);  // seeded: replays
  }
  // Choice i is the single request with seed + i.
  json one = body;
  one["n"] = 1;
  one["seed"] = 44;
  Reply c2 = post(c, "/v1/completions", one);
  EXPECT_EQ(c2.body["choices"][0]["text"], a.body["choices"][2]["text"]);

  // Completions logprobs: tokens, their logprobs and 2 alternatives each.
  json lp = completion("Logprobs", 5);
  lp["logprobs"] = 2;
  Reply l = post(c, "/v1/completions", lp);
  ASSERT_EQ(l.status, 200) << l.body.dump();
  const json& lps = l.body["choices"][0]["logprobs"];
  ASSERT_EQ(lps["tokens"].size(), 5u);
  ASSERT_EQ(lps["token_logprobs"].size(), 5u);
  ASSERT_EQ(lps["top_logprobs"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_LE(lps["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lps["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lps["top_logprobs"][i].size(), 2u);
  }
  // Chat logprobs.
  json ch = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
             {"max_tokens", 4},
             {"temperature", 0},
             {"ignore_eos", true},
             {"logprobs", true},
             {"top_logprobs", 3}};
  Reply cl = post(c, "/v1/chat/completions", ch);
  ASSERT_EQ(cl.status, 200) << cl.body.dump();
  const json& content = cl.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const auto& e : content) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_TRUE(e["bytes"].is_array());
    EXPECT_EQ(e["top_logprobs"].size(), 3u);
    // At temperature 0 the chosen token is the most probable one.
    EXPECT_NEAR(e["logprob"].get<double>(), e["top_logprobs"][0]["logprob"].get<double>(), 1e-5);
  }
}

// 16 clients at once: streaming and not, long and short prompts; each text
// equals the same request made alone (temperature 0).
// Without --deterministic a batch's shape can change the last bits of a
// token's logits (quantized-weight kernels tile differently by row count),
// so texts are only required to match alone-vs-batched with it; without
// it, how many match is printed (docs/engine.md, Determinism).
void concurrent_clients_match_alone(const std::string& flags, bool must_match) {
  SUSTAIN_START_SERVER(srv, flags);
  auto c = srv->client();
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i) {
    std::string prompt = "Client " + std::to_string(i) + ":";
    if (i % 3 == 0)
      for (int k = 0; k < 60; ++k)
        prompt += " a longer prompt that takes several chunks " + std::to_string(k);
    json b = completion(prompt, 8 + (i % 5) * 6);
    if (i % 2 == 1) b["stream"] = true;
    bodies.push_back(b);
  }
  std::vector<std::string> alone(16);
  for (int i = 0; i < 16; ++i) {
    json b = bodies[i];
    b.erase("stream");
    Reply r = post(c, "/v1/completions", b);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    alone[i] = r.body["choices"][0]["text"];
  }
  std::vector<std::string> together(16);
  std::vector<int> status(16, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      auto cl = srv->client();
      if (bodies[i].contains("stream")) {
        SseResult s = post_sse(cl, "/v1/completions", bodies[i]);
        status[i] = s.done ? s.status : -2;
        together[i] = stream_text(s, false);
      } else {
        auto res = cl.Post("/v1/completions", bodies[i].dump(), "application/json");
        status[i] = res ? res->status : -1;
        if (res && res->status == 200) together[i] = json::parse(res->body)["choices"][0]["text"];
      }
    });
  for (auto& t : threads) t.join();
  int same = 0;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(status[i], 200) << "client " << i;
    EXPECT_FALSE(together[i].empty()) << "client " << i;
    same += together[i] == alone[i];
    if (must_match) EXPECT_EQ(together[i], alone[i]) << "client " << i << " (" << flags << ")";
  }
  std::printf("[ measured ] %d of 16 texts identical alone and batched (%s)\n", same,
              flags.c_str());
  EXPECT_TRUE(srv->alive());
}

TEST(ServerHttp, LogitBiasSteersAndBadKeysAre400) {
  SUSTAIN_START_SERVER(srv, "-c 512 -np 2");
  auto c = srv->client();
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const int n_vocab = json::parse(m->body)["data"][0]["meta"]["n_vocab"];
  const std::string prompt = "Once upon a time";
  const std::string plain =
      post(c, "/v1/completions", completion(prompt, 6)).body["choices"][0]["text"];

  // +100 makes one token all but certain, greedy or sampled; the same
  // token 6 times is the 1-token answer 6 times.
  json body = completion(prompt, 6);
  body["logit_bias"] = {{"100", 100}};
  Reply forced = post(c, "/v1/completions", body);
  ASSERT_EQ(forced.status, 200) << forced.body.dump();
  const std::string text = forced.body["choices"][0]["text"];
  EXPECT_NE(text, plain);
  json one = body;
  one["max_tokens"] = 1;
  const std::string piece = post(c, "/v1/completions", one).body["choices"][0]["text"];
  std::string six;
  for (int i = 0; i < 6; ++i) six += piece;
  EXPECT_EQ(text, six);
  body["temperature"] = 1.0;
  body["seed"] = 7;
  EXPECT_EQ(post(c, "/v1/completions", body).body["choices"][0]["text"], text);

  // Keys outside the vocabulary, or malformed, are the client's 400.
  json bad = completion(prompt, 2);
  bad["logit_bias"] = {{"99999999", 5}};
  Reply r = post(c, "/v1/completions", bad);
  EXPECT_EQ(r.status, 400) << r.body.dump();
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find(
                "'logit_bias' key '99999999' is not a token id of this model (the vocabulary is "
                "[0, " +
                std::to_string(n_vocab) + "))"),
            std::string::npos)
      << r.body.dump();
  bad["logit_bias"] = {{std::to_string(n_vocab), 1}};
  EXPECT_EQ(post(c, "/v1/completions", bad).status, 400);
  bad["logit_bias"] = {{"5", 500}};
  EXPECT_EQ(post(c, "/v1/completions", bad).status, 400);
  json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_tokens", 2},
               {"logit_bias", {{"x", 1}}}};
  r = post(c, "/v1/chat/completions", chat);
  EXPECT_EQ(r.status, 400) << r.body.dump();
  // The server kept serving.
  EXPECT_EQ(post(c, "/v1/completions", completion(prompt, 6)).body["choices"][0]["text"], plain);
}

// --spec ngram: the same greedy text as without it (a request may opt out
// with "speculative": false), the drafts counted in usage and /metrics.
TEST(ServerHttp, SpeculativeDecodingKeepsTheTextAndCountsDrafts) {
  SUSTAIN_START_SERVER(srv, "-c 1024 -np 4 --spec ngram --draft-max 6");
  auto c = srv->client();
  // A prompt that repeats itself, so prompt lookup has something to draft.
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "the cat sat on the mat and ";
  json plain = completion(prompt, 40);
  plain["speculative"] = false;
  Reply off = post(c, "/v1/completions", plain);
  ASSERT_EQ(off.status, 200) << off.body.dump();
  EXPECT_FALSE(off.body["usage"].contains("speculative"));
  Reply on = post(c, "/v1/completions", completion(prompt, 40));
  ASSERT_EQ(on.status, 200) << on.body.dump();
  EXPECT_EQ(on.body["choices"][0]["text"], off.body["choices"][0]["text"]);
  ASSERT_TRUE(on.body["usage"].contains("speculative")) << on.body.dump();
  const json sp = on.body["usage"]["speculative"];
  EXPECT_GT(sp["drafted"].get<int64_t>(), 0);
  EXPECT_LE(sp["accepted"].get<int64_t>(), sp["drafted"].get<int64_t>());
  const std::string m = metrics(c);
  EXPECT_EQ(metric_value(m, "sustain_spec_draft_tokens_total"), sp["drafted"].get<double>());
  EXPECT_EQ(metric_value(m, "sustain_spec_accepted_tokens_total"), sp["accepted"].get<double>());
  // The gate's counters are exported (how many steps it kept from
  // drafting, probed and rechecked; docs/server.md), as counters.
  for (const char* g :
       {"sustain_spec_gate_skipped_total", "sustain_spec_gate_probes_total",
        "sustain_spec_gate_rechecks_total", "sustain_spec_gate_learning_tokens_total"}) {
    EXPECT_GE(metric_value(m, g), 0) << g << "\n" << m;
    EXPECT_NE(m.find(std::string("# TYPE ") + g + " counter"), std::string::npos) << g;
  }
  Reply bad = post(c, "/v1/completions", json{{"prompt", "x"}, {"speculative", 3}});
  EXPECT_EQ(bad.status, 400) << bad.body.dump();
}

// --spec draft through the server on the trained reference model (its
// logit gaps are wide, so batch shapes cannot flip a greedy choice): a
// Q4_K_M copy drafts; at -np 4 with concurrent streaming and plain clients
// every text equals the one without speculation, and /metrics counts the
// drafts by position and shows both KV pools empty afterwards.
TEST(ServerHttp, DraftModelKeepsTheTextUnderConcurrency) {
  SUSTAIN_REQUIRE_REF();
  const std::string target = test::ref_path("models/aidreams260K-f32.gguf");
  const std::string draft = test::ref_path("models/aidreams260K-Q4_K_M.gguf");
  std::string srv_why;
  auto srv = test::ServeProcess::start("-c 1024 -np 4 --spec draft -md " + draft + " --draft-max 6",
                                       &srv_why, target);
  ASSERT_TRUE(srv != nullptr) << srv_why;
  auto c = srv->client();
  std::vector<json> bodies;
  for (int i = 0; i < 8; ++i) {
    json b = completion(i % 2 ? "Once upon a time" : "The little dog", 24 + 4 * i);
    b["temperature"] = 0;
    bodies.push_back(b);
  }
  std::vector<std::string> alone(bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i) {
    json b = bodies[i];
    b["speculative"] = false;
    Reply r = post(c, "/v1/completions", b);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    alone[i] = r.body["choices"][0]["text"];
  }
  std::vector<std::string> together(bodies.size());
  std::vector<int> status(bodies.size(), 0);
  std::vector<int64_t> drafted(bodies.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] {
      auto cl = srv->client();
      if (i % 2) {
        json b = bodies[i];
        b["stream"] = true;
        SseResult s = post_sse(cl, "/v1/completions", b);
        status[i] = s.done ? s.status : -2;
        together[i] = stream_text(s, false);
      } else {
        auto res = cl.Post("/v1/completions", bodies[i].dump(), "application/json");
        status[i] = res ? res->status : -1;
        if (res && res->status == 200) {
          const json j = json::parse(res->body);
          together[i] = j["choices"][0]["text"];
          if (j["usage"].contains("speculative"))
            drafted[i] = j["usage"]["speculative"]["drafted"].get<int64_t>();
        }
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_EQ(status[i], 200) << "client " << i;
    EXPECT_EQ(together[i], alone[i]) << "client " << i;
  }
  EXPECT_GT(drafted[0], 0);
  const std::string m = metrics(c);
  EXPECT_GT(metric_value(m, "sustain_spec_draft_tokens_total"), 0) << m;
  EXPECT_NE(m.find("sustain_spec_position_accepted_total{position=\"0\"}"), std::string::npos) << m;
  EXPECT_EQ(metric_value(m, "sustain_spec_draft_kv_pages_used"), 0) << m;
  EXPECT_EQ(metric_value(m, "sustain_kv_pages_used"), 0) << m;
}

// Seeded clients at a temperature with a draft model, batch invariant: each
// gets the text it gets alone when eight send at once, where a step's
// verify rows and the draft's draws are drawn over the pool, several
// sequences at once (alone they are drawn one at a time). Over ranks
// (tests/dist) each rank runs one thread and draws serially; the texts
// must match all the same.
TEST(ServerHttp, SeededDraftsAtATemperatureKeepTheirTextUnderConcurrency) {
  SUSTAIN_REQUIRE_REF();
  const std::string target = test::ref_path("models/aidreams260K-f32.gguf");
  const std::string draft = test::ref_path("models/aidreams260K-Q4_K_M.gguf");
  std::string srv_why;
  auto srv = test::ServeProcess::start("-c 1024 -np 8 --batch-invariant --spec draft -md " + draft +
                                           " --draft-max 4 --spec-gate off",
                                       &srv_why, target);
  ASSERT_TRUE(srv != nullptr) << srv_why;
  auto c = srv->client();
  std::vector<json> bodies;
  for (int i = 0; i < 8; ++i) {
    json b = completion(i % 2 ? "Once upon a time" : "The little dog", 32);
    b["temperature"] = 0.8;
    b["seed"] = 500 + i;
    if (i % 3 == 0) b["top_p"] = 0.9;
    bodies.push_back(b);
  }
  std::vector<std::string> alone(bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i) {
    Reply r = post(c, "/v1/completions", bodies[i]);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    alone[i] = r.body["choices"][0]["text"];
  }
  const double pooled_alone = metric_value(metrics(c), "sustain_pool_sampled_tokens_total");
  std::vector<std::string> together(bodies.size());
  std::vector<int> status(bodies.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] {
      auto cl = srv->client();
      auto res = cl.Post("/v1/completions", bodies[i].dump(), "application/json");
      status[i] = res ? res->status : -1;
      if (res && res->status == 200) together[i] = json::parse(res->body)["choices"][0]["text"];
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_EQ(status[i], 200) << "client " << i;
    EXPECT_EQ(together[i], alone[i]) << "client " << i;
  }
  const std::string m = metrics(c);
  EXPECT_EQ(pooled_alone, 0) << m;
  // A pool of one thread (each rank's, over ranks) draws serially.
  if (srv->threads() > 1) {
    EXPECT_GT(metric_value(m, "sustain_pool_sampled_tokens_total"), 0) << m;
  } else {
    EXPECT_EQ(metric_value(m, "sustain_pool_sampled_tokens_total"), 0) << m;
  }
  EXPECT_GT(metric_value(m, "sustain_spec_accepted_tokens_total"), 0) << m;
  EXPECT_EQ(metric_value(m, "sustain_spec_draft_kv_pages_used"), 0) << m;
  EXPECT_EQ(metric_value(m, "sustain_kv_pages_used"), 0) << m;
}

TEST(ServerHttp, SixteenConcurrentClientsMatchAlone) {
  concurrent_clients_match_alone("-c 2048 -np 8 --max-queue 32", false);
}

TEST(ServerHttp, SixteenConcurrentClientsMatchAloneDeterministic) {
  concurrent_clients_match_alone("-c 2048 -np 8 --max-queue 32 --deterministic", true);
}

TEST(ServerHttp, DisconnectCancelsAndFreesPages) {
  SUSTAIN_START_SERVER(srv, "-c 4096 -np 2 --no-prefix-cache");
  auto c = srv->client();
  const std::string before = metrics(c);
  ASSERT_EQ(metric_value(before, "sustain_kv_pages_used"), 0) << before;

  // Mid-stream: read one chunk, then hang up.
  {
    auto cl = srv->client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    json b = completion("Disconnect me", 2000);
    b["stream"] = true;
    req.body = b.dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    cl.send(req);  // returns once the receiver says stop; the socket is closed
    EXPECT_GE(chunks, 3);
  }
  // Non-streaming, gone right after sending (mid-prefill of a long prompt).
  {
    std::string prompt;
    for (int k = 0; k < 100; ++k) prompt += "a long prompt to prefill " + std::to_string(k) + " ";
    const std::string body = completion(prompt, 1000).dump();
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(srv->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    // Wait until the engine has it, then hang up without reading.
    for (int i = 0; i < 200; ++i) {
      const std::string m = metrics(c);
      if (metric_value(m, "sustain_requests_running") +
              metric_value(m, "sustain_requests_waiting") >
          0)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    close(fd);
  }
  // Both requests are cancelled and their pages freed.
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = metrics(c);
    if (metric_value(m, "sustain_kv_pages_used") == 0 &&
        metric_value(m, "sustain_requests_running") == 0 &&
        metric_value(m, "sustain_client_disconnects_total") >= 2)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric_value(m, "sustain_kv_pages_used"), 0) << m;
  EXPECT_EQ(metric_value(m, "sustain_requests_running"), 0) << m;
  EXPECT_GE(metric_value(m, "sustain_requests_cancelled_total"), 2) << m;
  EXPECT_GE(metric_value(m, "sustain_client_disconnects_total"), 2) << m;
  // Far fewer tokens than asked for were generated.
  EXPECT_LT(metric_value(m, "sustain_generated_tokens_total"), 2500) << m;
  Reply r = post(c, "/v1/completions", completion("still serving", 3));
  EXPECT_EQ(r.status, 200);
}

TEST(ServerHttp, ApiKeyIsRequiredButNotForHealth) {
  SUSTAIN_START_SERVER(srv, "-c 256 --api-key sekrit");
  auto c = srv->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  for (const char* path : {"/v1/models", "/metrics"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
    r = c.Get(path, {{"Authorization", "Bearer wrong"}});
    EXPECT_EQ(r->status, 401) << path;
    r = c.Get(path, {{"Authorization", "Bearer sekrit"}});
    EXPECT_EQ(r->status, 200) << path;
  }
  Reply r = post(c, "/v1/completions", completion("x", 2));
  EXPECT_EQ(r.status, 401);
  r = post(c, "/v1/completions", completion("x", 2), {{"Authorization", "Bearer sekrit"}});
  EXPECT_EQ(r.status, 200);
}

TEST(ServerHttp, FullQueueGets429AtOnce) {
  SUSTAIN_START_SERVER(srv, "-c 4096 -np 1 --max-queue 1");
  auto c = srv->client();
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  std::vector<int> busy_status(2, 0);
  std::string m;
  auto wait_for = [&](int running, int waiting) {
    for (int i = 0; i < 500; ++i) {
      m = metrics(c);
      if (metric_value(m, "sustain_requests_running") == running &&
          metric_value(m, "sustain_requests_waiting") == waiting)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  // The second busy request is sent only once the first runs: sent together,
  // both could find the one queue slot taken before the engine admits either.
  for (int i = 0; i < 2; ++i) {
    if (i == 1) wait_for(1, 0);
    busy.emplace_back([&, i] {
      auto cl = srv->client();
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      json b = completion("Keep busy " + std::to_string(i), 4000);
      b["stream"] = true;
      req.body = b.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !stop.load(); };
      auto res = cl.send(req);
      busy_status[i] = res ? res->status : -1;
    });
  }
  wait_for(1, 1);  // one running, one waiting
  EXPECT_EQ(metric_value(m, "sustain_requests_running"), 1) << m;
  EXPECT_EQ(metric_value(m, "sustain_requests_waiting"), 1) << m;
  // Answered while both busy requests still hold the engine: a 429 here
  // means it was refused at once, not queued until a slot freed.
  auto res = c.Post("/v1/completions", completion("one too many", 4).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429) << res->body;
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(res->body)["error"]["type"], "rate_limit_error");
  m = metrics(c);
  EXPECT_EQ(metric_value(m, "sustain_requests_running"), 1) << m;  // the busy ones still run
  stop = true;
  for (auto& t : busy) t.join();
  m = metrics(c);
  EXPECT_GE(metric_value(m, "sustain_queue_rejections_total"), 1) << m;
  EXPECT_TRUE(srv->alive());
}

TEST(ServerHttp, PreemptionUnderASmallKvPoolStillCompletesCorrectly) {
  // 4 sequences of up to ~190 tokens each in a 320-token pool: some must be
  // preempted and recomputed. --deterministic makes a recomputed request's
  // text independent of the batch it ran in.
  SUSTAIN_START_SERVER(srv, "-c 256 -np 4 --kv-tokens 320 --page-tokens 16 --deterministic");
  auto c = srv->client();
  std::vector<json> bodies;
  for (int i = 0; i < 4; ++i) bodies.push_back(completion("Preempt " + std::to_string(i), 180));
  std::vector<std::string> alone(4), together(4);
  for (int i = 0; i < 4; ++i) {
    Reply r = post(c, "/v1/completions", bodies[i]);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    alone[i] = r.body["choices"][0]["text"];
  }
  std::vector<int> status(4), tokens(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      auto cl = srv->client();
      Reply r = post(cl, "/v1/completions", bodies[i]);
      status[i] = r.status;
      if (r.status == 200) {
        together[i] = r.body["choices"][0]["text"];
        tokens[i] = r.body["usage"]["completion_tokens"];
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(status[i], 200);
    EXPECT_EQ(tokens[i], 180);
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  }
  const std::string m = metrics(c);
  EXPECT_GT(metric_value(m, "sustain_preemptions_total"), 0) << m;
  EXPECT_EQ(metric_value(m, "sustain_kv_pages_used"), 0) << m;  // cached pages are not "used"
}

}  // namespace
}  // namespace sustain::test

// The server's pieces that need no engine or socket: request validation
// (every malformed input the issue lists), stop strings across token
// boundaries, SSE framing, OpenAI error bodies, Prometheus text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "server/api_error.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/sse.h"
#include "server/stop_strings.h"

namespace sustain::server {
namespace {

using nlohmann::json;

Expected<CompletionRequest> parse(const std::string& body, Endpoint ep = Endpoint::kCompletions) {
  return parse_request(body, ep, RequestLimits{});
}

// Expects a 400-class failure whose message contains `needle`.
void expect_bad(const std::string& body, const std::string& needle,
                Endpoint ep = Endpoint::kCompletions) {
  auto r = parse(body, ep);
  ASSERT_FALSE(r.has_value()) << body;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << body;
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << body << " → " << r.status().message();
  EXPECT_EQ(error_from_status(r.status()).status, 400);
}

TEST(RequestParse, CompletionDefaultsAndFields) {
  auto r = parse(R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0,"top_p":0.5,
                    "top_k":7,"min_p":0.1,"presence_penalty":1.5,"frequency_penalty":-2,
                    "seed":-1,"n":3,"stop":["a","bc"],"stream":true,
                    "stream_options":{"include_usage":true},"logprobs":2})");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->prompt_text, "hi");
  EXPECT_FALSE(r->prompt_is_ids);
  EXPECT_EQ(*r->max_tokens, 5);
  EXPECT_EQ(r->sampling.temperature, 0.0f);
  EXPECT_EQ(r->sampling.top_p, 0.5f);
  EXPECT_EQ(r->sampling.top_k, 7);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.1f);
  EXPECT_EQ(r->sampling.presence_penalty, 1.5f);
  EXPECT_EQ(r->sampling.frequency_penalty, -2.0f);
  EXPECT_EQ(r->sampling.seed, ~uint64_t{0});
  EXPECT_TRUE(r->has_seed);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 2);

  auto d = parse(R"({"prompt":"x"})");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->sampling.temperature, 1.0f);  // OpenAI's defaults
  EXPECT_EQ(d->sampling.top_p, 1.0f);
  EXPECT_EQ(d->sampling.top_k, 0);
  EXPECT_FALSE(d->max_tokens.has_value());
  EXPECT_FALSE(d->has_seed);
  EXPECT_EQ(d->n, 1);
  EXPECT_EQ(d->tpot_target_ms, 0.0);  // the server's target
  auto t = parse(R"({"prompt":"x","tpot_target_ms":40.5})");
  ASSERT_TRUE(t.has_value()) << t.status().message();
  EXPECT_DOUBLE_EQ(t->tpot_target_ms, 40.5);
}

TEST(RequestParse, PromptForms) {
  auto ids = parse(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(ids.has_value());
  EXPECT_TRUE(ids->prompt_is_ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  auto nested = parse(R"({"prompt":[[4,5]]})");
  ASSERT_TRUE(nested.has_value());
  EXPECT_EQ(nested->prompt_ids, (std::vector<int32_t>{4, 5}));
  auto one = parse(R"({"prompt":["text"]})");
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->prompt_text, "text");
  expect_bad(R"({"prompt":["a","b"]})", "one prompt per request");
  expect_bad(R"({"prompt":[1,"b"]})", "one prompt per request");
  expect_bad(R"({"prompt":[1,2.5]})", "prompt[1]");
  expect_bad(R"({"prompt":[-1]})", "prompt[0]");
  expect_bad(R"({"prompt":[99999999999]})", "prompt[0]");
}

TEST(RequestParse, EveryMalformedInputIsA400) {
  expect_bad("", "empty");
  expect_bad("not json", "not valid JSON");
  expect_bad(R"({"prompt":"x",})", "not valid JSON");
  expect_bad("[1,2]", "must be a JSON object");
  expect_bad(R"({"prompt":""})", "'prompt' must not be empty");
  expect_bad(R"({"prompt":[]})", "'prompt' must not be empty");
  expect_bad(R"({})", "'prompt' is required");
  expect_bad(R"({"prompt":5})", "'prompt' must be");
  expect_bad(R"({"prompt":"x","max_tokens":0})", "'max_tokens' must be at least 1, got 0");
  expect_bad(R"({"prompt":"x","max_tokens":-3})", "'max_tokens' must be at least 1, got -3");
  expect_bad(R"({"prompt":"x","max_tokens":"5"})", "'max_tokens' must be an integer, got string");
  expect_bad(R"({"prompt":"x","max_tokens":2.5})", "'max_tokens' must be an integer, got number");
  expect_bad(R"({"prompt":"x","max_tokens":1e30})", "'max_tokens' must be an integer");
  expect_bad(R"({"prompt":"x","temperature":"hot"})", "'temperature' must be a number, got string");
  expect_bad(R"({"prompt":"x","temperature":-0.1})", "'temperature' must be in [0, 2]");
  expect_bad(R"({"prompt":"x","temperature":2.5})", "'temperature' must be in [0, 2]");
  expect_bad(R"({"prompt":"x","temperature":1e999})", "number overflow parsing '1e999'");
  expect_bad(R"({"prompt":"x","top_p":0})", "'top_p' must be in (0, 1]");
  expect_bad(R"({"prompt":"x","top_p":1.01})", "'top_p'");
  expect_bad(R"({"prompt":"x","min_p":-1})", "'min_p'");
  expect_bad(R"({"prompt":"x","top_k":-1})", "'top_k'");
  expect_bad(R"({"prompt":"x","top_k":1.5})", "'top_k' must be an integer");
  expect_bad(R"({"prompt":"x","presence_penalty":2.1})", "'presence_penalty'");
  expect_bad(R"({"prompt":"x","frequency_penalty":-3})", "'frequency_penalty'");
  expect_bad(R"({"prompt":"x","repetition_penalty":0})", "'repetition_penalty'");
  expect_bad(R"({"prompt":"x","seed":"1"})", "'seed' must be an integer");
  expect_bad(R"({"prompt":"x","seed":1.5})", "'seed' must be an integer");
  expect_bad(R"({"prompt":"x","n":0})", "'n' must be in [1, 8]");
  expect_bad(R"({"prompt":"x","n":9})", "at most 8 choices");
  expect_bad(R"({"prompt":"x","n":true})", "'n' must be an integer, got boolean");
  expect_bad(R"({"prompt":"x","stream":"yes"})", "'stream' must be a boolean");
  expect_bad(R"({"prompt":"x","stream_options":{"include_usage":true}})", "only allowed with");
  expect_bad(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})",
             "include_usage");
  expect_bad(R"({"prompt":"x","stop":["a","b","c","d","e"]})", "has 5 strings, at most 4");
  expect_bad(R"({"prompt":"x","stop":[""]})", "'stop[0]' must not be empty");
  expect_bad(R"({"prompt":"x","stop":[1]})", "'stop[0]' must be a string");
  expect_bad(R"({"prompt":"x","stop":{}})", "'stop' must be a string or an array");
  expect_bad(R"({"prompt":"x","stop":")" + std::string(257, 'a') + R"("})",
             "is 257 bytes long, at most 256");
  expect_bad(R"({"prompt":"x","logprobs":21})", "'logprobs' must be in [0, 20]");
  expect_bad(R"({"prompt":"x","echo":true})", "'echo' is not supported");
  expect_bad(R"({"prompt":"x","best_of":2})", "'best_of'");
  expect_bad(R"({"prompt":"x","model":3})", "'model' must be a string");
  expect_bad(R"({"prompt":"x","logit_bias":[[1,2]]})", "'logit_bias' must be an object");
  expect_bad(R"({"prompt":"x","logit_bias":{"abc":1}})", "key 'abc' is not a token id");
  expect_bad(R"({"prompt":"x","logit_bias":{"-1":1}})", "key '-1' is not a token id");
  expect_bad(R"({"prompt":"x","logit_bias":{"":1}})", "key '' is not a token id");
  expect_bad(R"({"prompt":"x","logit_bias":{" 5":1}})", "key ' 5' is not a token id");
  expect_bad(R"({"prompt":"x","logit_bias":{"99999999999":1}})", "is not a token id");
  expect_bad(R"({"prompt":"x","logit_bias":{"5":"1"}})",
             "'logit_bias[\"5\"]' must be a number, got string");
  expect_bad(R"({"prompt":"x","logit_bias":{"5":101}})",
             "'logit_bias[\"5\"]' must be in [-100, 100], got 101");
  expect_bad(R"({"prompt":"x","logit_bias":{"5":-100.5}})", "must be in [-100, 100]");
  expect_bad(R"({"prompt":"x","logit_bias":{"5":1,"05":2}})", "names token 5 twice");
  expect_bad(R"({"prompt":"x","tpot_target_ms":0})", "'tpot_target_ms' must be in (0, 1000000]");
  expect_bad(R"({"prompt":"x","tpot_target_ms":-5})", "'tpot_target_ms'");
  expect_bad(R"({"prompt":"x","tpot_target_ms":"50"})", "'tpot_target_ms' must be a number");
}

TEST(RequestParse, InvalidUtf8AndDeepNestingAreRejected) {
  expect_bad("{\"prompt\":\"ab\xff\xfe\"}", "not valid JSON");
  expect_bad("{\"prompt\":\"\xc3\"}", "not valid JSON");
  expect_bad(R"({"prompt":"\ud800"})", "not valid JSON");  // a lone surrogate
  std::string deep =
      R"({"prompt":"x","a":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_bad(deep, "nests 100001 levels deep");
  EXPECT_EQ(json_depth(R"({"a":"[[[[{{{","b":[1,{"c":2}]})"), 3);
  EXPECT_EQ(json_depth(R"(["\"[["])"), 1);
}

// Image parts are kept aside, in order, and become the <__media__> marker
// as text parts, where the chat template sees them.
TEST(RequestParse, ImagePartsBecomeMarkers) {
  const std::string body = R"({"messages":[{"role":"system","content":"s"},
    {"role":"user","content":[{"type":"text","text":"a"},
      {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
      {"type":"image_url","image_url":{"url":"file:///x.png","detail":"low"}}]}]})";
  auto r = parse(body, Endpoint::kChat);
  ASSERT_TRUE(r) << r.status().message();
  ASSERT_EQ(r->images.size(), 2u);
  EXPECT_EQ(r->images[0].name, "messages[1].content[1]");
  EXPECT_EQ(r->images[0].url, "data:image/png;base64,AAAA");
  EXPECT_EQ(r->images[1].name, "messages[1].content[2]");
  const auto& parts = r->messages[1]["content"];
  EXPECT_EQ(parts[0]["text"], "a");
  for (int k : {1, 2}) {
    EXPECT_EQ(parts[k]["type"], "text");
    EXPECT_EQ(parts[k]["text"], "<__media__>");
  }
  RequestLimits one;
  one.max_images = 1;
  auto over = parse_request(body, Endpoint::kChat, one);
  ASSERT_FALSE(over);
  EXPECT_NE(over.status().message().find("'messages[1].content[2]' is image part 2; at most 1"),
            std::string::npos)
      << over.status().message();
}

TEST(RequestParse, Chat) {
  auto r = parse(R"({"messages":[{"role":"system","content":"s"},
                                 {"role":"user","content":[{"type":"text","text":"hi"}]}],
                     "chat_template_kwargs":{"enable_thinking":false},
                     "tools":[{"type":"function","function":{"name":"f","b":1,"a":2}}],
                     "logprobs":true,"top_logprobs":3,"max_completion_tokens":9})",
                 Endpoint::kChat);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->chat_template_kwargs["enable_thinking"], false);
  // Key order is the request's, not sorted.
  EXPECT_EQ(r->tools[0]["function"].begin().key(), "name");
  EXPECT_EQ(std::next(r->tools[0]["function"].begin()).key(), "b");
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_EQ(*r->max_tokens, 9);

  const auto chat = Endpoint::kChat;
  expect_bad(R"({"messages":[]})", "'messages' must not be empty", chat);
  expect_bad(R"({})", "'messages' is required", chat);
  expect_bad(R"({"messages":"hi"})", "'messages' must be an array", chat);
  expect_bad(R"({"messages":[1]})", "'messages[0]' must be an object", chat);
  expect_bad(R"({"messages":[{"content":"x"}]})", "'messages[0].role' is required", chat);
  expect_bad(R"({"messages":[{"role":1,"content":"x"}]})", "'messages[0].role' must be a string",
             chat);
  expect_bad(R"({"messages":[{"role":"user"}]})", "'messages[0].content' is required", chat);
  expect_bad(R"({"messages":[{"role":"user","content":5}]})", "'messages[0].content' must be",
             chat);
  expect_bad(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
             "'messages[0].content[0].image_url' is required", chat);
  expect_bad(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":"x"}]}]})",
             "'messages[0].content[0].image_url' must be an object", chat);
  expect_bad(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
             "'messages[0].content[0].image_url.url' must be a string", chat);
  expect_bad(R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
             "accepts \"text\" and \"image_url\" parts", chat);
  expect_bad(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
             "needs 'logprobs': true", chat);
  expect_bad(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})",
             "'chat_template_kwargs' must be an object", chat);
  expect_bad(R"({"messages":[{"role":"user","content":"x"}],"tools":{}})",
             "'tools' must be an array", chat);
}

TEST(RequestParse, LengthsAgainstTheModel) {
  auto r = parse(R"({"prompt":"x","max_tokens":10})");
  ASSERT_TRUE(r.has_value());
  auto m = resolve_max_tokens(*r, 100, 128, 16);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, 10);
  m = resolve_max_tokens(*r, 120, 128, 16);
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.status().message().find("'max_tokens' is 10"), std::string::npos);
  EXPECT_NE(m.status().message().find("120 tokens"), std::string::npos);
  EXPECT_NE(m.status().message().find("holds 128"), std::string::npos);
  m = resolve_max_tokens(*r, 128, 128, 16);
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.status().message().find("the prompt is 128 tokens long, but the context holds 128"),
            std::string::npos)
      << m.status().message();
  auto d = parse(R"({"prompt":"x"})");
  EXPECT_EQ(*resolve_max_tokens(*d, 120, 128, 16), 8);  // the default, clipped to the room
  EXPECT_EQ(*resolve_max_tokens(*d, 10, 128, 16), 16);
  EXPECT_EQ(*resolve_max_tokens(*d, 10, 128, 0), 118);  // 0: all the room

  EXPECT_TRUE(check_token_ids({0, 5, 9}, 10).is_ok());
  Status st = check_token_ids({0, 10}, 10);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("'prompt[1]' is token id 10, outside the vocabulary [0, 10)"),
            std::string::npos);

  // logit_bias: parsed, sorted by id, then checked against the vocabulary.
  auto b = parse(R"({"prompt":"x","logit_bias":{"9":-100,"0":2.5,"3":100}})");
  ASSERT_TRUE(b.has_value()) << b.status().message();
  ASSERT_EQ(b->sampling.logit_bias.size(), 3u);
  EXPECT_EQ(b->sampling.logit_bias[0].id, 0);
  EXPECT_EQ(b->sampling.logit_bias[0].bias, 2.5f);
  EXPECT_EQ(b->sampling.logit_bias[2].id, 9);
  EXPECT_EQ(b->sampling.logit_bias[2].bias, -100.0f);
  EXPECT_TRUE(check_logit_bias(b->sampling, 10).is_ok());
  st = check_logit_bias(b->sampling, 9);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("'logit_bias' key '9' is not a token id of this model (the "
                              "vocabulary is [0, 9))"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(parse(R"({"prompt":"x","logit_bias":{}})")->sampling.logit_bias.empty());
  EXPECT_TRUE(parse(R"({"prompt":"x","logit_bias":null})")->sampling.logit_bias.empty());
}

// Feeds `pieces` one at a time; returns everything sent.
std::string run_stops(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                      bool* stopped = nullptr) {
  StopMatcher m(stops);
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  out += m.flush();
  if (stopped != nullptr) *stopped = m.stopped();
  return out;
}

TEST(StopStrings, NeverEmittedAcrossPieces) {
  bool stopped = false;
  EXPECT_EQ(run_stops({"END"}, {"abc", "E", "N", "D", "xyz"}, &stopped), "abc");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run_stops({"END"}, {"abcEN", "Dxyz"}, &stopped), "abc");
  EXPECT_EQ(run_stops({"END"}, {"aEbENcEND"}, &stopped), "aEbENc");
  // A prefix that turns out not to be a stop string is sent after all.
  EXPECT_EQ(run_stops({"END"}, {"abcEN", "X"}, &stopped), "abcENX");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(run_stops({"END"}, {"abcEN"}, &stopped), "abcEN");  // flushed at the end
  // The earliest match over all stop strings wins.
  EXPECT_EQ(run_stops({"xyz", "b"}, {"axyzb"}, &stopped), "a");
  EXPECT_EQ(run_stops({"\n\n", "###"}, {"line\n", "\n##", "#"}, &stopped), "line");
  // UTF-8 stop strings split inside a character.
  EXPECT_EQ(run_stops({"é!"}, {"caf", "é", "!"}, &stopped), "caf");
  EXPECT_TRUE(stopped);
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStartAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("hello S"), "hello ");
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_EQ(m.push("STO"), "");
  EXPECT_EQ(m.push("P and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("later"), "");
}

TEST(StopStrings, RandomSplitsNeverEmitAStop) {
  // Whatever the split: the output is a prefix of the text containing no stop
  // string; when stopped, a stop string follows it in the text; otherwise it
  // is the whole text, and the text holds no stop string.
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int len = 1 + rng() % 30;
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    for (int s = 0, ns = 1 + rng() % 3; s < ns; ++s) {
      std::string st;
      for (int i = 0, sl = 1 + rng() % 4; i < sl; ++i) st += alphabet[rng() % alphabet.size()];
      stops.push_back(st);
    }
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    bool stopped = false;
    const std::string out = run_stops(stops, pieces, &stopped);
    SCOPED_TRACE("text " + json(text).dump() + " out " + json(out).dump());
    ASSERT_EQ(text.compare(0, out.size(), out), 0);
    bool text_has_stop = false, follows = false;
    for (const auto& st : stops) {
      EXPECT_EQ(out.find(st), std::string::npos) << json(st).dump();
      text_has_stop |= text.find(st) != std::string::npos;
      follows |= text.compare(out.size(), st.size(), st) == 0;
    }
    EXPECT_EQ(stopped, text_has_stop);
    if (stopped) {
      EXPECT_TRUE(follows);
    } else {
      EXPECT_EQ(out, text);
    }
  }
  // With one stop string, the cut is exactly at its first occurrence.
  for (int iter = 0; iter < 500; ++iter) {
    std::string text;
    for (int i = 0, len = 1 + rng() % 30; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::string st;
    for (int i = 0, sl = 1 + rng() % 4; i < sl; ++i) st += alphabet[rng() % alphabet.size()];
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size(); i += 2) pieces.push_back(text.substr(i, 2));
    const size_t at = text.find(st);
    ASSERT_EQ(run_stops({st}, pieces), at == std::string::npos ? text : text.substr(0, at));
  }
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("x\ny"), ": x y\n\n");
  // Bytes that are not UTF-8 become U+FFFD instead of throwing.
  const std::string t = to_json_text(json{{"t", std::string("a\xe2\x82")}});
  EXPECT_EQ(t, "{\"t\":\"a\xef\xbf\xbd\"}");
  EXPECT_NO_THROW((void)json::parse(t));
}

TEST(ApiError, OpenAiShape) {
  ApiError e = bad_request("'n' is 9", "n");
  const json j = json::parse(error_body(e));
  EXPECT_EQ(j["error"]["message"], "'n' is 9");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(error_from_status(Status(Code::kUnavailable, "full")).status, 429);
  EXPECT_EQ(error_from_status(Status(Code::kInternal, "x")).status, 500);
  EXPECT_EQ(error_from_status(Status(Code::kInvalidArgument, "x")).status, 400);
}

TEST(Metrics, PrometheusText) {
  engine::EngineStats s;
  s.running = 2;
  s.waiting = 3;
  s.kv_pages_total = 100;
  s.kv_pages_used = 40;
  s.preemptions = 5;
  s.prefix_cache_hits = 6;
  s.ttft.bounds = {0.1, 1.0};
  s.ttft.counts = {2, 3, 1};
  s.ttft.sum = 4.5;
  s.ttft.count = 6;
  ServerCountersSnapshot c;
  c.queue_rejections = 7;
  const std::string t = render_metrics(&s, c);
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << t;
  };
  has("sustain_requests_running 2");
  has("sustain_requests_waiting 3");
  has("sustain_kv_pages_total 100");
  has("sustain_kv_pages_used 40");
  has("sustain_preemptions_total 5");
  has("sustain_prefix_cache_hits_total 6");
  has("sustain_queue_rejections_total 7");
  has("# TYPE process_resident_memory_bytes gauge");
  has("# TYPE process_open_fds gauge");
  has("# TYPE sustain_time_to_first_token_seconds histogram");
  has("sustain_time_to_first_token_seconds_bucket{le=\"0.1\"} 2");
  has("sustain_time_to_first_token_seconds_bucket{le=\"1\"} 5");  // cumulative
  has("sustain_time_to_first_token_seconds_bucket{le=\"+Inf\"} 6");
  has("sustain_time_to_first_token_seconds_sum 4.5");
  has("sustain_time_to_first_token_seconds_count 6");
  has("# TYPE sustain_e2e_request_latency_seconds histogram");
  has("# TYPE sustain_time_per_output_token_seconds histogram");
  // Every sample line is "name[{labels}] value" with a parseable value.
  std::istringstream in(t);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    const std::string v = line.substr(sp + 1);
    EXPECT_TRUE(v == "+Inf" || std::isfinite(std::stod(v))) << line;
  }
  const std::string loading = render_metrics(nullptr, c);
  EXPECT_NE(loading.find("sustain_model_loaded 0\n"), std::string::npos);
  EXPECT_EQ(loading.find("sustain_kv_pages_used"), std::string::npos);
}

double sample(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

// The process metrics are this process's: RSS within 10 % of VmRSS (4 MiB
// touched in between shows), and one more descriptor once a file is open.
TEST(Metrics, ProcessMemoryAndDescriptorsAreThisProcesses) {
  ServerCountersSnapshot c;
  const std::string before = render_metrics(nullptr, c);
  const double rss = sample(before, "process_resident_memory_bytes");
  std::ifstream st("/proc/self/status");
  double vm_rss = -1;
  for (std::string line; std::getline(st, line);)
    if (line.rfind("VmRSS:", 0) == 0) vm_rss = std::stod(line.substr(6)) * 1024;
  ASSERT_GT(vm_rss, 0);
  EXPECT_NEAR(rss, vm_rss, 0.1 * vm_rss);
  EXPECT_GE(sample(before, "process_virtual_memory_bytes"), rss);
  std::vector<char> touched(64u << 20, 1);  // 64 MiB written
  const double grown = sample(render_metrics(nullptr, c), "process_resident_memory_bytes");
  EXPECT_GT(grown, rss + (48u << 20)) << touched[touched.size() / 2];
  const double fds = sample(render_metrics(nullptr, c), "process_open_fds");
  ASSERT_GT(fds, 2);
  std::FILE* f = std::fopen("/proc/self/status", "r");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(sample(render_metrics(nullptr, c), "process_open_fds"), fds + 1);
  std::fclose(f);
}

}  // namespace
}  // namespace sustain::server

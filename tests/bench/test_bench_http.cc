// The OpenAI-endpoint load generator against a fake server on 127.0.0.1
// that streams SSE the way llama-server and vLLM do: tokens counted from
// `usage`, emissions timed per text event, empty and usage-only chunks not
// counted, and every failure reported with its cause.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/http_target.h"
#include "bench/load.h"

namespace sustain::bench {
namespace {

using nlohmann::json;

constexpr int kTextEvents = 4;         // events with text per response
constexpr int kTokensPerResponse = 6;  // what usage reports (one event carries 3 tokens)
constexpr int kGapMs = 30;

class FakeServer {
 public:
  FakeServer() {
    svr_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model"}]})", "application/json");
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body, nullptr, false);
      {
        std::lock_guard<std::mutex> l(mu_);
        bodies_.push_back(body);
      }
      const std::string model = body.value("model", "");
      if (model == "http-500") {
        res.status = 500;
        res.set_content(R"({"error":{"message":"boom"}})", "application/json");
        return;
      }
      const bool usage = model != "no-usage" && model != "stream-error";
      // As llama-server ends a stream it cannot finish: an error event
      // after some text, then no usage.
      const bool stream_error = model == "stream-error";
      res.set_chunked_content_provider(
          "text/event-stream", [usage, stream_error](size_t, httplib::DataSink& sink) {
            auto send = [&](const std::string& s) {
              const std::string ev = "data: " + s + "\n\n";
              sink.write(ev.data(), ev.size());
            };
            // A role/empty chunk first (not a token), then a keep-alive comment.
            send(R"({"choices":[{"index":0,"text":""}]})");
            const std::string ka = ": keep-alive\n\n";
            sink.write(ka.data(), ka.size());
            for (int i = 0; i < kTextEvents; ++i) {
              std::this_thread::sleep_for(std::chrono::milliseconds(kGapMs));
              send(json({{"choices", {{{"index", 0}, {"text", i == 0 ? " abc" : " d"}}}}}).dump());
            }
            if (stream_error)
              send(R"({"error":{"code":500,"message":"output does not match the format"}})");
            if (usage)
              send(json({{"choices", json::array()},
                         {"usage",
                          {{"prompt_tokens", 11},
                           {"completion_tokens", kTokensPerResponse},
                           {"total_tokens", 11 + kTokensPerResponse}}}})
                       .dump());
            send("[DONE]");
            sink.done();
            return true;
          });
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> bodies() {
    std::lock_guard<std::mutex> l(mu_);
    return bodies_;
  }

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> bodies_;
};

TEST(HttpUrl, Parses) {
  auto u = parse_http_url("http://127.0.0.1:8080");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "");
  u = parse_http_url("http://host/v1/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->base_path, "");
  u = parse_http_url("http://host:9/prefix");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->base_path, "/prefix");
  for (const char* bad : {"https://x:1", "127.0.0.1:80", "http://:80", "http://h:0",
                          "http://h:99999", "http://h:8a"}) {
    auto b = parse_http_url(bad);
    ASSERT_FALSE(b) << bad;
    EXPECT_NE(b.status().message().find(bad), std::string::npos) << b.status().message();
  }
}

TEST(Sse, EventsAcrossChunkBoundaries) {
  SseParser p;
  const auto feed = [&p](const std::string& s) { return p.feed(s.data(), s.size()); };
  EXPECT_TRUE(feed("data: {\"a\"").empty());
  auto ev = feed(":1}\r\n\r\n: ping\n\ndata: x\ndata: y\n\nda");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0], "{\"a\":1}");
  EXPECT_EQ(ev[1], "x\ny");
  ev = feed("ta: [DONE]\n\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], "[DONE]");
}

TEST(HttpTarget, CountsFromUsageAndTimesTextEvents) {
  FakeServer fake;
  HttpTargetOptions o;
  o.url = fake.url();
  o.prompt_words = 20;
  o.max_tokens = kTokensPerResponse;
  auto t = HttpTarget::create(o);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ((*t)->model(), "fake-model");  // from GET /v1/models
  const auto origin = BenchClock::now();
  const RequestTiming r = (*t)->run(0, origin);
  ASSERT_TRUE(r.ok) << (*t)->last_error();
  EXPECT_EQ(r.output_tokens, kTokensPerResponse);  // usage, not the 4 events
  EXPECT_EQ(r.prompt_tokens, 11);
  ASSERT_EQ(r.token_times.size(), size_t(kTextEvents));  // the empty chunk is no emission
  auto m = request_metrics(r);
  ASSERT_TRUE(m);
  EXPECT_GE(m->ttft, kGapMs / 1000.0 * 0.9);
  for (double gap : m->itl) EXPECT_GE(gap, kGapMs / 1000.0 * 0.8);
  EXPECT_NEAR(m->tpot, (m->e2e - m->ttft) / (kTokensPerResponse - 1), 1e-12);
  // The request said what the load generator promises.
  const auto bodies = fake.bodies();
  ASSERT_EQ(bodies.size(), 1u);
  const json& b = bodies[0];
  EXPECT_EQ(b["model"], "fake-model");
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["max_tokens"], kTokensPerResponse);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["prompt"].get<std::string>(), (*t)->prompt(0));
  EXPECT_NE((*t)->prompt(0), (*t)->prompt(1));
}

// --json-schema: each request carries the schema as OpenAI's response_format
// and as llama-server's json_schema field (the one its /v1/completions reads).
TEST(HttpTarget, AJsonSchemaGoesOutInBothSpellings) {
  FakeServer fake;
  const json schema = {{"type", "object"},
                       {"properties", {{"a", {{"type", "integer"}}}}},
                       {"required", {"a"}}};
  for (const bool with : {false, true}) {
    HttpTargetOptions o;
    o.url = fake.url();
    o.prompt_words = 8;
    if (with) o.json_schema = schema;
    auto t = HttpTarget::create(o);
    ASSERT_TRUE(t) << t.status().message();
    ASSERT_TRUE((*t)->run(0, BenchClock::now()).ok) << (*t)->last_error();
  }
  const auto bodies = fake.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_FALSE(bodies[0].contains("response_format"));
  EXPECT_FALSE(bodies[0].contains("json_schema"));
  const json& b = bodies[1];
  EXPECT_EQ(b["response_format"]["type"], "json_schema");
  EXPECT_EQ(b["response_format"]["json_schema"]["schema"], schema);
  EXPECT_EQ(b["response_format"]["json_schema"]["name"], "bench");
  EXPECT_EQ(b["json_schema"], schema);
}

// --temp: temperature 0 is greedy; above it the request carries the
// sampler's default chain and a seed of its own, so the server samples.
TEST(HttpTarget, ATemperatureSendsTheDefaultChainAndASeedPerRequest) {
  FakeServer fake;
  for (const float temp : {0.0f, 0.8f}) {
    HttpTargetOptions o;
    o.url = fake.url();
    o.prompt_words = 8;
    o.chain.temperature = temp;
    auto t = HttpTarget::create(o);
    ASSERT_TRUE(t) << t.status().message();
    ASSERT_TRUE((*t)->run(0, BenchClock::now()).ok) << (*t)->last_error();
    if (temp > 0) {
      ASSERT_TRUE((*t)->run(1, BenchClock::now()).ok) << (*t)->last_error();
    }
  }
  const auto bodies = fake.bodies();
  ASSERT_EQ(bodies.size(), 3u);
  EXPECT_EQ(bodies[0]["temperature"], 0);
  EXPECT_FALSE(bodies[0].contains("top_k"));
  EXPECT_FALSE(bodies[0].contains("seed"));
  for (int i : {1, 2}) {
    const json& b = bodies[static_cast<size_t>(i)];
    EXPECT_FLOAT_EQ(b["temperature"].get<float>(), 0.8f);
    EXPECT_EQ(b["top_k"], 40);
    EXPECT_FLOAT_EQ(b["top_p"].get<float>(), 0.95f);
    EXPECT_FLOAT_EQ(b["min_p"].get<float>(), 0.05f);
    ASSERT_TRUE(b["seed"].is_number_unsigned());
  }
  EXPECT_NE(bodies[1]["seed"], bodies[2]["seed"]);
}

// --top-k / --top-p / --min-p: the chain goes out as given (top_k 0 is what
// an OpenAI client that names no top-k sends).
TEST(HttpTarget, AChainIsSentAsGiven) {
  FakeServer fake;
  HttpTargetOptions o;
  o.url = fake.url();
  o.prompt_words = 8;
  o.chain = BenchChain{0.7f, 0, 0.9f, 0.0f};
  auto t = HttpTarget::create(o);
  ASSERT_TRUE(t) << t.status().message();
  ASSERT_TRUE((*t)->run(0, BenchClock::now()).ok) << (*t)->last_error();
  const auto bodies = fake.bodies();
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_FLOAT_EQ(bodies[0]["temperature"].get<float>(), 0.7f);
  EXPECT_EQ(bodies[0]["top_k"], 0);
  EXPECT_FLOAT_EQ(bodies[0]["top_p"].get<float>(), 0.9f);
  EXPECT_FLOAT_EQ(bodies[0]["min_p"].get<float>(), 0.0f);
  EXPECT_FALSE(bodies[0].contains("logprobs"));
}

// --logprobs N: completions' `logprobs` (the number of alternatives), greedy
// or sampled.
TEST(HttpTarget, LogprobsAreAskedFor) {
  FakeServer fake;
  HttpTargetOptions o;
  o.url = fake.url();
  o.prompt_words = 8;
  o.chain.top_logprobs = 3;
  auto t = HttpTarget::create(o);
  ASSERT_TRUE(t) << t.status().message();
  ASSERT_TRUE((*t)->run(0, BenchClock::now()).ok) << (*t)->last_error();
  o.chain.top_logprobs = 0;
  o.chain.temperature = 0.8f;
  auto t0 = HttpTarget::create(o);
  ASSERT_TRUE(t0) << t0.status().message();
  ASSERT_TRUE((*t0)->run(1, BenchClock::now()).ok) << (*t0)->last_error();
  const auto bodies = fake.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0]["logprobs"], 3);
  EXPECT_EQ(bodies[1]["logprobs"], 0);
}

TEST(HttpTarget, LadderOverHttp) {
  FakeServer fake;
  HttpTargetOptions o;
  o.url = fake.url() + "/v1";
  o.model = "given";
  auto t = HttpTarget::create(o);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ((*t)->model(), "given");
  LoadOptions lo;
  lo.concurrency = {1, 3};
  lo.requests_per_client = 2;
  lo.poisson_rates = {40.0};
  lo.poisson_requests = 4;
  lo.warmup_requests = 1;
  auto levels = run_load(**t, lo);
  ASSERT_TRUE(levels) << levels.status().message();
  ASSERT_EQ(levels->size(), 3u);
  EXPECT_EQ(fake.bodies().size(), 1u + 2 + 6 + 4);
  const LoadLevel& one = (*levels)[0];
  const LoadLevel& three = (*levels)[1];
  EXPECT_EQ(one.mode, "fixed");
  EXPECT_EQ(one.metrics.requests, 2);
  EXPECT_EQ(three.metrics.requests, 6);
  EXPECT_EQ(three.metrics.failed, 0);
  EXPECT_EQ(three.metrics.output_tokens, 6 * kTokensPerResponse);
  EXPECT_EQ(three.metrics.itl.n, 6 * (kTextEvents - 1));
  // Three overlapping streams: aggregate well above one stream's speed.
  EXPECT_GT(three.metrics.aggregate_tok_s, 1.5 * three.metrics.stream_tok_s.p50);
  EXPECT_GT(three.metrics.aggregate_tok_s, one.metrics.aggregate_tok_s * 1.5);
  const LoadLevel& p = (*levels)[2];
  EXPECT_EQ(p.mode, "poisson");
  EXPECT_DOUBLE_EQ(p.rate, 40.0);
  EXPECT_EQ(p.metrics.requests, 4);
  EXPECT_GE(p.concurrency, 1);
}

TEST(HttpTarget, FailuresAreReportedNotCounted) {
  FakeServer fake;
  for (const auto& [model, want] : std::vector<std::pair<std::string, std::string>>{
           {"no-usage", "usage"},
           {"http-500", "HTTP 500"},
           {"stream-error", "server error: {\"code\":500,\"message\":\"output does not match"}}) {
    HttpTargetOptions o;
    o.url = fake.url();
    o.model = model;
    auto t = HttpTarget::create(o);
    ASSERT_TRUE(t);
    const RequestTiming r = (*t)->run(0, BenchClock::now());
    EXPECT_FALSE(r.ok) << model;
    EXPECT_NE((*t)->last_error().find(want), std::string::npos) << (*t)->last_error();
    auto m = load_metrics({r});
    ASSERT_TRUE(m);
    EXPECT_EQ(m->failed, 1);
    EXPECT_EQ(m->output_tokens, 0);
  }
  // Nothing listening: create() names the URL.
  // A port that was free a moment ago (bound, then closed).
  int free_port = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    free_port = ntohs(a.sin_port);
    close(fd);
  }
  HttpTargetOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(free_port);
  auto t = HttpTarget::create(o);
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find(o.url), std::string::npos) << t.status().message();
}

TEST(LoadOptionsCheck, BadLevelsAreErrors) {
  struct Never : LoadTarget {
    RequestTiming run(int64_t, BenchClock::time_point) override { return {}; }
    std::string last_error() const override { return ""; }
  } never;
  LoadOptions lo;
  lo.concurrency = {};
  EXPECT_FALSE(run_load(never, lo));
  lo.concurrency = {0};
  auto r = run_load(never, lo);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("level 0"), std::string::npos);
  lo.concurrency = {1};
  lo.poisson_rates = {-1};
  EXPECT_FALSE(run_load(never, lo));
}

}  // namespace
}  // namespace sustain::bench

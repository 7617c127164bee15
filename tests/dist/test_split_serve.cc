// `sustain serve --split layer|tensor` under mpirun on loopback: the engine
// over ranks (engine/ranks.h) against the same server in one process — the
// same text for concurrent requests, streamed or not, n > 1, a reused
// prefix, a cancelled stream;
// the official openai npm client; and a rank killed mid-request, which
// rank 0 answers with a 503 JSON error before the job ends. Skipped where
// the build has no MPI or mpirun was not found. The model is the server
// tests' synth tiny-qwen3 (no ../shared needed), except for the other
// architectures' reference models (skipped without ../shared).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dist/mpirun.h"
#include "server/serve_process.h"

namespace sustain::test {
namespace {

using nlohmann::json;

const std::string kDir = SUSTAIN_SERVER_TEST_DIR;

// Batches of any composition give the same text (--deterministic), so the
// split server and the one-process one can be compared request by request.
const char* kArgs = "-c 1024 -np 4 --deterministic";

std::unique_ptr<ServeProcess> start_split(const std::string& split, const std::string& extra,
                                          std::string* why) {
  return ServeProcess::start(std::string(kArgs) + " --split " + split + " " + extra, why, "",
                             mpirun(2));
}

// POSTs a completion request and hands the response body to `take` as it
// arrives (false: hang up); the HTTP status, -1 without a response.
template <typename F>
int post_stream(httplib::Client& c, const json& body, F take) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    return take(data, n);
  };
  auto r = c.send(req);
  return r ? r->status : -1;
}

// One completion's text (and HTTP status in *status); "" on failure.
std::string complete(const ServeProcess& srv, const json& body, int* status = nullptr,
                     json* whole = nullptr) {
  auto c = srv.client();
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  if (status) *status = r ? r->status : -1;
  if (!r || r->status != 200) return std::string();
  json j = json::parse(r->body, nullptr, false);
  if (whole) *whole = j;
  return j.is_object() ? j["choices"][0]["text"].get<std::string>() : std::string();
}

// A streamed completion's text, joined.
std::string complete_stream(const ServeProcess& srv, json body) {
  body["stream"] = true;
  auto c = srv.client();
  std::string text, buf;
  const int status = post_stream(c, body, [&](const char* data, size_t n) {
    buf.append(data, n);
    for (size_t at; (at = buf.find("\n\n")) != std::string::npos;) {
      const std::string ev = buf.substr(0, at);
      buf.erase(0, at + 2);
      if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
      json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_object() && j.contains("choices"))
        for (const auto& ch : j["choices"]) text += ch.value("text", "");
    }
    return true;
  });
  return status == 200 ? text : std::string("<failed>");
}

json body(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

const std::vector<std::string> kPrompts = {"Once upon a time", "The quick brown fox jumps over",
                                           "In a distant galaxy, far away", "Hello"};

class SplitServe : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitServe, AnswersAsOneProcess) {
  SUSTAIN_REQUIRE_MPIRUN_ONLY();
  ASSERT_NE(server_model(), "") << "sustain synth failed";
  std::string why;
  auto one = ServeProcess::start(kArgs, &why);
  ASSERT_TRUE(one != nullptr) << why;
  auto split = start_split(GetParam(), "", &why);
  ASSERT_TRUE(split != nullptr) << why;

  // The four prompts at once (one step batches them), then streamed.
  std::vector<std::string> want(kPrompts.size()), got(kPrompts.size());
  for (size_t i = 0; i < kPrompts.size(); ++i) want[i] = complete(*one, body(kPrompts[i], 24));
  {
    std::vector<std::thread> th;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      th.emplace_back([&, i] { got[i] = complete(*split, body(kPrompts[i], 24)); });
    for (auto& t : th) t.join();
  }
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    ASSERT_FALSE(want[i].empty()) << one->stderr_text();
    EXPECT_EQ(got[i], want[i]) << kPrompts[i] << "\n" << split->stderr_text();
    EXPECT_EQ(complete_stream(*split, body(kPrompts[i], 24)), want[i]) << kPrompts[i];
  }

  // n = 3: three sequences from one prompt in the same steps, sharing the
  // prompt's cached pages. Seeded samples under the layer split, which adds
  // nothing in another order and so gives one process's logits bit for
  // bit; greedy under the tensor split, whose reassociated sums may move a
  // sample that sits near a boundary (docs/split.md, "Numerics").
  json nb = body("A seeded story about a cat", 16);
  nb["n"] = 3;
  nb["temperature"] = GetParam() == "layer" ? 0.9 : 0.0;
  nb["seed"] = 11;
  json a, b;
  int st = 0;
  complete(*one, nb, &st, &a);
  ASSERT_EQ(st, 200);
  complete(*split, nb, &st, &b);
  ASSERT_EQ(st, 200) << split->stderr_text();
  ASSERT_EQ(a["choices"].size(), 3u);
  ASSERT_EQ(b["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(b["choices"][i]["text"], a["choices"][i]["text"]) << "choice " << i;

  // A prompt of several pages twice: the second reuses the first's pages.
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "word" + std::to_string(i) + " ";
  const std::string first = complete(*split, body(long_prompt, 8));
  json again;
  EXPECT_EQ(complete(*split, body(long_prompt, 8), &st, &again), first);
  EXPECT_GT(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(first, complete(*one, body(long_prompt, 8)));

  // A stream the client drops after a few events: the request is cancelled
  // (its pages freed on every rank) and the server answers the next.
  {
    auto c = split->client();
    json sb = body("Cancel me", 4000);
    sb["stream"] = true;
    int events = 0;
    post_stream(c, sb, [&](const char* data, size_t n) {
      events += static_cast<int>(std::count(data, data + n, '\n'));
      return events < 12;  // false: the client hangs up
    });
  }
  EXPECT_EQ(complete(*split, body(kPrompts[0], 24)), want[0]);
  auto m = split->client().Get("/metrics");
  ASSERT_TRUE(m);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (metric_value(split->client().Get("/metrics")->body, "sustain_requests_running") != 0 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string metrics = split->client().Get("/metrics")->body;
  EXPECT_EQ(metric_value(metrics, "sustain_requests_running"), 0);
  EXPECT_EQ(metric_value(metrics, "sustain_split_ranks"), 2) << metrics;
  EXPECT_GT(metric_value(metrics, "sustain_split_comm_bytes_total"), 0) << metrics;
  EXPECT_EQ(metric_value(one->client().Get("/metrics")->body, "sustain_split_ranks"), -1);
  EXPECT_TRUE(split->alive());
}

INSTANTIATE_TEST_SUITE_P(Splits, SplitServe, ::testing::Values("layer", "tensor"));

// How rank 0 computes goes to the other ranks: with --repack, and with
// --batch-invariant, the layer split's seeded samples and every token's
// logprob are one process's bit for bit. One process runs at -t 1 as each
// rank does (the batch-invariant mode's attention splits a query's keys by
// the thread count). A follower that kept its weights in rows, or that
// left the batch-invariant mode off, parted from one process in the
// logprobs' last bits.
TEST(SplitServe, LayerSplitComputesAsRankZeroSays) {
  SUSTAIN_REQUIRE_MPIRUN_ONLY();
  ASSERT_NE(server_model(), "") << "sustain synth failed";
  for (const std::string extra : {" --repack", " --batch-invariant"}) {
    SCOPED_TRACE(extra);
    std::string why;
    // A launcher (here a no-op one) runs the server at one thread.
    auto one = ServeProcess::start(std::string(kArgs) + extra, &why, "", "env ");
    ASSERT_TRUE(one != nullptr) << why;
    auto split = start_split("layer", extra, &why);
    ASSERT_TRUE(split != nullptr) << why;
    json nb = body("A seeded story about a cat", 12);
    nb["n"] = 3;
    nb["temperature"] = 0.9;
    nb["seed"] = 11;
    nb["logprobs"] = 2;
    json a, b;
    int st = 0;
    complete(*one, nb, &st, &a);
    ASSERT_EQ(st, 200) << one->stderr_text();
    complete(*split, nb, &st, &b);
    ASSERT_EQ(st, 200) << split->stderr_text();
    ASSERT_EQ(a["choices"].size(), 3u);
    ASSERT_EQ(b["choices"].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(b["choices"][i]["text"], a["choices"][i]["text"]) << "choice " << i;
      EXPECT_EQ(b["choices"][i]["logprobs"]["token_logprobs"],
                a["choices"][i]["logprobs"]["token_logprobs"])
          << "choice " << i;
    }
  }
}

// The official openai npm client, as ServerNpm.OfficialOpenAiClient runs it
// against one process, against the tensor split.
TEST(SplitServeNpm, OfficialOpenAiClient) {
  SUSTAIN_REQUIRE_MPIRUN_ONLY();
  int code = 0;
  if (run_shell("command -v node >/dev/null 2>&1", &code); code != 0)
    GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(kDir + "/node_modules/openai/package.json"))
    GTEST_SKIP() << "npm package openai is not installed (scripts/setup_npm.sh)";
  ASSERT_NE(server_model(), "") << "sustain synth failed";
  std::string why;
  auto srv = start_split("tensor", "--api-key test-key", &why);
  ASSERT_TRUE(srv != nullptr) << why;
  const std::string log = tmp_path("split_openai_client_stderr.txt");
  auto out = run_shell("cd '" + kDir + "' && node openai_client.mjs http://127.0.0.1:" +
                           std::to_string(srv->port()) + "/v1 test-key 2>" + log,
                       &code);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(code, 0) << "openai_client.mjs failed; stdout: " << *out
                     << "\nserver: " << srv->stderr_text();
  const json r = json::parse(*out);
  EXPECT_EQ(r["models"][0], "server_tiny_qwen3");
  EXPECT_EQ(r["completion"]["finish_reason"], "length");
  EXPECT_EQ(r["completion"]["completion_tokens"], 8);
  EXPECT_EQ(r["completion_stream"]["text"], r["completion"]["text"]);
  EXPECT_EQ(r["chat"]["finish_reason"], "length");
  EXPECT_EQ(r["chat_stream"]["text"], r["chat"]["text"]);
  EXPECT_EQ(r["chat_stream"]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(r["bad_request"]["status"], 400);
  EXPECT_EQ(r["unauthorized"]["status"], 401);
}

// SIGKILL of rank 1 while a request generates: rank 0 answers it with a 503
// JSON error (and ends a stream with an error event), and the job exits
// non-zero, within 10 s.
class SplitServeFaults : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitServeFaults, KilledRankFailsTheRequestWith503) {
  SUSTAIN_REQUIRE_MPIRUN_ONLY();
  ASSERT_NE(server_model(), "") << "sustain synth failed";
  std::string why;
  auto srv = ServeProcess::start("-c 60000 -np 2 --split " + GetParam(), &why, "", mpirun(2));
  ASSERT_TRUE(srv != nullptr) << why;
  int status = 0;
  std::string response, stream_tail;
  std::atomic<int> streamed{0};
  std::thread plain([&] {
    auto c = srv->client(30);
    auto r = c.Post("/v1/completions", body("Long story", 50000).dump(), "application/json");
    status = r ? r->status : -1;
    if (r) response = r->body;
  });
  std::thread streaming([&] {
    json sb = body("Another long story", 50000);
    sb["stream"] = true;
    auto c = srv->client(30);
    post_stream(c, sb, [&](const char* data, size_t n) {
      streamed += static_cast<int>(n);
      stream_tail.append(data, n);
      if (stream_tail.size() > 4096) stream_tail.erase(0, stream_tail.size() - 4096);
      return true;
    });
  });
  // Both requests run once tokens stream.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (streamed.load() < 2000 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t rank0 = rank_below(srv->pid(), 0), rank1 = rank_below(srv->pid(), 1);
  ASSERT_GT(rank1, 0) << "rank 1 not found";
  ASSERT_GT(streamed.load(), 0) << "no token streamed";
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  plain.join();
  streaming.join();
  const int rc = srv->signal_and_wait(0, 10000);  // signal 0: only wait
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 10.0);
  // No status at all (-1): the process ended before the answer was written.
  EXPECT_EQ(status, 503) << response << "\njob's stderr:\n" << srv->stderr_text();
  const json e = json::parse(response, nullptr, false);
  ASSERT_TRUE(e.is_object()) << response;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("ranks"), std::string::npos) << response;
  EXPECT_NE(stream_tail.find("\"error\""), std::string::npos) << stream_tail;
  EXPECT_NE(rc, -1) << "the job still runs 10 s after rank 1 was killed";
  EXPECT_NE(rc, 0) << "the job exited 0";
  if (rank0 > 0) {
    EXPECT_TRUE(gone_soon(rank0)) << "rank 0 outlived the job by 2 s";
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, SplitServeFaults, ::testing::Values("layer", "tensor"));

// The reference models the other architectures need: a hybrid (tiny-qwen35,
// recurrent state whose slots and prefix snapshots rank 0 hands out and the
// followers mirror; under the tensor split each rank holds its DeltaNet
// heads' part of every state), a sliding-window model (tiny-gemma3) and a
// mixture of experts (tiny-qwen3moe; under the tensor split each rank runs
// the chosen experts it holds), against one process: concurrent prompts,
// and a prompt of several pages twice, the second resumed from the prefix
// cache (a state snapshot restored on every rank).
class SplitServeArchitectures : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitServeArchitectures, AnswerAsOneProcess) {
  SUSTAIN_REQUIRE_MPIRUN();
  for (const std::string name : {"tiny-qwen35-f32", "tiny-gemma3-f32", "tiny-qwen3moe-f32"}) {
    SCOPED_TRACE(name);
    const std::string m = ref_path("models/" + name + ".gguf");
    const std::string args = "-c 2048 -np 4 --deterministic --state-snapshot-interval 64";
    std::string why;
    auto one = ServeProcess::start(args, &why, m);
    ASSERT_TRUE(one != nullptr) << why;
    auto split = ServeProcess::start(args + " --split " + GetParam(), &why, m, mpirun(2));
    ASSERT_TRUE(split != nullptr) << why;
    json ids = json::array();
    for (int i = 0; i < 200; ++i) ids.push_back(100 + i);
    json long_body = {
        {"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
    std::vector<std::string> want, got(kPrompts.size());
    for (const auto& p : kPrompts) want.push_back(complete(*one, body(p, 16)));
    std::vector<std::thread> th;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      th.emplace_back([&, i] { got[i] = complete(*split, body(kPrompts[i], 16)); });
    for (auto& t : th) t.join();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      ASSERT_FALSE(want[i].empty()) << one->stderr_text();
      EXPECT_EQ(got[i], want[i]) << kPrompts[i] << "\n" << split->stderr_text();
    }
    const std::string cold = complete(*one, long_body);
    json warm;
    int st = 0;
    EXPECT_EQ(complete(*split, long_body), cold) << split->stderr_text();
    EXPECT_EQ(complete(*split, long_body, &st, &warm), cold);
    EXPECT_GE(warm["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 64)
        << warm.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, SplitServeArchitectures, ::testing::Values("layer", "tensor"));

// Speculation over ranks: rank 0 drafts (prompt lookup), the verify step,
// the KV rollback of rejected drafts and a hybrid's recurrent-state backup
// and re-absorb run on every rank. On random-weight models most drafts are
// rejected, so the rollback path runs many times; the text must equal one
// process's without speculation, and drafts must have been counted.
// Sends `prompts` to `split` at once and each to `one` (no speculation):
// the texts must be equal, drafts made, and some rejected (the rollback ran
// on every rank).
void expect_speculation_keeps_text(const ServeProcess& one, const ServeProcess& split,
                                   const std::vector<std::string>& prompts) {
  std::vector<std::string> want, got(prompts.size());
  std::vector<json> whole(prompts.size());
  for (const auto& p : prompts) want.push_back(complete(one, body(p, 24)));
  std::vector<std::thread> th;
  for (size_t i = 0; i < prompts.size(); ++i)
    th.emplace_back([&, i] { got[i] = complete(split, body(prompts[i], 24), nullptr, &whole[i]); });
  for (auto& t : th) t.join();
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_FALSE(want[i].empty()) << one.stderr_text();
    EXPECT_EQ(got[i], want[i]) << prompts[i] << "\n" << split.stderr_text();
    if (!whole[i]["usage"].contains("speculative")) continue;  // it drafted nothing
    drafted += whole[i]["usage"]["speculative"]["drafted"].get<int64_t>();
    accepted += whole[i]["usage"]["speculative"]["accepted"].get<int64_t>();
  }
  EXPECT_GT(drafted, 0);
  EXPECT_LT(accepted, drafted) << "no draft was rejected: the rollback did not run";
}

class SplitServeSpeculation : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitServeSpeculation, KeepsTheText) {
  SUSTAIN_REQUIRE_MPIRUN();
  for (const std::string name : {"tiny-qwen35-f32", "tiny-llama-Q4_K_M"}) {
    SCOPED_TRACE(name);
    const std::string m = ref_path("models/" + name + ".gguf");
    std::string why;
    auto one = ServeProcess::start(kArgs, &why, m);
    ASSERT_TRUE(one != nullptr) << why;
    auto split = ServeProcess::start(
        std::string(kArgs) + " --spec ngram --draft-max 6 --split " + GetParam(), &why, m,
        mpirun(2));
    ASSERT_TRUE(split != nullptr) << why;
    std::string prompt;
    for (int i = 0; i < 6; ++i) prompt += "the cat sat on the mat and ";
    expect_speculation_keeps_text(*one, *split,
                                  {prompt, prompt + "then", kPrompts[0], kPrompts[1]});
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, SplitServeSpeculation, ::testing::Values("layer", "tensor"));

// --spec mtp over ranks: the MTP block on rank 0 drafts from the hidden
// states one process would see — rank 0's own under the tensor split (its
// residual stream is whole after each all-reduce), the last rank's, sent
// with the logits, under the layer split. The text equals one process's
// without speculation, drafts were made, and rejected ones were rolled back
// on every rank (the hybrid's state restored and re-absorbed).
class SplitServeMtp : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitServeMtp, KeepsTheText) {
  SUSTAIN_REQUIRE_MPIRUN();
  const std::string m = ref_path("models/tiny-qwen35-f32.gguf");
  std::string why;
  auto one = ServeProcess::start(kArgs, &why, m);
  ASSERT_TRUE(one != nullptr) << why;
  auto split = ServeProcess::start(std::string(kArgs) + " --spec mtp --split " + GetParam(), &why,
                                   m, mpirun(2));
  ASSERT_TRUE(split != nullptr) << why;
  expect_speculation_keeps_text(*one, *split, kPrompts);
  // Sampled (temperature 0.8, seeded): the text depends on the drafts the
  // block made (each is accepted or rejected by a draw against it), so it
  // equals one process's with --spec mtp only if the block saw the same
  // hidden states. The layer split computes them bit for bit as one
  // process does; the tensor split's sums differ in the last bits.
  if (GetParam() != "layer") return;
  auto one_mtp = ServeProcess::start(std::string(kArgs) + " --spec mtp", &why, m);
  ASSERT_TRUE(one_mtp != nullptr) << why;
  for (const auto& p : kPrompts) {
    json b = body(p, 24);
    b["temperature"] = 0.8;
    b["seed"] = 5;
    const std::string a = complete(*one_mtp, b);
    ASSERT_FALSE(a.empty()) << one_mtp->stderr_text();
    EXPECT_EQ(complete(*split, b), a) << p << "\n" << split->stderr_text();
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, SplitServeMtp, ::testing::Values("layer", "tensor"));

// `sustain bench --split` under mpirun: the ladder, a prefill point and the
// concurrency ladder run over the ranks, and the report says what rank 0's
// transport carried; ablation rows run the same bench on rank 0 alone and
// over the same ranks cut the other way, and the report names the layout
// that wins each kind of work.
TEST(SplitBench, ReportsWhatTheRanksExchanged) {
  SUSTAIN_REQUIRE_MPIRUN_ONLY();
  ASSERT_NE(server_model(), "") << "sustain synth failed";
  for (const std::string split : {"layer", "tensor"}) {
    const std::string other = split == "layer" ? "tensor" : "layer";
    const std::string dir = tmp_path("split_bench_" + split + "_" + std::to_string(getpid()));
    // With a row on rank 0 alone (two threads), the same run on one rank,
    // and a row over the other split.
    const CliResult r =
        run_cli("bench -m " + server_model() +
                    " --ctx 128,512 -n 8 -r 1 -t 1 --prefill 64 --concurrency 1,2 "
                    "--conc-prompt 16 --bw-mib 64 --bw-reps 1 --quality off -o " +
                    dir + " --split " + split +
                    " --ablate split=off,threads=2 --ablate split=" + other + ",threads=1",
                mpirun(2));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream f(dir + "/report.json");
    const json rep = json::parse(f, nullptr, false);
    ASSERT_TRUE(rep.is_object()) << split;
    const json& sp = rep["conditions"]["split"];
    EXPECT_EQ(sp["mode"], split);
    EXPECT_EQ(sp["ranks"], 2);
    EXPECT_GT(sp["comm_bytes"].get<double>(), 0);
    EXPECT_GT(sp["steps"].get<double>(), 0);
    EXPECT_EQ(rep["ladder"].size(), 2u);
    EXPECT_TRUE(rep.contains("concurrency")) << split;
    const json& rows = rep["ablation"]["rows"];
    ASSERT_EQ(rows.size(), 3u) << rep["ablation"].dump();
    EXPECT_EQ(rows[0]["split"]["mode"], split);
    EXPECT_GT(rows[0]["split"]["comm_bytes_per_step"].get<double>(), 0);
    EXPECT_TRUE(rows[1]["split"].is_null()) << rows[1].dump();
    EXPECT_EQ(rows[1]["engine"]["threads"], 2);
    EXPECT_EQ(rows[2]["split"]["mode"], other) << rows[2].dump();
    EXPECT_GT(rows[2]["split"]["comm_bytes_per_step"].get<double>(), 0);
    // The verdict: per workload, the row with the highest figure.
    const json& v = rep["ablation"]["split_verdict"];
    for (const char* w : {"read_heavy", "write_heavy"}) {
      ASSERT_TRUE(v.contains(w)) << v.dump();
      ASSERT_EQ(v[w]["rows"].size(), 3u);
      double best = 0;
      for (const auto& c : v[w]["rows"]) best = std::max(best, c["value"].get<double>());
      EXPECT_EQ(v[w]["winner"]["value"].get<double>(), best);
      EXPECT_NE(v[w]["runner_up"], v[w]["winner"]["layout"]);
      EXPECT_GE(v[w]["margin_pct"].get<double>(), 0.0);
      EXPECT_EQ(v[w]["close"].get<bool>(), v[w]["margin_pct"].get<double>() < 5.0);
    }
    std::ifstream md(dir + "/report.md");
    const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("Split verdict"), std::string::npos);
    for (const auto& row : rows) {
      EXPECT_EQ(row["ladder"].size(), 2u);
      ASSERT_TRUE(row["concurrency"].is_array()) << row.dump();
      EXPECT_EQ(row["concurrency"].size(), 2u);
    }
    std::filesystem::remove_all(dir);
  }
}

// What the engine does not run over ranks (or at all) is refused with a
// message naming it, and the job ends (no rank left waiting).
TEST(SplitServe, RefusesWhatIsNotBuiltOverRanks) {
  SUSTAIN_REQUIRE_MPIRUN_ONLY();
  ASSERT_NE(server_model(), "") << "sustain synth failed";
  // A model without an MTP block, over ranks as in one process.
  CliResult r = run_cli(
      "serve -m " + server_model() + " --port 0 -t 1 -c 256 --spec mtp --split layer", mpirun(2));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no MTP/NextN block"), std::string::npos) << r.err;
  r = run_cli("bench --preset tiny-llama --split layer --quality off");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-m"), std::string::npos) << r.err;
  r = run_cli("bench -m " + server_model() +
                  " --ctx 128 -n 4 -r 1 -t 1 --concurrency 1 "
                  "--ablate kv=q8_0 --split tensor",
              mpirun(2));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--quality off"), std::string::npos) << r.err;
  r = run_cli("bench -m " + server_model() +
              " --ctx 128 -n 4 -r 1 -t 1 --concurrency 1 --quality off --ablate split=off");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("mpirun"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // refused before any measurement
  r = run_cli("bench -m " + server_model() +
                  " --ctx 128 -n 4 -r 1 -t 1 --quality off --split layer --ablate split=sideways",
              mpirun(2));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("split must be on"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sustain::test

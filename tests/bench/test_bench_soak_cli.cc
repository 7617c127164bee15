// End to end: `sustain bench soak` as a user runs it. A 20-second soak of a
// `sustain serve` child on a tiny synthetic model passes its verdict with
// every field of the report; against a server that answers 5xx (a fake one
// on 127.0.0.1) the verdict fails and the exit code says so; SIGINT ends it
// early with a report; bad flags are named.
#include <gtest/gtest.h>

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/report.h"
#include "e2e/cli_runner.h"
#include "test_util.h"

namespace sustain::test {
namespace {

using nlohmann::json;

const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = tmp_path("bench_soak_tiny_qwen3.gguf");
    auto r = run_cli("synth --preset tiny-qwen3 --type Q4_K_M -t 2 -o " + p);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return path;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The issue's 60-second CI soak: long enough for every check but the
// drifts (which need two minutes of samples and are reported as not
// judged), bursts, probes and the idle check after the load.
TEST(CliSoak, ShortSoakOfAStartedServerPasses) {
  const std::string dir = tmp_path("bench_soak_report");
  std::filesystem::remove_all(dir);
  auto r = run_cli("bench soak -m " + tiny_model() +
                   " --duration 60s --sample-interval 5s --max-prompt 256 -np 4 -t 2 -o " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("verdict PASS"), std::string::npos) << r.err;
  const json j = json::parse(slurp(dir + "/report.json"));
  const Status st = bench::validate_report(j);
  ASSERT_TRUE(st) << st.message();
  const json& k = j["soak"];
  EXPECT_GE(k["duration_s"].get<double>(), 60);
  EXPECT_LT(k["duration_s"].get<double>(), 90);
  EXPECT_GT(k["requests"].get<int64_t>(), 60);
  EXPECT_TRUE(k["errors"].empty()) << k["errors"].dump() << k["error_examples"].dump();
  EXPECT_EQ(k["errors_5xx"], 0);
  EXPECT_EQ(k["pages_leaked"], 0);
  EXPECT_TRUE(k["rss_drift_pct_per_h"].is_number());  // measured, not judged in 60 s
  EXPECT_EQ(k["deterministic_ok"], true);
  EXPECT_EQ(k["pass"], true);
  // The mix reached the server: malformed requests answered 4xx, streams cut off.
  EXPECT_GT(k["outcomes"].value("malformed_4xx", 0), 0) << k["outcomes"].dump();
  EXPECT_GT(k["outcomes"].value("disconnected", 0), 0) << k["outcomes"].dump();
  EXPECT_GE(k["probes"].size(), 3u);
  // A sample every 5 s, each with the child's RSS and the server's gauges.
  ASSERT_GE(k["samples"].size(), 11u);
  bool burst = false;
  for (const auto& s : k["samples"]) {
    EXPECT_GT(s["rss_bytes"].get<double>(), 1e6);
    EXPECT_GE(s["kv_pages_used"].get<double>(), 0);
    EXPECT_GE(s["queue"].get<double>(), 0);
    EXPECT_EQ(s["busy_rejections"].get<double>(), 0);
    EXPECT_GE(s["client_disconnects"].get<double>(), 0);
    burst = burst || s["burst"].get<bool>();
  }
  EXPECT_TRUE(burst);
  EXPECT_EQ(j["conditions"]["target"]["kind"], "child");
  EXPECT_NE(slurp(dir + "/report.md").find("## Soak verdict"), std::string::npos);
  EXPECT_NE(slurp(dir + "/report.html").find("Soak: throughput over time"), std::string::npos);
  EXPECT_NE(slurp(dir + "/serve.log").find("SIGTERM"), std::string::npos);
}

// A server whose completions all fail with 500: every check that can see it fails.
TEST(CliSoak, FailingVerdictExitsNonZeroNamingTheChecks) {
  httplib::Server svr;
  svr.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"fake"}]})", "application/json");
  });
  svr.Post(".*", [](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content(R"({"error":{"message":"boom"}})", "application/json");
  });
  const int port = svr.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { svr.listen_after_bind(); });
  const std::string dir = tmp_path("bench_soak_fail");
  std::filesystem::remove_all(dir);
  auto r = run_cli("bench soak --url http://127.0.0.1:" + std::to_string(port) +
                   " --duration 3s --sample-interval 1s --concurrency 2 -o " + dir);
  svr.stop();
  t.join();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("soak verdict: FAIL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("errors_5xx"), std::string::npos) << r.err;
  const json j = json::parse(slurp(dir + "/report.json"));
  const json& k = j["soak"];
  EXPECT_EQ(k["pass"], false);
  EXPECT_GT(k["errors_5xx"].get<int64_t>(), 0);
  EXPECT_GT(k["errors"]["http_5xx"].get<int64_t>(), 0);
  EXPECT_TRUE(k["pages_leaked"].is_null());  // no /metrics: not measured
  EXPECT_EQ(k["deterministic_ok"], false);
}

// Ctrl-C (SIGINT) mid-run: the traffic stops, the report is written for the
// time so far with the verdict failed as 'completed', and the started
// server is gone.
TEST(CliSoak, InterruptedSoakWritesItsReportAndStopsTheServer) {
  const std::string dir = tmp_path("bench_soak_interrupted");
  const std::string err = tmp_path("bench_soak_interrupted.err");
  std::filesystem::remove_all(dir);
  // SIGINT 3 s after the traffic started (the line naming the URL), however
  // long the server took to start on a loaded machine; before that a SIGINT
  // ends the soak at once, as any command.
  const std::string cmd = std::string(SUSTAIN_BINARY) + " bench soak -m " + tiny_model() +
                          " --duration 60s --sample-interval 1s --max-prompt 128 -np 2 -t 2 -o " +
                          dir + " </dev/null >/dev/null 2>" + err +
                          " & p=$!; for i in $(seq 1200); do grep -q 'against http' " + err +
                          " && break; sleep 0.1; done; sleep 3; kill -INT $p; wait $p; echo rc=$?";
  FILE* sh = popen(cmd.c_str(), "r");
  ASSERT_NE(sh, nullptr);
  std::string out;
  char buf[256];
  for (size_t n; (n = fread(buf, 1, sizeof buf, sh)) > 0;) out.append(buf, n);
  pclose(sh);
  const std::string log = slurp(err);
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out << log;
  EXPECT_NE(log.find("stopping the traffic"), std::string::npos) << log;
  EXPECT_NE(log.find("completed"), std::string::npos) << log;
  const json j = json::parse(slurp(dir + "/report.json"));
  const json& k = j["soak"];
  EXPECT_EQ(k["interrupted"], true);
  EXPECT_EQ(k["pass"], false);
  EXPECT_LT(k["duration_s"].get<double>(), 10);
  EXPECT_GT(k["samples"].size(), 0u);
  const std::string url = j["conditions"]["target"]["url"];
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(1, 0);
  EXPECT_FALSE(cli.Get("/health")) << "the started server still answers on " << url;
}

TEST(CliSoak, BadFlagsAreNamed) {
  for (const auto& [args, flag] :
       {std::pair{"--url http://127.0.0.1:1 --duration 10x", "--duration"},
        std::pair{"--url http://127.0.0.1:1 --duration 5s "
                  "--sample-interval 9s",
                  "--sample-interval"},
        std::pair{"--url http://127.0.0.1:1 -m x.gguf", "--url"},
        std::pair{"--url ftp://x --duration 1s", "ftp://x"},
        std::pair{"--url http://127.0.0.1:1 --malformed-share 2", "--malformed-share"}}) {
    auto r = run_cli(std::string("bench soak ") + args + " -o " + tmp_path("bench_soak_bad"));
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace sustain::test

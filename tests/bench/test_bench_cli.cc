// End to end: `sustain bench` as a user runs it on a tiny model, writing the
// three report files; `bench bandwidth`; bad flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/report.h"
#include "e2e/cli_runner.h"
#include "test_util.h"

namespace sustain::test {
namespace {

using nlohmann::json;

const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = tmp_path("bench_cli_tiny_qwen3.gguf");
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

TEST(CliBench, WritesTheThreeReportsWithEveryCondition) {
  const std::string dir = tmp_path("bench_cli_report");
  std::filesystem::remove_all(dir);
  auto r = run_cli("bench -m " + tiny_model() +
                   " --ctx 64,128 -n 4 -r 2 -t 2 --concurrency 1,2 --conc-prompt 32 "
                   "--poisson-requests 2 --prefill 100 --bw-mib 64 --bw-reps 2 "
                   "--ablate kv=q8_0 -o " +
                   dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(dir + "/report.json"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("bench ladder"), std::string::npos) << r.err;  // progress on stderr
  const json j = json::parse(slurp(dir + "/report.json"));
  const Status st = bench::validate_report(j);
  ASSERT_TRUE(st) << st.message();
  // The ladder as the issue spells it.
  ASSERT_EQ(j["ladder"].size(), 2u);
  for (const auto& g : j["ladder"]) {
    for (const char* k : {"tok_s_p50", "tok_s_p95", "tpot_ms_p50", "tpot_ms_p95", "tpot_ms_p99"})
      EXPECT_GT(g["decode"][k].get<double>(), 0) << k;
    EXPECT_GT(g["prefill"]["tok_s"].get<double>(), 0);
    EXPECT_GT(g["prefill"]["ttft_ms"].get<double>(), 0);
    EXPECT_GT(g["kv_bytes"].get<int64_t>(), 0);
    EXPECT_GT(g["peak_rss_bytes"].get<int64_t>(), 0);
    EXPECT_GT(g["bound"]["bandwidth_tok_s"].get<double>(), 0);
    EXPECT_GT(g["bound"]["compute_tok_s"].get<double>(), 0);
    ASSERT_EQ(g["decode"]["samples_ms"].size(), 2u);
    EXPECT_EQ(g["decode"]["samples_ms"][0].size(), 3u);
    EXPECT_EQ(g["decode"]["visible_tokens_per_rep"], json({4, 4}));
  }
  EXPECT_EQ(j["ladder"][1]["ctx"], 128);
  // sustain plan's prediction beside the measured peak RSS: the KV bytes are
  // the engine's pool exactly, and the total is within 10 % of the RSS.
  ASSERT_TRUE(j.contains("memory_plan")) << j["notes"].dump();
  EXPECT_EQ(j["memory_plan"]["plan_kv_bytes"], j["memory_plan"]["engine_kv_bytes"]);
  EXPECT_GT(j["memory_plan"]["measured_peak_rss_bytes"].get<uint64_t>(), 0u);
  EXPECT_NEAR(j["memory_plan"]["plan_over_peak_rss"].get<double>(), 1.0, 0.10);
  EXPECT_EQ(j["ladder"][1]["prefill"]["from_ctx"].get<int64_t>() +
                j["ladder"][1]["prefill"]["new_tokens"].get<int64_t>(),
            128);
  // Every condition.
  const json& c = j["conditions"];
  EXPECT_EQ(c["model"]["arch"], "qwen3");
  EXPECT_EQ(c["model"]["path"], tiny_model());
  for (const char* k : {"token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                        "ffn_up", "ffn_down", "output"})
    EXPECT_TRUE(c["model"]["tensor_formats"].contains(k)) << k;
  EXPECT_EQ(c["kv"]["k_type"], "F16");
  EXPECT_EQ(c["engine"]["threads"], 2);
  EXPECT_EQ(c["engine"]["n_parallel"], 2);
  EXPECT_EQ(c["workload"]["ctx_measured"], json({64, 128}));
  EXPECT_EQ(c["workload"]["concurrency"], json({1, 2}));
  EXPECT_EQ(c["sampler"]["temperature"], 0.0);
  EXPECT_FALSE(c["machine"]["cpu_model"].get<std::string>().empty());
  EXPECT_TRUE(c["machine"]["features"].is_array());
  EXPECT_FALSE(c["build"]["git_commit"].get<std::string>().empty());
  EXPECT_EQ(j["machine"]["read_gbps"].size(), 2u);
  // Prefill from empty, and the projection.
  bool from_empty = false;
  for (const auto& p : j["prefill"]["points"])
    if (p["source"] == "prefill") {
      from_empty = true;
      EXPECT_EQ(p["new_tokens"], 100);
    }
  EXPECT_TRUE(from_empty);
  EXPECT_FALSE(j["prefill"]["projected"].empty());
  // Concurrency: two fixed levels and the Poisson ones, every request timed.
  const json& lv = j["concurrency"]["levels"];
  ASSERT_GE(lv.size(), 3u);
  EXPECT_EQ(lv[1]["concurrency"], 2);
  EXPECT_EQ(lv[1]["requests"], 4);
  EXPECT_EQ(lv[1]["failed"], 0);
  EXPECT_EQ(lv[1]["output_tokens"], 16);
  EXPECT_EQ(lv[1]["samples"].size(), 4u);
  EXPECT_EQ(lv[2]["mode"], "poisson");
  // Ablation: baseline and the switch, with its delta.
  ASSERT_EQ(j["ablation"]["rows"].size(), 2u);
  EXPECT_EQ(j["ablation"]["rows"][1]["kv"]["k_type"], "Q8_0");
  EXPECT_TRUE(j["ablation"]["rows"][1]["ladder"][0]["delta_pct"].is_number());
  // The other two files.
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("## Context ladder"), std::string::npos);
  EXPECT_NE(md.find("## Concurrency ladder"), std::string::npos);
  const std::string html = slurp(dir + "/report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(CliBench, Bandwidth) {
  auto r = run_cli("bench bandwidth --json -t 1 --bw-mib 64 --bw-reps 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["read_gbps"].size(), 2u);
  EXPECT_GT(j["read_gbps_best"].get<double>(), 0);
  EXPECT_GT(j["fma_gflops_best"].get<double>(), 0);
}

TEST(CliBench, BadFlagsAreNamed) {
  struct Case {
    std::string args, want;
  };
  const std::vector<Case> cases = {
      {"-m " + tiny_model() + " --ctx 64,abc", "--ctx"},
      {"-m " + tiny_model() + " --ctx 64 -ctk q9_9", "q9_9"},
      {"-m " + tiny_model() + " --ctx 64 --concurrency 0", "--concurrency"},
      {"-m " + tiny_model() + " --ctx 64 --ablate colour=blue", "colour"},
      {"-m " + tiny_model() + " --ctx 64 -n 1", "-n 1"},
      {"-m " + tmp_path("no_such_model.gguf") + " --ctx 64", "no_such_model.gguf"},
      {"--preset no-such --ctx 64", "no-such"},
      {"--url https://example.com", "https"},
      {"--url http://127.0.0.1:1 -n 4", "127.0.0.1:1"},
  };
  for (const auto& c : cases) {
    auto r = run_cli("bench " + c.args + " --bw-mib 64 --bw-reps 1 -o " + tmp_path("bench_bad"));
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace sustain::test

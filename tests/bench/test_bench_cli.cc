// End to end: `sustain bench` as a user runs it on a tiny model, writing the
// three report files; `bench bandwidth`; bad flags.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
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

// A few hundred tokens of text: too short for a 4K quality context.
std::string short_text() {
  const std::string p = tmp_path("bench_cli_short.txt");
  std::ofstream f(p);
  for (int i = 0; i < 20; ++i) f << "The quick brown fox jumps over the lazy dog. ";
  return p;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `bench -m MODEL` on a short quiet run (no concurrency ladder, a small
// bandwidth buffer, no quality pass unless `quality`) with ARGS, into tmp
// DIR (emptied first); *r gets the exit status and output, the return its
// report.json (null when the run failed).
json quick_bench(const std::string& model, const std::string& args, const std::string& dir,
                 CliResult* r, bool quality = false) {
  std::filesystem::remove_all(dir);
  *r = run_cli("bench -m " + model + " -t 2 --no-concurrency --bw-mib 64 --bw-reps 1 " +
               (quality ? "" : "--quality off ") + args + " -o " + dir);
  return r->exit_code == 0 ? json::parse(slurp(dir + "/report.json")) : json();
}

TEST(CliBench, WritesTheThreeReportsWithEveryCondition) {
  const std::string dir = tmp_path("bench_cli_report");
  std::filesystem::remove_all(dir);
  auto r = run_cli("bench -m " + tiny_model() +
                   " --ctx 64,128 -n 4 -r 2 -t 2 --concurrency 1,2 --conc-prompt 32 "
                   "--poisson-requests 2 --prefill 100 --bw-mib 64 --bw-reps 2 "
                   "--ablate kv=q8_0 --ablate layout=rows --ablate repack=off --quality off -o " +
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
  // Ablation: baseline and the switches, with their deltas: q8_0 KV tiled,
  // then the same row by row, then with the weights left in rows (repacked
  // by default: this K-quant model's Q8_0 matrices, where the CPU has the
  // kernels).
  ASSERT_EQ(j["ablation"]["rows"].size(), 4u);
  EXPECT_EQ(j["ablation"]["rows"][2]["engine"]["repack"], true);
  EXPECT_EQ(j["ablation"]["rows"][3]["engine"]["repack"], false);
  EXPECT_EQ(j["ablation"]["rows"][3]["kv"]["kv_layout"], "rows");
  EXPECT_EQ(j["ablation"]["rows"][1]["kv"]["k_type"], "Q8_0");
  EXPECT_EQ(j["ablation"]["rows"][1]["kv"]["kv_layout"], "tiled");
  EXPECT_EQ(j["ablation"]["rows"][2]["kv"]["k_type"], "Q8_0");
  EXPECT_EQ(j["ablation"]["rows"][2]["kv"]["kv_layout"], "rows");
  EXPECT_TRUE(j["ablation"]["rows"][1]["ladder"][0]["delta_pct"].is_number());
  // --quality off: nothing measured, and the report says so.
  for (const auto& row : j["ablation"]["rows"]) {
    EXPECT_EQ(row["quality"]["skipped"], "--quality off");
    EXPECT_FALSE(row["quality"].contains("kl"));
  }
  EXPECT_TRUE(j["ablation"]["quality"].is_null());
  EXPECT_NE(j["ablation"]["quality_note"].get<std::string>().find("--quality off"),
            std::string::npos);
  // The other two files.
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("## Context ladder"), std::string::npos);
  EXPECT_NE(md.find("## Concurrency ladder"), std::string::npos);
  const std::string html = slurp(dir + "/report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

// The quality column: each ablation row against row 0, measured by the KL
// pass `sustain eval kl` runs and the needle retriever.
TEST(CliBench, AblationQualityAgainstTheBaseline) {
  // A tiny-llama with f16 weights and its Q8_0 quantization: the same
  // vocabulary, so KL between the weight formats is defined.
  const std::string f16 = tmp_path("bench_cli_tiny_llama_f16.gguf");
  const std::string q8 = tmp_path("bench_cli_tiny_llama_q8_0.gguf");
  auto r = run_cli("synth --preset tiny-llama --type F16 -t 2 -o " + f16);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("quantize " + f16 + " " + q8 + " --type Q8_0 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = tmp_path("bench_cli_quality");
  std::filesystem::remove_all(dir);
  r = run_cli("bench -m " + f16 +
              " --ctx 64 -n 4 -r 1 -t 2 --no-concurrency --bw-mib 64 --bw-reps 1 "
              "--ablate kv=q4_0 --ablate prefix=off --ablate kv=f16,model=" +
              q8 + " --quality-ctx 128,512 --quality-budget 0 --seed 7 -o " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("bench quality KL"), std::string::npos) << r.err;  // progress
  const json j = json::parse(slurp(dir + "/report.json"));
  const Status st = bench::validate_report(j);
  ASSERT_TRUE(st) << st.message();
  const json& rows = j["ablation"]["rows"];
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(j["ablation"]["quality"]["ctx"], json({128, 512}));
  EXPECT_EQ(j["ablation"]["quality"]["kl"]["tokens_evaluated"], 512);
  auto kl_at = [&](size_t row, size_t k) { return rows[row]["quality"]["kl"][k]; };
  // Row 0 against a second run of itself: exactly 0, every top-1 the same.
  for (size_t k = 0; k < 2; ++k) {
    const json c = kl_at(0, k);
    EXPECT_EQ(c["kl_max"].get<double>(), 0.0) << c;
    EXPECT_EQ(c["same_top1"].get<double>(), 1.0) << c;
  }
  EXPECT_EQ(kl_at(0, 0)["lo"], 64);  // the bucket (C/2, C] of C = 128
  EXPECT_EQ(kl_at(0, 0)["hi"], 128);
  EXPECT_EQ(kl_at(0, 1)["n"], 256);
  // A 4-bit KV cache costs something, but is not another model.
  for (size_t k = 0; k < 2; ++k) {
    const json c = kl_at(1, k);
    EXPECT_GT(c["kl_mean"].get<double>(), 0.0) << c;
    EXPECT_LT(c["kl_mean"].get<double>(), 0.5) << c;
    EXPECT_GE(c["kl_p99"].get<double>(), c["kl_median"].get<double>()) << c;
    EXPECT_GT(c["same_top1"].get<double>(), 0.3) << c;
    EXPECT_LE(c["same_top1"].get<double>(), 1.0) << c;
  }
  // The prefix cache changes nothing the KL pass computes: it points at row 1.
  EXPECT_EQ(rows[2]["quality"]["same_as_row"], 1);
  EXPECT_FALSE(rows[2]["quality"].contains("kl"));
  // Q8_0 weights against F16: KL > 0, with the baseline's KV formats (no needle row).
  EXPECT_GT(kl_at(3, 1)["kl_mean"].get<double>(), 0.0);
  EXPECT_LT(kl_at(3, 1)["kl_mean"].get<double>(), 0.5);
  EXPECT_FALSE(rows[3]["quality"].contains("needle"));
  // The needle retriever for the baseline's and the q4_0 formats: 3 depths per context.
  for (size_t row : {0, 1}) {
    const json& nd = rows[row]["quality"]["needle"];
    ASSERT_EQ(nd["cells"].size(), 2u) << nd;
    EXPECT_EQ(nd["total"], 6);
    EXPECT_GE(nd["correct"].get<int>(), 0);
    EXPECT_EQ(nd["cells"][1]["ctx"], 512);
  }
  EXPECT_EQ(rows[0]["quality"]["needle"]["kv"], "f16/f16");
  EXPECT_EQ(rows[1]["quality"]["needle"]["kv"], "q4_0/q4_0");
  EXPECT_EQ(rows[0]["quality"]["needle"]["correct"], 6);  // f16 KV: the retriever works
  // The bench's KL is `sustain eval kl`'s: the same pass on the same ids.
  r = run_cli("eval kl -m " + f16 +
              " --synthetic random --seed 7 -c 512 --buckets 256,512 "
              "-ctk q4_0 -ctv q4_0 -t 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json e = json::parse(r.out)["runs"][0]["buckets"][1];
  ASSERT_EQ(e["lo"], 256);
  EXPECT_DOUBLE_EQ(e["kl"]["mean"].get<double>(), kl_at(1, 1)["kl_mean"].get<double>());
  EXPECT_DOUBLE_EQ(e["same_top1"].get<double>(), kl_at(1, 1)["same_top1"].get<double>());
  // The tables.
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("KL mean (P99) @512"), std::string::npos) << md;
  EXPECT_NE(md.find("| = row 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("3/3 @128"), std::string::npos) << md;
  const std::string html = slurp(dir + "/report.html");
  EXPECT_NE(html.find("top-1 same @128"), std::string::npos);
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

// The ladder cells of an oracle:1 row whose first pass's path held: each
// with `decoded` tokens over its repetitions, every draft accepted, nearly
// every token out of a verify step (a lost path shows plain steps).
// Returns the drafts of all the cells.
int64_t oracle_path_kept(const json& cells, int64_t decoded) {
  int64_t drafted = 0;
  for (const auto& cell : cells) {
    const json& s = cell["spec"];
    if (!s.is_object()) {
      ADD_FAILURE() << cell.dump();
      continue;
    }
    EXPECT_GT(s["drafted"].get<int64_t>(), 0) << cell.dump();
    EXPECT_EQ(s["accepted"], s["drafted"]) << cell.dump();
    EXPECT_EQ(s["decoded_tokens"].get<int64_t>(), decoded) << cell.dump();
    EXPECT_GT(s["verify_token_share"].get<double>(), 0.85) << cell.dump();
    drafted += s["drafted"].get<int64_t>();
  }
  return drafted;
}

// An oracle row under --batch-invariant: the flag reaches every row's
// engine, and each context's cell counts its own speculation (the timed
// repetitions: every draft of oracle:1 accepted, nearly every token out of
// a verify step — a cell whose first pass was lost would show plain steps).
TEST(CliBench, OracleRowCountsSpeculationInEachContext) {
  const std::string dir = tmp_path("bench_cli_oracle");
  CliResult r;
  const json j = quick_bench(tiny_model(),
                             "--ctx 64,256 -n 16 -r 2 --batch-invariant "
                             "--ablate spec=oracle:1,draft=4,gate=off",
                             dir, &r);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(j["conditions"]["engine"]["batch_invariant"].get<bool>()) << j["conditions"].dump();
  const json& rows = j["ablation"]["rows"];
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) EXPECT_TRUE(row["engine"]["batch_invariant"].get<bool>());
  for (const auto& cell : rows[0]["ladder"]) EXPECT_TRUE(cell["spec"].is_null()) << cell.dump();
  ASSERT_EQ(rows[1]["ladder"].size(), 2u);
  const int64_t drafted = oracle_path_kept(rows[1]["ladder"], 2 * 15);
  // The row's totals also hold the fills (first passes: nothing to draft).
  EXPECT_EQ(rows[1]["spec"]["drafted"].get<int64_t>(), drafted);
  EXPECT_EQ(r.err.find("lost its first pass"), std::string::npos) << r.err;
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("accepted / tokens from verify steps: 64 100 %"), std::string::npos) << md;

  // --spec on the main ladder (the flags run and serve take): its cells
  // count the same way, and the Markdown ladder gains a speculation column.
  CliResult m;
  const json jm = quick_bench(tiny_model(),
                              "--ctx 64,256 -n 16 -r 2 --batch-invariant --spec oracle:1 "
                              "--spec-gate off --draft-max 4",
                              dir, &m);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(jm["conditions"]["engine"]["spec"]["types"], "oracle:1");
  ASSERT_EQ(jm["ladder"].size(), 2u);
  for (const auto& cell : jm["ladder"]) {
    const json& s = cell["spec"];
    ASSERT_TRUE(s.is_object()) << cell.dump();
    EXPECT_GT(s["drafted"].get<int64_t>(), 0) << cell.dump();
    EXPECT_EQ(s["accepted"], s["drafted"]) << cell.dump();
  }
  EXPECT_NE(slurp(dir + "/report.md").find("| speculation |"), std::string::npos);
  auto bad = run_cli("bench -m " + tiny_model() + " --ctx 64 --spec telepathy");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--spec"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("telepathy"), std::string::npos) << bad.err;
}

// --fill random: the ladder's prompts get random K/V instead of a prefill.
// Every cell says so and computed one prompt token, the prefill section
// takes no points from the ladder, a note says what the figures mean, and
// an oracle keeps its first pass's path over the fill (the same prompt gets
// the same values). A proposer with a KV of its own is refused, by name.
TEST(CliBench, RandomFillTimesDecodeAtDepthWithoutAPrefill) {
  const std::string dir = tmp_path("bench_cli_random_fill");
  CliResult r;
  const json j = quick_bench(tiny_model(),
                             "--ctx 64,1024 -n 16 -r 2 --batch-invariant --fill random "
                             "--ablate spec=oracle:1,draft=4,gate=off",
                             dir, &r);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(j["conditions"]["workload"]["ladder_fill"], "random");
  ASSERT_EQ(j["ladder"].size(), 2u);
  for (const auto& cell : j["ladder"]) {
    EXPECT_EQ(cell["prefill"]["fill"], "random") << cell.dump();
    EXPECT_EQ(cell["prefill"]["new_tokens"], 1) << cell.dump();
    EXPECT_GT(cell["decode"]["tok_s_p50"].get<double>(), 0.0) << cell.dump();
  }
  if (j["prefill"].contains("points"))
    for (const auto& q : j["prefill"]["points"]) EXPECT_NE(q["source"], "ladder") << q.dump();
  EXPECT_NE(j["notes"].dump().find("--fill random"), std::string::npos) << j["notes"].dump();
  const json& rows = j["ablation"]["rows"];
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& cell : rows[1]["ladder"])
    EXPECT_TRUE(cell["prefill_tok_s"].is_null()) << cell.dump();
  oracle_path_kept(rows[1]["ladder"], 2 * 15);
  const json jd = quick_bench(
      tiny_model(), "--ctx 64 -n 8 -r 1 --fill random --spec draft --draft-model " + tiny_model(),
      dir, &r);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("draft or mtp"), std::string::npos) << r.err;
}

// --verify-curve: every ladder depth gets each k's verify step timed (k = 0
// added), the ratios to k = 0, and the best k at each acceptance; the
// Markdown table and the two HTML charts show it. A hybrid model's state is
// rewound after each step (tiny-qwen35).
TEST(CliBench, VerifyCostCurveAtEveryDepth) {
  const std::string hybrid = tmp_path("bench_cli_tiny_qwen35.gguf");
  auto made = run_cli("synth --preset tiny-qwen35 --type Q8_0 -t 2 -o " + hybrid);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const std::string& model : {tiny_model(), hybrid}) {
    SCOPED_TRACE(model);
    const std::string dir = tmp_path("bench_cli_verify_curve");
    CliResult r;
    const json j = quick_bench(model, "--ctx 64,160 -n 4 -r 1 --verify-curve 1,4", dir, &r);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(bench::validate_report(j).is_ok());
    const json& v = j["verify_curve"];
    ASSERT_TRUE(v.is_object()) << j.dump();
    EXPECT_EQ(v["ks"], json::array({0, 1, 4}));
    ASSERT_EQ(v["points"].size(), 2u);
    EXPECT_EQ(v["points"][0]["depth"], 64);
    EXPECT_EQ(v["points"][1]["depth"], 160);
    for (const auto& p : v["points"]) {
      ASSERT_EQ(p["ms_p50"].size(), 3u);
      ASSERT_EQ(p["ms"].size(), 3u);
      for (const auto& reps : p["ms"]) EXPECT_EQ(reps.size(), 3u);  // 3 repetitions each
      for (const auto& ms : p["ms_p50"]) EXPECT_GT(ms.get<double>(), 0.0);
      EXPECT_DOUBLE_EQ(p["ratio"][0].get<double>(), 1.0);
      ASSERT_EQ(p["best"].size(), 5u);
      for (const auto& b : p["best"]) EXPECT_GT(b["speedup"].get<double>(), 0.0);
    }
    const std::string md = slurp(dir + "/report.md");
    EXPECT_NE(md.find("## Verify-cost curve"), std::string::npos);
    EXPECT_NE(md.find("| 160 |"), std::string::npos) << md;
    const std::string html = slurp(dir + "/report.html");
    EXPECT_NE(html.find("Verify step cost vs draft length"), std::string::npos);
    EXPECT_NE(html.find("Speedup implied"), std::string::npos);
  }
  // --verify-depths: the curve at depths of its own (no prefill: past the
  // ladder, from 0).
  const std::string dir = tmp_path("bench_cli_verify_depths");
  CliResult d;
  const json jd = quick_bench(tiny_model(),
                              "--ctx 64 -n 4 -r 1 --verify-curve 2 --verify-depths 0,1K", dir, &d);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  ASSERT_EQ(jd["verify_curve"]["points"].size(), 2u);
  EXPECT_EQ(jd["verify_curve"]["points"][0]["depth"], 0);
  EXPECT_EQ(jd["verify_curve"]["points"][1]["depth"], 1024);
  EXPECT_EQ(jd["verify_curve"]["ks"], json::array({0, 2}));
  // Bad lists are named before anything runs.
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"0,17", "'17' is not a draft length in 0..16"},
           {"4,2", "must ascend"},
           {"1,x", "'x'"},
           {"1 --verify-depths 128,64", "--verify-depths: the list must ascend"},
           {"1 --verify-depths 64,-1", "'-1' is not a non-negative count"}}) {
    auto bad = run_cli("bench -m " + tiny_model() + " --ctx 64 --verify-curve " + flag);
    EXPECT_NE(bad.exit_code, 0) << flag;
    EXPECT_NE(bad.err.find(want), std::string::npos) << bad.err;
  }
  auto alone = run_cli("bench -m " + tiny_model() + " --ctx 64 --verify-depths 64");
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("--verify-depths: give the draft lengths"), std::string::npos)
      << alone.err;
}

// --ablate sampling=serial: the row's engine samples a step's streams one
// after another, the report says so, and the concurrency levels run on
// every row (the switch only shows with several streams).
TEST(CliBench, AblationSerialSampling) {
  const std::string dir = tmp_path("bench_cli_sampling");
  std::filesystem::remove_all(dir);
  auto r = run_cli("bench -m " + tiny_model() +
                   " --ctx 64 -n 8 -r 2 -t 2 --temp 0.8 --top-k 0 --concurrency 1,4 "
                   "--conc-prompt 32 --bw-mib 64 --bw-reps 1 --quality off "
                   "--ablate sampling=serial -o " +
                   dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(slurp(dir + "/report.json"));
  const json& rows = j["ablation"]["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["engine"]["pool_sampling"], true);
  EXPECT_EQ(rows[1]["engine"]["pool_sampling"], false);
  for (const auto& row : rows) {
    ASSERT_EQ(row["concurrency"].size(), 2u) << row.dump();
    EXPECT_GT(row["concurrency"][1]["aggregate_tok_s"].get<double>(), 0);
  }
  EXPECT_TRUE(rows[1]["concurrency"][1]["delta_pct"].is_number());
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("Ablation: concurrency levels"), std::string::npos) << md;
  EXPECT_EQ(md.find("mask P50"), std::string::npos) << "no grammar row, no mask columns";
}

// --ablate-bracket: each row is row 0's engine with its one switch (not
// on top of the rows above), row 0's engine runs again after every row,
// and each switch row's cells carry their speed over the mean of the
// row-0 runs on either side.
TEST(CliBench, AblationBracketedByTheBaseline) {
  const std::string dir = tmp_path("bench_cli_bracket");
  CliResult r;
  const json j = quick_bench(
      tiny_model(), "--ctx 64,128 -n 4 -r 2 --ablate kv=q8_0 --ablate layout=rows --ablate-bracket",
      dir, &r);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Status st = bench::validate_report(j);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(j["ablation"]["bracket"], true);
  const json& rows = j["ablation"]["rows"];
  ASSERT_EQ(rows.size(), 5u);
  const std::vector<std::string> names = {"baseline", "kv=q8_0", "baseline (again)", "layout=rows",
                                          "baseline (again)"};
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["name"], names[i]) << i;
  for (size_t i : {size_t(2), size_t(4)}) {
    EXPECT_EQ(rows[i]["switch"], "-");
    EXPECT_EQ(rows[i]["kv"], rows[0]["kv"]) << i;
  }
  EXPECT_EQ(rows[1]["kv"]["k_type"], "Q8_0");
  // Not on top of kv=q8_0: the baseline's F16 in the rows layout.
  EXPECT_EQ(rows[3]["kv"]["k_type"], "F16");
  EXPECT_EQ(rows[3]["kv"]["kv_layout"], "rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i]["ladder"].size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      const json& c = rows[i]["ladder"][k];
      if (i % 2 == 0) {
        EXPECT_TRUE(c["vs_bracket"].is_null()) << i;
        continue;
      }
      const double mean = 0.5 * (rows[i - 1]["ladder"][k]["tok_s_p50"].get<double>() +
                                 rows[i + 1]["ladder"][k]["tok_s_p50"].get<double>());
      ASSERT_TRUE(c["vs_bracket"].is_number()) << i;
      EXPECT_NEAR(c["vs_bracket"].get<double>(), c["tok_s_p50"].get<double>() / mean, 1e-9);
    }
  }
  EXPECT_NE(j["ablation"]["method"].get<std::string>().find("bracketed"), std::string::npos);
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("baseline (again)"), std::string::npos) << md;
  EXPECT_NE(md.find(" [×"), std::string::npos) << md;
  // With quality: measured for row 0 and each switch, not for row 0's repeats.
  const json q = quick_bench(tiny_model(),
                             "--ctx 64 -n 4 -r 1 --ablate kv=q4_0 --ablate-bracket "
                             "--quality-ctx 128 --quality-budget 0",
                             tmp_path("bench_cli_bracket_quality"), &r, true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json& qrows = q["ablation"]["rows"];
  ASSERT_EQ(qrows.size(), 3u);
  EXPECT_TRUE(qrows[0]["quality"].contains("kl")) << qrows[0]["quality"].dump();
  EXPECT_TRUE(qrows[1]["quality"].contains("kl")) << qrows[1]["quality"].dump();
  EXPECT_NE(qrows[2]["quality"].value("skipped", "").find("--ablate-bracket"), std::string::npos)
      << qrows[2]["quality"].dump();
  // Nothing to bracket: a clear error.
  auto none = run_cli("bench -m " + tiny_model() + " --ctx 64 --ablate-bracket");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--ablate-bracket"), std::string::npos) << none.err;
}

// --ablate grammar=: every generated token of the row constrained (a JSON
// schema that cannot end within the tokens asked for), the mask time per
// token reported, and the concurrency levels run on every row.
TEST(CliBench, AblationGrammarMaskTimes) {
  const std::string dir = tmp_path("bench_cli_grammar");
  std::filesystem::remove_all(dir);
  const std::string schema = tmp_path("bench_cli_schema.json");
  std::ofstream(schema) << R"({"type": "object", "properties": {"items": {"type": "array",
      "minItems": 50, "items": {"type": "object", "properties": {"n": {"type": "integer"},
      "ok": {"type": "boolean"}}, "required": ["n", "ok"], "additionalProperties": false}}},
      "required": ["items"], "additionalProperties": false})";
  auto r = run_cli("bench -m " + tiny_model() +
                   " --ctx 64 -n 8 -r 2 -t 2 --concurrency 1,2 --conc-prompt 32 --bw-mib 64 "
                   "--bw-reps 1 --quality off --ablate grammar=json --ablate grammar=" +
                   schema + " -o " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(slurp(dir + "/report.json"));
  const json& rows = j["ablation"]["rows"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0]["grammar"].is_null());
  for (const auto& row : rows) {
    ASSERT_EQ(row["concurrency"].size(), 2u) << row.dump();
    EXPECT_GT(row["concurrency"][1]["aggregate_tok_s"].get<double>(), 0);
  }
  EXPECT_TRUE(rows[2]["concurrency"][0]["delta_pct"].is_number());
  for (size_t i = 1; i < 3; ++i) {
    const json& lad = rows[i]["grammar"]["ladder"];
    ASSERT_TRUE(lad.is_object()) << rows[i].dump();
    EXPECT_GT(lad["masks"].get<int64_t>(), 0);
    EXPECT_LE(lad["masks"].get<int64_t>(), lad["tokens"].get<int64_t>());
    EXPECT_LE(lad["mask_us_p50"].get<double>(), lad["mask_us_p99"].get<double>());
    EXPECT_GT(rows[i]["grammar"]["concurrency"]["masks"].get<int64_t>(), 0);
  }
  // The schema's array cannot close within 8 tokens: every token was masked.
  const json& lad = rows[2]["grammar"]["ladder"];
  EXPECT_EQ(lad["masks"], lad["tokens"]) << lad.dump();
  const std::string md = slurp(dir + "/report.md");
  EXPECT_NE(md.find("Ablation: constrained decoding"), std::string::npos);
  // Bad grammars are named: a missing file before anything runs, a schema
  // keyword that is not supported when the row compiles it.
  auto missing = run_cli("bench -m " + tiny_model() + " --ctx 64 --ablate grammar=" +
                         tmp_path("no_such_schema.json") + " -o " + tmp_path("bench_bad"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no_such_schema.json' is not a file"), std::string::npos)
      << missing.err;
  const std::string bad = tmp_path("bench_cli_bad_schema.json");
  std::ofstream(bad) << R"({"type": "integer", "multipleOf": 3})";
  auto unsupported = run_cli("bench -m " + tiny_model() +
                             " --ctx 64 -n 4 -r 1 --no-concurrency --bw-mib 64 --bw-reps 1 "
                             "--quality off --ablate grammar=" +
                             bad + " -o " + tmp_path("bench_bad"));
  EXPECT_NE(unsupported.exit_code, 0);
  EXPECT_NE(unsupported.err.find("multipleOf"), std::string::npos) << unsupported.err;
}

// --temp: the ladders' requests sample with the sampler's default chain,
// or with the one --top-k / --top-p / --min-p name (here an OpenAI client's:
// no top-k, top-p alone, which the shortcuts from raw logits serve), and the
// report says so; every rung and level still generates -n tokens
// (ignore_eos).
TEST(CliBench, TemperatureSamplesAndIsInTheConditions) {
  struct Case {
    std::string flags;
    int top_k;
    float top_p, min_p;
  };
  for (const Case& c : {Case{"--temp 0.8", 40, 0.95f, 0.05f},
                        Case{"--temp 0.8 --top-k 0 --top-p 0.9 --min-p 0", 0, 0.9f, 0.0f}}) {
    const std::string dir = tmp_path("bench_cli_temp");
    std::filesystem::remove_all(dir);
    auto r = run_cli("bench -m " + tiny_model() + " --ctx 64 -n 4 -r 1 -t 2 " + c.flags +
                     " --concurrency 2 --conc-prompt 16 --conc-requests 1 --poisson-requests 1 "
                     "--rate 100 --bw-mib 64 --bw-reps 1 --quality off -o " +
                     dir);
    ASSERT_EQ(r.exit_code, 0) << c.flags << ": " << r.err;
    const json j = json::parse(slurp(dir + "/report.json"));
    const json& s = j["conditions"]["sampler"];
    EXPECT_FLOAT_EQ(s["temperature"].get<float>(), 0.8f);
    EXPECT_EQ(s["top_k"], c.top_k);
    EXPECT_FLOAT_EQ(s["top_p"].get<float>(), c.top_p);
    EXPECT_FLOAT_EQ(s["min_p"].get<float>(), c.min_p);
    EXPECT_EQ(j["ladder"][0]["decode"]["visible_tokens_per_rep"], json({4}));
    for (const auto& lv : j["concurrency"]["levels"]) EXPECT_EQ(lv["failed"], 0) << lv.dump();
    EXPECT_NE(slurp(dir + "/report.md").find(c.flags), std::string::npos) << c.flags;
    EXPECT_TRUE(s["top_logprobs"].is_null());
  }
}

// --logprobs N: the requests ask for logprobs, greedy or sampled, every
// level still completes, and the conditions say how many alternatives.
TEST(CliBench, LogprobsAreInTheConditions) {
  for (const std::string flags : {"--logprobs 5", "--temp 0.8 --top-k 0 --logprobs 0"}) {
    const std::string dir = tmp_path("bench_cli_logprobs");
    std::filesystem::remove_all(dir);
    auto r = run_cli("bench -m " + tiny_model() + " --ctx 64 -n 4 -r 1 -t 2 " + flags +
                     " --concurrency 2 --conc-prompt 16 --conc-requests 1 --poisson-requests 1 "
                     "--rate 100 --bw-mib 64 --bw-reps 1 --quality off -o " +
                     dir);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    const json j = json::parse(slurp(dir + "/report.json"));
    EXPECT_EQ(j["conditions"]["sampler"]["top_logprobs"], flags == "--logprobs 5" ? 5 : 0);
    for (const auto& lv : j["concurrency"]["levels"]) EXPECT_EQ(lv["failed"], 0) << lv.dump();
  }
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
      {"-m " + tiny_model() + " --ctx 64 --ablate layout=diagonal", "layout must be tiled or rows"},
      {"-m " + tiny_model() + " --ctx 64 --ablate repack=yes", "repack must be on or off"},
      {"-m " + tiny_model() + " --ctx 64 --ablate sampling=parallel", "sampling must be pool"},
      {"-m " + tiny_model() + " --ctx 64 --logprobs 21", "--logprobs"},
      {"-m " + tiny_model() + " --ctx 64 --ablate spec=mtp,mtp_depth=17", "mtp_depth=17"},
      {"-m " + tiny_model() + " --ctx 64 --kv-layout diagonal", "--kv-layout"},
      {"-m " + tiny_model() + " --ctx 64 -n 1", "-n 1"},
      {"-m " + tiny_model() + " --ctx 64 --temp -0.5", "--temp"},
      {"-m " + tiny_model() + " --ctx 64 --temp 2.5", "--temp"},
      {"-m " + tiny_model() + " --ctx 64 --top-k 0", "needs --temp above 0"},
      {"-m " + tiny_model() + " --ctx 64 --temp 0.8 --top-p 0", "top_p must be in (0, 1]"},
      {"-m " + tiny_model() + " --ctx 64 --temp 0.8 --min-p 1.5", "--min-p"},
      {"-m " + tmp_path("no_such_model.gguf") + " --ctx 64", "no_such_model.gguf"},
      {"--preset no-such --ctx 64", "no-such"},
      {"--url https://example.com", "https"},
      {"--url http://127.0.0.1:1 -n 4", "127.0.0.1:1"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-ctx 512,abc", "--quality-ctx"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-ctx 32", "below the smallest"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-ctx 8192,12288", "overlaps"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-ctx 0", "--quality-ctx"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality maybe", "--quality"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-needle cut9", "cut9"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-budget -1", "--quality-budget"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-text " +
           tmp_path("no_such_text.txt"),
       "no_such_text.txt"},
      {"-m " + tiny_model() + " --ctx 64 --ablate kv=q8_0 --quality-ctx 4096 --quality-text " +
           short_text(),
       "needs 4096"},
      {"-m " + tiny_model() + " --ctx 64 --image x.png", "--image needs --mmproj"},
      {"-m " + tiny_model() + " --ctx 64 --mmproj m.gguf", "give the images to measure"},
      {"-m " + tiny_model() + " --ctx 64 --mmproj m.gguf --image " + tmp_path("no_such.png"),
       "no_such.png: cannot open"},
      {"--url http://127.0.0.1:1 --mmproj m.gguf --image x.png", "not with --url"},
      {"-m " + tiny_model() + " --ctx 64 --json-schema s.json", "--ablate grammar=FILE"},
      {"--url http://127.0.0.1:1 --json-schema " + tmp_path("no_such_schema.json"),
       "no_such_schema.json: cannot open"},
      {"--url http://127.0.0.1:1 --json-schema " + short_text(), "not a JSON object"},
      {"-m " + tiny_model() + " --ctx 64 --fill sideways", "--fill"},
      {"--url http://127.0.0.1:1 --fill random", "--url runs no ladder"},
  };
  for (const auto& c : cases) {
    auto r = run_cli("bench " + c.args + " --bw-mib 64 --bw-reps 1 -o " + tmp_path("bench_bad"));
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
  }
}

// The image-cost section on the reference's tiny Gemma 3 pair: encode
// time and the prefill with the image beside a text prompt of as many
// positions, in the JSON and the Markdown; a projector of another width is
// refused before the ladder.
TEST(CliBench, ImageCost) {
  SUSTAIN_REQUIRE_REF();
  const std::string dir = tmp_path("bench_vision");
  std::filesystem::remove_all(dir);
  const std::string mm = ref_path("vision/models/mmproj-tinygemma3-pool4.gguf");
  auto r = run_cli("bench -m " + ref_path("vision/models/tiny-gemma3-vlm-f32.gguf") +
                   " --ctx 64 -n 4 -r 2 -t 2 --no-concurrency --bw-mib 64 --bw-reps 1 --mmproj " +
                   mm + " --image " + ref_path("vision/images/solid32.png") + " -o " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(slurp(dir + "/report.json"));
  ASSERT_TRUE(j.contains("vision")) << j.dump();
  const json& v = j["vision"];
  EXPECT_EQ(v["tokens_per_image"], 16);
  EXPECT_EQ(v["positions"],
            9 + 18);  // BOS + 8 random tokens, then <start_of_image> 16 <end_of_image>
  ASSERT_EQ(v["images"].size(), 1u);
  const json& i = v["images"][0];
  EXPECT_EQ(i["encode_ms"].size(), 2u);
  EXPECT_GT(i["encode_ms_p50"].get<double>(), 0.0);
  EXPECT_GT(i["prefill_image_ms_p50"].get<double>(), 0.0);
  EXPECT_GT(i["prefill_text_ms_p50"].get<double>(), 0.0);
  EXPECT_NE(slurp(dir + "/report.md").find("## Image cost"), std::string::npos);
  auto bad = run_cli("bench -m " + tiny_model() + " --ctx 64 -n 4 -r 1 --no-concurrency " +
                     "--bw-mib 64 --bw-reps 1 --mmproj " + mm + " --image " +
                     ref_path("vision/images/solid32.png") + " -o " + tmp_path("bench_bad_vis"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("embeddings of width 128, but the model's width is"), std::string::npos)
      << bad.err;
}

// bench_depth on a sliding-window model (tiny-gemma3: a 16-token window on 6
// of 7 blocks), at a depth far past the window, with both fills, a prefill,
// decode and a verify curve: each timed run is rewound to the depth, which
// the window pool alone cannot do (it crashed on can_truncate before).
TEST(BenchDepth, SlidingWindowModelRunsAtDepthsPastTheWindow) {
  SUSTAIN_REQUIRE_REF();
  for (const char* fill : {"random", "real"}) {
    SCOPED_TRACE(fill);
    const std::string cmd =
        std::string(SUSTAIN_BENCH_DEPTH) + " -m " + ref_path("models/tiny-gemma3-f32.gguf") +
        " -d 0,300 -ctk f16 -n 4 -r 1 -p 8 -t 2 --verify 0,2 --fill " + fill + " </dev/null 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    EXPECT_NE(out.find("| F16 | F16 | rows | 300 |"), std::string::npos) << out;
    EXPECT_NE(out.find("| verify | F16 | F16 | 300 | k=2 |"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace sustain::test

// The report: the JSON schema check (every promised field and condition),
// the Markdown tables and the self-contained HTML, from known results.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/report.h"
#include "bench/results.h"
#include "test_util.h"

namespace sustain::bench {
namespace {

using nlohmann::json;

LadderRung rung(int64_t ctx, double gap_s) {
  LadderRung r;
  r.ctx = ctx;
  r.n_tokens = 4;
  r.fill_from = ctx / 4;
  r.fill_new_tokens = ctx - ctx / 4;
  r.fill_ttft_s = 0.001 * ctx;
  r.rep_gaps_s = {{gap_s, gap_s * 1.1, gap_s}, {gap_s, gap_s, gap_s * 1.2}};
  r.rep_tok_s = {3 / (gap_s * 3.1), 3 / (gap_s * 3.2)};
  r.rep_visible_tokens = {4, 4};
  r.kv_bytes = ctx * 100;
  r.peak_rss_bytes = 1 << 28;
  return r;
}

LoadLevel level(int n) {
  LoadLevel lv;
  lv.mode = "fixed";
  lv.concurrency = n;
  for (int i = 0; i < n; ++i) {
    RequestTiming t;
    t.t_submit = 0.1 * i;
    t.token_times = {t.t_submit + 0.2, t.t_submit + 0.3, t.t_submit + 0.4};
    t.t_end = t.t_submit + 0.45;
    t.output_tokens = 3;
    t.prompt_tokens = 16;
    lv.requests.push_back(t);
  }
  lv.metrics = *load_metrics(lv.requests);
  return lv;
}

json sample_report() {
  ModelCost cost;
  cost.weight_bytes_per_step = 100'000'000;
  cost.matmul_params = 130'000'000;
  cost.n_layer = 30;
  cost.n_head = 9;
  cost.head_dim = 64;
  cost.kv_bytes_per_token = 23040;
  BandwidthResult bw;
  bw.threads = 2;
  bw.buffer_bytes = 1 << 30;
  bw.read_gbps = {20, 21};
  bw.read_gbps_best = 21;
  bw.read_gbps_median = 20.5;
  bw.fma_gflops = {100, 110};
  bw.fma_gflops_best = 110;
  bw.fma_gflops_median = 105;
  const std::vector<LadderRung> rungs = {rung(512, 0.006), rung(2048, 0.007), rung(8192, 0.012)};
  std::vector<PrefillPoint> pts;
  for (const auto& r : rungs)
    pts.push_back({"ladder", r.fill_from, r.ctx, r.fill_new_tokens, {r.fill_ttft_s}});
  json r = {{"schema", kReportSchema},
            {"schema_version", kReportSchemaVersion},
            {"created_utc", "2026-01-01T00:00:00Z"},
            {"command_line", "sustain bench --ctx 512,2K,8K"},
            {"metrics", metric_definitions()},
            {"notes", {"a note"}},
            {"ladder", ladder_json(rungs, cost, &bw)},
            {"prefill", prefill_json(pts, {8192, 131072})},
            {"machine", bandwidth_json(bw)},
            {"concurrency",
             {{"target", "in-process engine"},
              {"prompt_length", 16},
              {"prompt_unit", "tokens"},
              {"max_tokens", 3},
              {"levels", {load_level_json(level(1)), load_level_json(level(2))}}}},
            {"ablation",
             {{"rows",
               {{{"name", "baseline"},
                 {"switch", "-"},
                 {"ladder", {{{"ctx", 512}, {"tok_s_p50", 100.0}, {"delta_pct", nullptr}}}},
                 {"quality", nullptr}},
                {{"name", "kv=q8_0"},
                 {"switch", "kv=q8_0"},
                 {"ladder", {{{"ctx", 512}, {"tok_s_p50", 120.0}, {"delta_pct", 20.0}}}},
                 {"quality", nullptr}}}}}}};
  r["conditions"] = {
      {"target", {{"kind", "in-process"}}},
      {"model",
       {{"path", "m.gguf"},
        {"name", "x"},
        {"arch", "llama"},
        {"parameters", 134515008},
        {"tensor_formats", {{"attn_q", "Q4_K×30"}}}}},
      {"kv", {{"k_type", "F16"}, {"v_type", "F16"}}},
      {"engine", {{"threads", 2}, {"batch_tokens", 512}}},
      {"machine", {{"cpu_model", "Test"}, {"features", {"avx2"}}}},
      {"build", {{"git_commit", "abc"}, {"build_type", "release"}, {"version", "0.1.0"}}},
      {"workload", {{"ctx_requested", {512, 2048, 8192}}}},
      {"sampler", {{"temperature", 0.0}}}};
  return r;
}

TEST(Report, ValidSampleAndLadderFigures) {
  const json r = sample_report();
  const Status st = validate_report(r);
  ASSERT_TRUE(st) << st.message();
  const json& g = r["ladder"][1];
  EXPECT_EQ(g["ctx"], 2048);
  // Pooled gaps of the rung: 0.007 ×4, 0.0077, 0.0084 → P50 = 0.007 s.
  EXPECT_NEAR(g["decode"]["tpot_ms_p50"].get<double>(), 7.0, 1e-9);
  EXPECT_NEAR(g["decode"]["tok_s_p50"].get<double>(), 1000.0 / 7.0, 1e-6);
  EXPECT_EQ(g["decode"]["samples_ms"].size(), 2u);
  EXPECT_NEAR(g["prefill"]["tok_s"].get<double>(), 1536 / 2.048, 1e-6);
  // The peak is the 512 rung (the fastest ≤ 2048): gaps of 6 ms vs 7 ms.
  EXPECT_NEAR(r["ladder"][0]["relative_to_peak"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(g["relative_to_peak"].get<double>(), 6.0 / 7.0, 1e-12);
  // Bandwidth bound at the mean decode context 2048 + 2.
  const double bytes = 100'000'000 + 23040.0 * 2050;
  EXPECT_NEAR(g["bound"]["bandwidth_tok_s"].get<double>(), 21e9 / bytes, 1e-6);
  EXPECT_NEAR(g["bound"]["measured_over_bandwidth"].get<double>(),
              g["decode"]["tok_s_p50"].get<double>() / (21e9 / bytes), 1e-9);
  // Seed model anchored at the peak (512 + 2): bytes ratio times its speed.
  const double peak_bytes = 100'000'000 + 23040.0 * 514;
  EXPECT_NEAR(g["seed_model_tok_s"].get<double>(), 1000.0 / 6.0 * peak_bytes / bytes, 1e-6);
  const json& far = r["ladder"][2];
  EXPECT_LT(far["seed_model_tok_s"].get<double>(), g["seed_model_tok_s"].get<double>());
  ASSERT_EQ(r["prefill"]["projected"].size(), 2u);
  EXPECT_GT(r["prefill"]["projected"][1]["seconds"].get<double>(),
            r["prefill"]["projected"][0]["seconds"].get<double>());
}

TEST(Report, EveryMissingConditionIsNamed) {
  const std::vector<std::vector<std::string>> paths = {{"conditions", "model", "tensor_formats"},
                                                       {"conditions", "model", "parameters"},
                                                       {"conditions", "kv", "v_type"},
                                                       {"conditions", "engine", "threads"},
                                                       {"conditions", "engine", "batch_tokens"},
                                                       {"conditions", "machine", "cpu_model"},
                                                       {"conditions", "machine", "features"},
                                                       {"conditions", "build", "git_commit"},
                                                       {"conditions", "build", "build_type"},
                                                       {"conditions", "sampler"},
                                                       {"conditions", "workload"},
                                                       {"metrics"}};
  for (const auto& p : paths) {
    json r = sample_report();
    json* node = &r;
    for (size_t i = 0; i + 1 < p.size(); ++i) node = &(*node)[p[i]];
    node->erase(p.back());
    const Status st = validate_report(r);
    ASSERT_FALSE(st) << p.back();
    EXPECT_NE(st.message().find(p.back()), std::string::npos) << st.message();
  }
  json r = sample_report();
  r["ladder"][1]["decode"].erase("tpot_ms_p99");
  Status st = validate_report(r);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("ladder[1].decode.tpot_ms_p99"), std::string::npos) << st.message();
  r = sample_report();
  r["ladder"][0]["bound"]["bandwidth_tok_s"] = "fast";
  st = validate_report(r);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("bandwidth_tok_s"), std::string::npos) << st.message();
  r = sample_report();
  r["concurrency"]["levels"][0].erase("itl_ms");
  EXPECT_FALSE(validate_report(r));
  r = sample_report();
  r["schema"] = "other";
  EXPECT_FALSE(validate_report(r));
}

TEST(Report, MarkdownHasEveryTable) {
  const std::string md = render_markdown(sample_report());
  for (const char* s : {"## Context ladder", "## Prefill gradient", "## Projected full re-prefill",
                        "## Concurrency ladder", "## Ablation", "## Machine roofline",
                        "## Conditions", "## Metric definitions", "| 2K |", "| 8K |", "±",
                        "+20.0 %", "model.tensor_formats", "TPOT", "a note"})
    EXPECT_NE(md.find(s), std::string::npos) << s;
}

TEST(Report, HtmlIsSelfContainedWithCharts) {
  const std::string html = render_html(sample_report());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  // Speed vs context, TPOT vs context, prefill, throughput and latency vs N, ablation bars.
  EXPECT_EQ(svgs, 6u);
  EXPECT_NE(html.find("bandwidth bound"), std::string::npos);
  EXPECT_NE(html.find("seed model"), std::string::npos);
  EXPECT_NE(html.find("<polyline"), std::string::npos);
  EXPECT_NE(html.find("<rect"), std::string::npos);
  // Nothing is fetched: no script, no external reference.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  std::string rest = html;
  for (size_t p; (p = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;)
    rest.erase(p, 26);
  EXPECT_EQ(rest.find("http://"), std::string::npos);
  // Text from the report is escaped.
  json r = sample_report();
  r["notes"] = {"<b>&"};
  EXPECT_NE(render_html(r).find("&lt;b&gt;&amp;"), std::string::npos);
}

TEST(Report, WritesThreeFiles) {
  const std::string dir = test::tmp_path("report_out/nested");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(write_reports(sample_report(), dir));
  for (const char* f : {"report.json", "report.md", "report.html"})
    EXPECT_GT(std::filesystem::file_size(dir + "/" + f), 100u) << f;
  std::ifstream in(dir + "/report.json");
  const json back = json::parse(in);
  EXPECT_TRUE(validate_report(back));
  EXPECT_EQ(back, sample_report());
  // A path that cannot be a directory is an error naming it.
  const std::string file = test::tmp_path("report_out_file");
  std::ofstream(file) << "x";
  const Status st = write_reports(sample_report(), file + "/sub");
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("report_out_file"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sustain::bench

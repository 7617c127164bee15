// The soak's verdict on synthetic runs: a clean hour passes, and each thing
// the soak watches for (RSS growth, a 5xx, a leaked page, a server that never
// goes idle, a falling throughput, a probe whose text changed) fails it;
// runs too short to judge a drift report it without failing. Also the
// report's `soak` section, its tables and charts, and the flag parsers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/conditions.h"
#include "bench/report.h"
#include "bench/soak.h"
#include "bench/soak_verdict.h"

namespace sustain::bench {
namespace {

using nlohmann::json;

// An hour sampled every 10 s: flat RSS (400 MiB), flat 100 tok/s, a burst
// every 5 minutes, idle at the end with no page in use, identical probes.
SoakResult clean_hour() {
  SoakResult r;
  r.duration_s = 3600;
  r.requests = 5000;
  r.outcomes = {{"ok", 4700}, {"malformed_4xx", 250}, {"disconnected", 50}};
  for (int i = 1; i <= 360; ++i) {
    SoakSample s;
    s.t_s = 10.0 * i;
    s.rss_bytes = 400.0 * 1048576 + (i % 3) * 4096;  // page-sized jitter
    s.kv_pages_used = 10;
    s.kv_pages_cached = 20;
    s.queue = 0;
    s.running = 4;
    s.tok_s = 100 + (i % 5);
    s.tokens = s.tok_s * 10;
    s.burst = i % 30 == 0;
    r.samples.push_back(s);
  }
  for (int k = 0; k < 10; ++k) r.probes.push_back({360.0 * k, true, "the same text"});
  r.server_metrics = true;
  r.idle = true;
  r.idle_kv_pages_used = 0;
  r.idle_kv_pages_cached = 25;
  return r;
}

const SoakCheck* check(const SoakVerdict& v, const std::string& name) {
  for (const auto& c : v.checks)
    if (c.name == name) return &c;
  return nullptr;
}

std::string status(const SoakVerdict& v, const std::string& name) {
  const SoakCheck* c = check(v, name);
  return c == nullptr ? "missing" : c->status;
}

TEST(SoakVerdict, CleanHourPasses) {
  const SoakVerdict v = judge_soak(clean_hour(), SoakThresholds{});
  EXPECT_TRUE(v.pass);
  for (const char* n :
       {"errors", "errors_5xx", "pages_leaked", "rss_drift", "throughput_drift", "determinism"})
    EXPECT_EQ(status(v, n), "pass") << n << ": " << (check(v, n) ? check(v, n)->detail : "");
  EXPECT_EQ(v.pages_leaked, 0);
  EXPECT_NEAR(v.rss_drift_pct_per_h, 0, 0.01);
  EXPECT_NEAR(v.throughput_drift_pct, 0, 5);
  EXPECT_TRUE(v.deterministic_ok);
  EXPECT_EQ(v.probes_compared, 9);
  EXPECT_DOUBLE_EQ(v.warmup_s, 600);        // a quarter of the hour, capped at 10 minutes
  EXPECT_DOUBLE_EQ(v.drift_window_s, 360);  // a tenth of the run
}

TEST(SoakVerdict, GrowingRssFails) {
  SoakResult r = clean_hour();
  // 2 % an hour: 8 MiB over the hour on 400 MiB.
  for (auto& s : r.samples) s.rss_bytes = 400.0 * 1048576 * (1 + 0.02 * s.t_s / 3600);
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(status(v, "rss_drift"), "fail");
  EXPECT_NEAR(v.rss_drift_pct_per_h, 2.0, 0.1);
  // Growth during the warm-up alone is not drift.
  for (auto& s : r.samples) s.rss_bytes = 400.0 * 1048576 * (s.t_s < 600 ? s.t_s / 600 : 1.0);
  EXPECT_EQ(status(judge_soak(r, SoakThresholds{}), "rss_drift"), "pass");
}

TEST(SoakVerdict, A5xxFails) {
  SoakResult r = clean_hour();
  r.errors["http_5xx"] = 1;
  r.errors_5xx = 1;
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(status(v, "errors"), "fail");
  EXPECT_EQ(status(v, "errors_5xx"), "fail");
  EXPECT_NE(check(v, "errors")->detail.find("1 http_5xx"), std::string::npos);
}

TEST(SoakVerdict, MalformedRequestAcceptedFails) {
  SoakResult r = clean_hour();
  r.errors["malformed_not_4xx"] = 2;
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(status(v, "errors"), "fail");
  EXPECT_EQ(status(v, "errors_5xx"), "pass");
}

TEST(SoakVerdict, LeakedPageFails) {
  SoakResult r = clean_hour();
  r.idle_kv_pages_used = 1;
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.pages_leaked, 1);
  EXPECT_EQ(status(v, "pages_leaked"), "fail");
  // Pages the prefix cache holds are not leaked.
  r.idle_kv_pages_used = 0;
  r.idle_kv_pages_cached = 500;
  EXPECT_TRUE(judge_soak(r, SoakThresholds{}).pass);
}

TEST(SoakVerdict, ServerThatNeverGoesIdleFails) {
  SoakResult r = clean_hour();
  r.idle = false;
  r.idle_kv_pages_used = 12;
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(status(v, "pages_leaked"), "fail");
  EXPECT_NE(check(v, "pages_leaked")->detail.find("never went idle"), std::string::npos);
}

TEST(SoakVerdict, NonDeterministicRepeatFails) {
  SoakResult r = clean_hour();
  r.probes[7].text = "another text";
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_FALSE(v.deterministic_ok);
  EXPECT_EQ(status(v, "determinism"), "fail");
  // A probe that failed is no proof of determinism either.
  r = clean_hour();
  r.probes[3].ok = false;
  EXPECT_FALSE(judge_soak(r, SoakThresholds{}).deterministic_ok);
}

TEST(SoakVerdict, FallingThroughputFails) {
  SoakResult r = clean_hour();
  for (auto& s : r.samples)
    if (s.t_s > 3000) s.tok_s = 60;
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(status(v, "throughput_drift"), "fail");
  EXPECT_NEAR(v.throughput_drift_pct, -41, 2);
  // Bursts are left out of both windows: a burst at the end is no drop.
  r = clean_hour();
  r.samples.back().tok_s = 10;
  r.samples.back().burst = true;
  EXPECT_EQ(status(judge_soak(r, SoakThresholds{}), "throughput_drift"), "pass");
}

TEST(SoakVerdict, ServerThatDiedFails) {
  SoakResult r = clean_hour();
  r.server_problem = "the server killed by signal 11 before the soak stopped it";
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(status(v, "server"), "fail");
}

TEST(SoakVerdict, ShortRunReportsDriftsWithoutJudging) {
  SoakResult r;
  r.duration_s = 20;
  r.requests = 100;
  for (int i = 1; i <= 10; ++i) {
    SoakSample s;
    s.t_s = 2.0 * i;
    s.rss_bytes = 30e6 + 1e5 * i;  // fast growth, as any process has in its first seconds
    s.tok_s = 100;
    r.samples.push_back(s);
  }
  r.probes = {{0, true, "x"}, {5, true, "x"}};
  r.server_metrics = true;
  r.idle = true;
  r.idle_kv_pages_used = 0;
  const SoakVerdict v = judge_soak(r, SoakThresholds{});
  EXPECT_TRUE(v.pass);
  EXPECT_EQ(status(v, "rss_drift"), "not judged");
  EXPECT_EQ(status(v, "throughput_drift"), "not judged");
  EXPECT_GT(v.rss_drift_pct_per_h, 100);  // reported all the same
  EXPECT_EQ(status(v, "determinism"), "pass");
  // Without /metrics the pages cannot be judged, and a lone probe proves nothing.
  r.server_metrics = false;
  r.probes.resize(1);
  const SoakVerdict w = judge_soak(r, SoakThresholds{});
  EXPECT_EQ(status(w, "pages_leaked"), "not judged");
  EXPECT_EQ(status(w, "determinism"), "not judged");
  EXPECT_EQ(w.pages_leaked, -1);
}

TEST(SoakVerdict, Slope) {
  EXPECT_DOUBLE_EQ(slope({0, 1, 2, 3}, {1, 3, 5, 7}), 2);
  EXPECT_TRUE(std::isnan(slope({1}, {1})));
  EXPECT_TRUE(std::isnan(slope({2, 2}, {1, 5})));
}

TEST(SoakReport, SectionTablesAndCharts) {
  SoakConfig c;
  SoakResult r = clean_hour();
  r.errors["http_5xx"] = 1;
  r.errors_5xx = 1;
  const SoakThresholds th;
  const SoakVerdict v = judge_soak(r, th);
  json report = new_report("sustain bench soak --duration 1h");
  report["soak"] = soak_json(c, r, th, v);
  report["conditions"] = {{"target", {{"kind", "http"}}},
                          {"machine", machine_conditions()},
                          {"build", build_conditions()},
                          {"sampler", json::object()},
                          {"workload", json::object()}};
  const Status st = validate_report(report);
  ASSERT_TRUE(st) << st.message();
  const json& k = report["soak"];
  EXPECT_EQ(k["duration_s"], 3600.0);
  EXPECT_EQ(k["requests"], 5000);
  EXPECT_EQ(k["errors"]["http_5xx"], 1);
  EXPECT_EQ(k["errors_5xx"], 1);
  EXPECT_EQ(k["pages_leaked"], 0);
  EXPECT_TRUE(k["rss_drift_pct_per_h"].is_number());
  EXPECT_TRUE(k["throughput_drift_pct"].is_number());
  EXPECT_EQ(k["deterministic_ok"], true);
  EXPECT_EQ(k["pass"], false);
  EXPECT_EQ(k["samples"].size(), 360u);
  EXPECT_EQ(k["probes"].size(), 10u);
  const std::string md = render_markdown(report);
  EXPECT_NE(md.find("## Soak verdict"), std::string::npos);
  EXPECT_NE(md.find("FAIL"), std::string::npos);
  EXPECT_NE(md.find("| errors_5xx | fail |"), std::string::npos) << md.substr(0, 2000);
  EXPECT_NE(md.find("## Soak samples"), std::string::npos);
  const std::string html = render_html(report);
  EXPECT_NE(html.find("Soak: server RSS over time"), std::string::npos);
  EXPECT_NE(html.find("Soak: throughput over time"), std::string::npos);
  // A mistyped field is named.
  report["soak"]["pages_leaked"] = "none";
  const Status bad = validate_report(report);
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message().find("soak.pages_leaked"), std::string::npos) << bad.message();
}

TEST(SoakFlags, Durations) {
  EXPECT_DOUBLE_EQ(*parse_duration("60s", "--duration"), 60);
  EXPECT_DOUBLE_EQ(*parse_duration("10m", "--duration"), 600);
  EXPECT_DOUBLE_EQ(*parse_duration("1h", "--duration"), 3600);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5h", "--duration"), 5400);
  EXPECT_DOUBLE_EQ(*parse_duration("90", "--duration"), 90);
  for (const char* bad : {"", "s", "-5s", "0", "10x", "1hh", "nan", "1e9h"}) {
    auto d = parse_duration(bad, "--duration");
    ASSERT_FALSE(d) << bad;
    EXPECT_NE(d.status().message().find("--duration"), std::string::npos);
  }
}

TEST(SoakFlags, ConfigChecksNameTheFlag) {
  const auto msg = [](SoakConfig c) {
    const Status st = check_soak_config(c);
    return st ? std::string() : st.message();
  };
  SoakConfig c;
  EXPECT_EQ(msg(c), "");
  c.sample_interval_s = 120;  // longer than the 60 s run
  EXPECT_NE(msg(c).find("--sample-interval"), std::string::npos);
  c = {};
  c.concurrency = 0;
  EXPECT_NE(msg(c).find("--concurrency"), std::string::npos);
  c = {};
  c.max_prompt_tokens = 10;
  EXPECT_NE(msg(c).find("--max-prompt"), std::string::npos);
  c = {};
  c.disconnect_share = 1.5;
  EXPECT_NE(msg(c).find("--disconnect-share"), std::string::npos);
  c = {};
  c.max_tokens = 2;
  EXPECT_NE(msg(c).find("--max-tokens"), std::string::npos);
}

}  // namespace
}  // namespace sustain::bench

// Statistics on hand-computed samples: percentiles, per-request TTFT / TPOT /
// ITL / E2E, aggregate vs single-stream throughput, token counting that
// leaves out what the user never saw; roofline arithmetic; /proc parsing.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/bandwidth.h"
#include "bench/results.h"
#include "bench/roofline.h"
#include "bench/stats.h"
#include "bench/sysinfo.h"

namespace sustain::bench {
namespace {

TEST(Percentile, LinearInterpolationBetweenClosestRanks) {
  // Sorted 1..10 (given shuffled): h = 9p/100.
  const std::vector<double> x = {7, 3, 10, 1, 5, 2, 9, 4, 8, 6};
  EXPECT_DOUBLE_EQ(*percentile(x, 0), 1.0);
  EXPECT_DOUBLE_EQ(*percentile(x, 100), 10.0);
  EXPECT_DOUBLE_EQ(*percentile(x, 50), 5.5);   // h = 4.5
  EXPECT_DOUBLE_EQ(*percentile(x, 95), 9.55);  // h = 8.55 → 9 + 0.55
  EXPECT_DOUBLE_EQ(*percentile(x, 99), 9.91);  // h = 8.91
  EXPECT_DOUBLE_EQ(*percentile(x, 25), 3.25);  // h = 2.25
  EXPECT_DOUBLE_EQ(*percentile({42}, 99), 42.0);
  EXPECT_DOUBLE_EQ(*percentile({1, 3}, 50), 2.0);
}

TEST(Percentile, BadInputIsAnError) {
  auto e = percentile({}, 50);
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("empty"), std::string::npos);
  auto p = percentile({1.0}, 101);
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("101"), std::string::npos);
  EXPECT_FALSE(percentile({1.0}, NAN));
}

TEST(Summary, MeanStddevAndSpread) {
  const Summary s = summarize({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(s.n, 8);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.stddev, std::sqrt(32.0 / 7.0), 1e-12);  // sample stddev
  EXPECT_DOUBLE_EQ(s.min, 2);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.p50, 4.5);
  const Summary one = summarize({3});
  EXPECT_EQ(one.n, 1);
  EXPECT_DOUBLE_EQ(one.stddev, 0);
  EXPECT_EQ(summarize({}).n, 0);
}

TEST(RequestMetrics, TtftTpotItlE2e) {
  RequestTiming r;
  r.t_submit = 1.0;
  r.token_times = {1.5, 1.6, 1.8, 1.9};
  r.t_end = 2.0;
  r.output_tokens = 4;
  auto m = request_metrics(r);
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_DOUBLE_EQ(m->ttft, 0.5);
  EXPECT_DOUBLE_EQ(m->e2e, 1.0);
  ASSERT_TRUE(m->has_tpot);
  EXPECT_NEAR(m->tpot, (1.0 - 0.5) / 3, 1e-12);  // (E2E − TTFT) / (tokens − 1)
  ASSERT_EQ(m->itl.size(), 3u);
  EXPECT_NEAR(m->itl[0], 0.1, 1e-12);
  EXPECT_NEAR(m->itl[1], 0.2, 1e-12);
  EXPECT_NEAR(m->itl[2], 0.1, 1e-12);
}

TEST(RequestMetrics, TokensComeFromTheCountNotTheEvents) {
  // An HTTP stream: 3 SSE events carried 7 visible tokens (usage says so).
  RequestTiming r;
  r.t_submit = 0;
  r.token_times = {0.2, 0.5, 0.8};
  r.t_end = 0.8;
  r.output_tokens = 7;
  auto m = request_metrics(r);
  ASSERT_TRUE(m);
  EXPECT_NEAR(m->tpot, 0.6 / 6, 1e-12);
  EXPECT_EQ(m->itl.size(), 2u);  // gaps between events
  // One token: no TPOT.
  r.token_times = {0.2};
  r.output_tokens = 1;
  r.t_end = 0.3;
  m = request_metrics(r);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->has_tpot);
}

TEST(RequestMetrics, InconsistentTimesAreErrors) {
  RequestTiming r;
  r.t_submit = 1.0;
  r.t_end = 2.0;
  EXPECT_FALSE(request_metrics(r));  // no token
  r.token_times = {0.5};
  EXPECT_FALSE(request_metrics(r));  // before submit
  r.token_times = {1.5, 1.2};
  EXPECT_FALSE(request_metrics(r));  // goes backwards
  r.token_times = {1.5, 2.5};
  EXPECT_FALSE(request_metrics(r));  // after the end
}

TEST(LoadMetrics, AggregateAndSingleStreamAreSeparate) {
  // Two requests overlapping in [0, 2]: each 5 tokens, TPOT 0.25 s → 4 tok/s
  // per stream; together 10 tokens in 2 s → 5 tok/s aggregate.
  RequestTiming a, b, failed;
  a.t_submit = 0;
  a.token_times = {0.5, 0.75, 1.0, 1.25, 1.5};
  a.t_end = 1.5;
  a.output_tokens = 5;
  b.t_submit = 0.5;
  b.token_times = {1.0, 1.25, 1.5, 1.75, 2.0};
  b.t_end = 2.0;
  b.output_tokens = 5;
  failed.ok = false;
  auto m = load_metrics({a, b, failed});
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ(m->requests, 3);
  EXPECT_EQ(m->failed, 1);
  EXPECT_EQ(m->output_tokens, 10);
  EXPECT_DOUBLE_EQ(m->wall_s, 2.0);
  EXPECT_DOUBLE_EQ(m->aggregate_tok_s, 5.0);
  EXPECT_EQ(m->stream_tok_s.n, 2);
  EXPECT_DOUBLE_EQ(m->stream_tok_s.p50, 4.0);
  EXPECT_DOUBLE_EQ(m->ttft.p50, 0.5);
  EXPECT_EQ(m->itl.n, 8);
  EXPECT_DOUBLE_EQ(m->itl.p99, 0.25);
  EXPECT_DOUBLE_EQ(m->e2e.max, 1.5);
}

TEST(IdealTime, DecodeAloneGapsSkipEveryPrefillWindow) {
  // Two streams at concurrency 2. a decodes alone at 0.1 s a token, except
  // while b waits for its first token (0.4 → 1.0), when a's gaps stretch to
  // 0.3 s; b then decodes beside a at 0.1 s.
  RequestTiming a, b;
  a.t_submit = 0;
  a.token_times = {0.2, 0.3, 0.4, 0.7, 1.0, 1.1, 1.2};
  a.t_end = 1.2;
  a.output_tokens = 7;
  a.prompt_tokens = 100;
  b.t_submit = 0.4;
  b.token_times = {1.0, 1.1, 1.2, 1.3};
  b.t_end = 1.3;
  b.output_tokens = 4;
  b.prompt_tokens = 200;
  const IdealTime it = ideal_time({a, b}, 2, 0.2, 100);
  ASSERT_TRUE(it.has_decode_alone);
  // a's gaps 0.4→0.7 and 0.7→1.0 overlap b's wait; the other 4 of a's and
  // all 3 of b's are alone, each 0.1 s.
  EXPECT_EQ(it.decode_gaps_alone, 7);
  EXPECT_NEAR(it.decode_gap_alone_s, 0.1, 1e-12);
  // prefill 0.2 (100 tokens) + 0.4 (200 tokens); decode (6 + 3) / 2 × 0.1.
  EXPECT_NEAR(it.ideal_s, 0.6 + 0.45, 1e-12);
  EXPECT_NEAR(it.wall_s, 1.3, 1e-12);
  EXPECT_NEAR(it.efficiency, 1.05 / 1.3, 1e-12);
  // One token each: no gap at all to call "alone".
  RequestTiming c = a;
  c.t_submit = 0;
  c.token_times = {1.2};
  c.t_end = 1.3;
  c.output_tokens = 1;
  const IdealTime none = ideal_time({c, c}, 2, 0.2, 100);
  EXPECT_FALSE(none.has_decode_alone);
  EXPECT_EQ(none.ideal_s, 0);
}

// Under speculation tokens arrive in bursts (a verified draft's tokens in
// one step), and a server may put several tokens in one SSE event: the
// time per token is what the ideal needs, not the median gap (0 here).
TEST(IdealTime, BurstsAndCoalescedEventsGiveTheTimePerToken) {
  RequestTiming a;  // 4 tokens per step, a step every 0.4 s
  a.t_submit = 0;
  a.token_times = {0.1, 0.5, 0.5, 0.5, 0.5, 0.9, 0.9, 0.9, 0.9};
  a.t_end = 0.9;
  a.output_tokens = 9;
  a.prompt_tokens = 10;
  RequestTiming b;  // 2 tokens per event, an event every 0.2 s
  b.t_submit = 0;
  b.token_times = {0.1, 0.3, 0.5, 0.7, 0.9};
  b.t_end = 0.9;
  b.output_tokens = 9;
  b.prompt_tokens = 10;
  // Each alone (the median gap would read 0 for a, 0.2 s for b).
  for (const RequestTiming& r : {a, b}) {
    const IdealTime it = ideal_time({r, r}, 2, 0.1, 10);
    ASSERT_TRUE(it.has_decode_alone);
    EXPECT_NEAR(it.decode_gap_alone_s, 0.1, 1e-12);
    // prefill 2 × 0.1; decode (8 + 8) / 2 × 0.1.
    EXPECT_NEAR(it.ideal_s, 0.2 + 0.8, 1e-12);
  }
}

TEST(PerTokenDecode, OneTokenPerStepIsTheGaps) {
  auto g = per_token_decode_s({1.0, 1.25, 1.75}, {3, 4, 5});
  ASSERT_TRUE(g) << g.status().message();
  ASSERT_EQ(g->size(), 2u);
  EXPECT_DOUBLE_EQ((*g)[0], 0.25);
  EXPECT_DOUBLE_EQ((*g)[1], 0.5);
  auto none = per_token_decode_s({1.0}, {3});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

// A verify step that emits three tokens 10 µs apart: its 30 ms is split
// over them, not charged as 30 ms + 10 µs + 10 µs (whose median read as
// 100,000 tok/s). Tokens the first token's step emitted beside it cost 0,
// and the charges sum to the span.
TEST(PerTokenDecode, AVerifiedDraftSplitsItsStep) {
  const std::vector<double> t = {1.0, 1.00001, 1.03, 1.03001, 1.03002, 1.05};
  auto g = per_token_decode_s(t, {5, 5, 6, 6, 6, 7});
  ASSERT_TRUE(g) << g.status().message();
  ASSERT_EQ(g->size(), 5u);
  EXPECT_DOUBLE_EQ((*g)[0], 0.0);
  for (int i = 1; i <= 3; ++i) EXPECT_NEAR((*g)[i], (1.03002 - 1.00001) / 3, 1e-12);
  EXPECT_NEAR((*g)[4], 1.05 - 1.03002, 1e-12);
  double sum = 0;
  for (double x : *g) sum += x;
  EXPECT_NEAR(sum, t.back() - t[1], 1e-12);
  LadderRung r;
  r.rep_gaps_s = {*g};
  EXPECT_NEAR(decode_stats(r).tok_s_p50, 3 / (1.03002 - 1.00001), 1e-6);
}

TEST(PerTokenDecode, InconsistentInputIsRefused) {
  auto sizes = per_token_decode_s({1.0, 2.0}, {1});
  ASSERT_FALSE(sizes);
  EXPECT_NE(sizes.status().message().find("2 token timestamps but 1 step numbers"),
            std::string::npos);
  EXPECT_FALSE(per_token_decode_s({1.0, 2.0, 3.0}, {1, 3, 2}));
  EXPECT_FALSE(per_token_decode_s({1.0, 2.0, 1.5}, {1, 2, 3}));
}

TEST(DecodeStats, PooledGapsAndPerRepRates) {
  LadderRung r;
  r.n_tokens = 3;
  r.rep_gaps_s = {{0.01, 0.02}, {0.03, 0.04}};
  r.rep_tok_s = {2 / 0.03, 2 / 0.07};
  const DecodeStats d = decode_stats(r);
  EXPECT_EQ(d.tpot_s.n, 4);
  EXPECT_DOUBLE_EQ(d.tpot_s.p50, 0.025);
  EXPECT_NEAR(d.tok_s_p50, 40.0, 1e-9);
  EXPECT_NEAR(d.tpot_s.p95, 0.0385, 1e-12);  // h = 2.85
  EXPECT_NEAR(d.tok_s_p95, 1 / 0.0385, 1e-9);
  EXPECT_EQ(d.rep_tok_s.n, 2);
}

ModelCost toy_cost() {
  ModelCost m;
  m.weight_bytes_per_step = 1000;
  m.matmul_params = 500;
  m.n_layer = 2;
  m.n_head = 4;
  m.head_dim = 8;
  m.kv_bytes_per_token = 10;
  return m;
}

TEST(Roofline, BytesFlopsAndBounds) {
  const ModelCost m = toy_cost();
  EXPECT_DOUBLE_EQ(decode_bytes(m, 100), 2000);
  EXPECT_DOUBLE_EQ(decode_flops(m, 100), 2 * 500 + 4 * 2 * 4 * 8 * 100);
  const Bound b = decode_bound(m, 100, 2e-6, 1e-6);  // 2000 B/s, 1000 FLOP/s
  EXPECT_DOUBLE_EQ(b.bandwidth_tok_s, 1.0);
  EXPECT_DOUBLE_EQ(b.compute_tok_s, 1000.0 / 26600.0);
  // Seed model: speed falls with the bytes read.
  EXPECT_DOUBLE_EQ(seed_model_tok_s(m, 0, 50, 100), 25.0);
  EXPECT_DOUBLE_EQ(seed_model_tok_s(m, 100, 50, 100), 50.0);
  // Sliding-window layers read at most their window.
  ModelCost w = m;
  w.window_bytes_per_token = 3;
  w.window = 40;
  EXPECT_DOUBLE_EQ(decode_bytes(w, 30), decode_bytes(m, 30) + 3 * 30);
  EXPECT_DOUBLE_EQ(decode_bytes(w, 100), decode_bytes(m, 100) + 3 * 40);
}

TEST(Roofline, PrefillFitRecoversAQuadraticCost) {
  const double a = 1e-3, b = 2e-8;
  const double from[] = {0, 512, 2048, 8192}, to[] = {512, 2048, 8192, 16384};
  double secs[4];
  for (int i = 0; i < 4; ++i)
    secs[i] = a * (to[i] - from[i]) + b * (to[i] * to[i] - from[i] * from[i]) / 2;
  const PrefillFit f = fit_prefill(from, to, secs, 4);
  EXPECT_EQ(f.points, 4);
  EXPECT_NEAR(f.a, a, 1e-9);
  EXPECT_NEAR(f.b, b, 1e-13);
  EXPECT_NEAR(f.seconds(0, 32768), a * 32768 + b * 32768.0 * 32768 / 2, 1e-6);
  // One point: linear only.
  const PrefillFit one = fit_prefill(from, to, secs, 1);
  EXPECT_EQ(one.points, 1);
  EXPECT_DOUBLE_EQ(one.b, 0);
  EXPECT_NEAR(one.a, secs[0] / 512, 1e-15);
  EXPECT_EQ(fit_prefill(from, to, secs, 0).points, 0);
}

TEST(SysInfo, ParsesCpuinfo) {
  const std::string text =
      "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse4_2 avx avx2 fma "
      "avx512f avx512_vnni\n\nprocessor\t: 1\nmodel name\t: Test CPU 9000\nflags\t\t: fpu\n";
  const CpuInfo c = parse_cpuinfo(text);
  EXPECT_EQ(c.model, "Test CPU 9000");
  EXPECT_EQ(c.logical_cpus, 2);
  const std::vector<std::string> want = {"sse4_2", "avx", "fma", "avx2", "avx512f", "avx512_vnni"};
  EXPECT_EQ(c.features, want);
  EXPECT_EQ(parse_cpuinfo("").model, "unknown");
}

TEST(SysInfo, MemoryFiguresOfThisProcess) {
  const int64_t before = peak_rss_bytes();
  EXPECT_GT(before, 0);
  EXPECT_GT(current_rss_bytes(), 0);
  // Touch 64 MiB: the peak must grow by about that much.
  std::vector<char> big(size_t(64) << 20, 1);
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i);
  EXPECT_GE(peak_rss_bytes(), before + (int64_t(48) << 20)) << int(big[4096]);
  EXPECT_GT(total_memory_bytes(), 0);
  EXPECT_FALSE(cpu_info().simd_target.empty());
}

TEST(Bandwidth, MeasuresRatesPerRepetition) {
  auto r = measure_bandwidth(2, size_t(64) << 20, 2);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->threads, 2);
  EXPECT_GE(r->buffer_bytes, size_t(63) << 20);
  ASSERT_EQ(r->read_gbps.size(), 2u);
  ASSERT_EQ(r->fma_gflops.size(), 2u);
  // Any machine this runs on reads faster than 0.1 GB/s and does more than
  // 0.1 GFLOP/s; far beyond 10 TB/s would mean the reads were optimized away.
  for (double v : r->read_gbps) {
    EXPECT_GT(v, 0.1);
    EXPECT_LT(v, 10000);
  }
  for (double v : r->fma_gflops) EXPECT_GT(v, 0.1);
  EXPECT_DOUBLE_EQ(r->read_gbps_best, std::max(r->read_gbps[0], r->read_gbps[1]));
  EXPECT_DOUBLE_EQ(r->fma_gflops_median, (r->fma_gflops[0] + r->fma_gflops[1]) / 2);
}

TEST(Bandwidth, BadArgumentsAreNamed) {
  auto r = measure_bandwidth(0, size_t(64) << 20, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("threads=0"), std::string::npos);
  r = measure_bandwidth(1, size_t(1) << 20, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("64 MiB"), std::string::npos);
  EXPECT_FALSE(measure_bandwidth(1, size_t(64) << 20, 0));
}

}  // namespace
}  // namespace sustain::bench

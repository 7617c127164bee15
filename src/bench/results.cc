#include "bench/results.h"

#include <algorithm>

#include "bench/report.h"

namespace sustain::bench {

using nlohmann::json;

DecodeStats decode_stats(const LadderRung& r) {
  DecodeStats d;
  std::vector<double> gaps;
  for (const auto& g : r.rep_gaps_s) gaps.insert(gaps.end(), g.begin(), g.end());
  d.tpot_s = summarize(gaps);
  d.rep_tok_s = summarize(r.rep_tok_s);
  if (d.tpot_s.p50 > 0) d.tok_s_p50 = 1.0 / d.tpot_s.p50;
  if (d.tpot_s.p95 > 0) d.tok_s_p95 = 1.0 / d.tpot_s.p95;
  return d;
}

json rung_spec_json(const LadderRung& r) {
  if (!r.speculative) return nullptr;
  int64_t decoded = 0;
  for (int64_t v : r.rep_visible_tokens) decoded += std::max<int64_t>(v - 1, 0);
  const auto share = [](int64_t a, int64_t b) {
    return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
  };
  return {{"drafted", r.spec_drafted},
          {"accepted", r.spec_accepted},
          {"steps", r.spec_steps},
          {"acceptance", share(r.spec_accepted, r.spec_drafted)},
          {"k_mean", share(r.spec_drafted, r.spec_steps)},
          {"decoded_tokens", decoded},
          {"verify_token_share", share(r.spec_accepted + r.spec_steps, decoded)}};
}

json ladder_json(const std::vector<LadderRung>& rungs, const ModelCost& cost,
                 const BandwidthResult* bw) {
  json out = json::array();
  // The peak: one request at context ≤ 2K (DESIGN.md §6), the fastest such
  // rung; the first rung when none is that short.
  int peak = rungs.empty() ? -1 : 0;
  double best = -1;
  for (size_t i = 0; i < rungs.size(); ++i) {
    const double v = decode_stats(rungs[i]).tok_s_p50;
    if (rungs[i].ctx <= 2048 && v > best) {
      best = v;
      peak = static_cast<int>(i);
    }
  }
  double peak_tok_s = 0, peak_ctx = 0;
  if (peak >= 0) {
    peak_tok_s = decode_stats(rungs[peak]).tok_s_p50;
    peak_ctx = rungs[peak].ctx + rungs[peak].n_tokens / 2.0;
  }
  for (const LadderRung& r : rungs) {
    const DecodeStats d = decode_stats(r);
    const double at = r.ctx + r.n_tokens / 2.0;
    json samples = json::array();
    for (const auto& g : r.rep_gaps_s) {
      json rep = json::array();
      for (double v : g) rep.push_back(v * 1e3);
      samples.push_back(rep);
    }
    json decode = {
        {"tok_s_p50", d.tok_s_p50},          {"tok_s_p95", d.tok_s_p95},
        {"tpot_ms_p50", d.tpot_s.p50 * 1e3}, {"tpot_ms_p95", d.tpot_s.p95 * 1e3},
        {"tpot_ms_p99", d.tpot_s.p99 * 1e3}, {"tpot_ms", summary_json(d.tpot_s, 1e3)},
        {"tok_s_reps", r.rep_tok_s},         {"tok_s_spread", summary_json(d.rep_tok_s)},
        {"tokens_per_rep", r.n_tokens},      {"visible_tokens_per_rep", r.rep_visible_tokens},
        {"reps", r.rep_gaps_s.size()},       {"samples_ms", samples}};
    const double ttft_ms = r.fill_ttft_s * 1e3;
    json prefill = {
        {"tok_s", r.fill_ttft_s > 0 && !r.random_fill ? r.fill_new_tokens / r.fill_ttft_s : 0.0},
        {"ttft_ms", ttft_ms},
        {"from_ctx", r.fill_from},
        {"new_tokens", r.fill_new_tokens},
        {"fill", r.random_fill ? "random" : "prefill"}};
    json bound = {{"at_ctx", at}};
    if (bw) {
      const Bound b = decode_bound(cost, at, bw->read_gbps_best, bw->fma_gflops_best);
      bound["bandwidth_tok_s"] = b.bandwidth_tok_s;
      bound["compute_tok_s"] = b.compute_tok_s;
      bound["bytes_per_step"] = b.bytes_per_step;
      bound["flops_per_token"] = b.flops_per_token;
      bound["measured_over_bandwidth"] =
          b.bandwidth_tok_s > 0 ? d.tok_s_p50 / b.bandwidth_tok_s : 0.0;
      bound["measured_over_compute"] = b.compute_tok_s > 0 ? d.tok_s_p50 / b.compute_tok_s : 0.0;
    } else {
      bound["bandwidth_tok_s"] = 0.0;
      bound["compute_tok_s"] = 0.0;
      bound["bytes_per_step"] = decode_bytes(cost, at);
      bound["flops_per_token"] = decode_flops(cost, at);
    }
    out.push_back({{"ctx", r.ctx},
                   {"decode", decode},
                   {"prefill", prefill},
                   {"spec", rung_spec_json(r)},
                   {"kv_bytes", r.kv_bytes},
                   {"kv_pool_used_bytes", r.kv_pool_used_bytes},
                   {"peak_rss_bytes", r.peak_rss_bytes},
                   {"bound", bound},
                   {"seed_model_tok_s", seed_model_tok_s(cost, peak_ctx, peak_tok_s, at)},
                   {"relative_to_peak", peak_tok_s > 0 ? d.tok_s_p50 / peak_tok_s : 0.0}});
  }
  return out;
}

json prefill_json(const std::vector<PrefillPoint>& points, const std::vector<int64_t>& windows) {
  json pts = json::array();
  std::vector<double> from, to, secs;
  for (const PrefillPoint& p : points) {
    const Summary s = summarize(p.ttft_s);
    pts.push_back({{"source", p.source},
                   {"from_ctx", p.from_ctx},
                   {"ctx", p.ctx},
                   {"new_tokens", p.new_tokens},
                   {"ttft_ms", s.p50 * 1e3},
                   {"ttft_ms_samples",
                    [&] {
                      json a = json::array();
                      for (double v : p.ttft_s) a.push_back(v * 1e3);
                      return a;
                    }()},
                   {"ttft_ms_spread", summary_json(s, 1e3)},
                   {"tok_s", s.p50 > 0 ? p.new_tokens / s.p50 : 0.0}});
    if (s.n > 0) {
      from.push_back(static_cast<double>(p.from_ctx));
      to.push_back(static_cast<double>(p.from_ctx + p.new_tokens));
      secs.push_back(s.p50);
    }
  }
  const PrefillFit fit =
      fit_prefill(from.data(), to.data(), secs.data(), static_cast<int>(from.size()));
  json proj = json::array();
  if (fit.points > 0)
    for (int64_t w : windows)
      proj.push_back({{"ctx", w}, {"seconds", fit.seconds(0, static_cast<double>(w))}});
  return {{"points", pts},
          {"fit",
           {{"a_ms", fit.a * 1e3},
            {"b_ms", fit.b * 1e3},
            {"points", fit.points},
            {"model", "seconds(L0 -> L1) = a*(L1 - L0) + b*(L1^2 - L0^2)/2"}}},
          {"projected", proj}};
}

json load_level_json(const LoadLevel& lv) {
  const LoadMetrics& m = lv.metrics;
  json samples = json::array();
  for (const RequestTiming& r : lv.requests)
    samples.push_back({{"t_submit_s", r.t_submit},
                       {"token_times_s", r.token_times},
                       {"t_end_s", r.t_end},
                       {"output_tokens", r.output_tokens},
                       {"prompt_tokens", r.prompt_tokens},
                       {"ok", r.ok}});
  return {{"mode", lv.mode},
          {"concurrency", lv.concurrency},
          {"rate_req_s", lv.rate},
          {"requests", m.requests},
          {"failed", m.failed},
          {"output_tokens", m.output_tokens},
          {"prompt_tokens", m.prompt_tokens},
          {"wall_s", m.wall_s},
          {"aggregate_tok_s", m.aggregate_tok_s},
          {"stream_tok_s", summary_json(m.stream_tok_s)},
          {"ttft_ms", summary_json(m.ttft, 1e3)},
          {"tpot_ms", summary_json(m.tpot, 1e3)},
          {"itl_ms", summary_json(m.itl, 1e3)},
          {"e2e_ms", summary_json(m.e2e, 1e3)},
          {"error", lv.error},
          {"samples", samples}};
}

json load_levels_json(const std::vector<LoadLevel>& levels) {
  const LoadLevel* one = nullptr;
  for (const LoadLevel& lv : levels)
    if (lv.mode == "fixed" && lv.concurrency == 1 && lv.metrics.requests > lv.metrics.failed)
      one = &lv;
  json out = json::array();
  for (const LoadLevel& lv : levels) {
    json j = load_level_json(lv);
    if (one != nullptr && lv.mode == "fixed") {
      const int64_t ok = one->metrics.requests - one->metrics.failed;
      const IdealTime it = ideal_time(lv.requests, lv.concurrency, one->metrics.ttft.p50,
                                      one->metrics.prompt_tokens / std::max<int64_t>(ok, 1));
      j["scheduling"] = {{"prefill_alone_ms", it.prefill_alone_s * 1e3},
                         {"decode_gap_alone_ms", it.decode_gap_alone_s * 1e3},
                         {"decode_gaps_alone", it.decode_gaps_alone},
                         {"has_decode_alone", it.has_decode_alone},
                         {"ideal_s", it.ideal_s},
                         {"wall_s", it.wall_s},
                         {"efficiency", it.efficiency}};
    }
    if (!lv.target_counters.empty()) {
      json c = json::object();
      for (const auto& [k, v] : lv.target_counters) c[k] = v;
      j["engine"] = c;
    }
    out.push_back(j);
  }
  return out;
}

json bandwidth_json(const BandwidthResult& bw) {
  return {{"threads", bw.threads},
          {"buffer_bytes", bw.buffer_bytes},
          {"read_gbps", bw.read_gbps},
          {"read_gbps_best", bw.read_gbps_best},
          {"read_gbps_median", bw.read_gbps_median},
          {"read_gbps_spread", summary_json(summarize(bw.read_gbps))},
          {"fma_gflops", bw.fma_gflops},
          {"fma_gflops_best", bw.fma_gflops_best},
          {"fma_gflops_median", bw.fma_gflops_median},
          {"fma_gflops_spread", summary_json(summarize(bw.fma_gflops))}};
}

}  // namespace sustain::bench

// report.json → tables → report.md; the schema check; writing the files.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "bench/report.h"

namespace sustain::bench {

using nlohmann::json;

json summary_json(const Summary& s, double scale) {
  return {{"n", s.n},
          {"mean", s.mean * scale},
          {"stddev", s.stddev * scale},
          {"min", s.min * scale},
          {"max", s.max * scale},
          {"p50", s.p50 * scale},
          {"p95", s.p95 * scale},
          {"p99", s.p99 * scale}};
}

json metric_definitions() {
  return {
      {"percentile",
       "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7): "
       "h = (n-1)*p/100, x[floor h] + (h - floor h)*(x[floor h + 1] - x[floor h])"},
      {"TTFT", "time to first token = t(first visible token) - t(submit)"},
      {"E2E", "end-to-end latency = t(response complete) - t(submit)"},
      {"TPOT", "time per output token of one request = (E2E - TTFT) / (output_tokens - 1)"},
      {"ITL",
       "inter-token latency = t(emission i+1) - t(emission i), every gap pooled over requests; "
       "over HTTP an emission is one SSE event with text (it may carry several tokens)"},
      {"decode.tpot_ms",
       "context ladder: each visible token's share of the decode time of the timed "
       "repetitions, pooled over repetitions: the gap to the token before it, or, where one "
       "step emitted several tokens (a verified draft), that step's time split evenly over "
       "them (the first token, which carries the prompt, excluded)"},
      {"decode.tok_s_p50", "1000 / tpot_ms_p50"},
      {"decode.tok_s_p95",
       "1000 / tpot_ms_p95: the speed 95 % of tokens were generated at or above"},
      {"decode.tok_s_reps", "per repetition: (tokens - 1) / (t(last token) - t(first token))"},
      {"prefill.tok_s",
       "new prompt tokens computed / TTFT; on the ladder the new tokens are the rung's "
       "extension of the previous rung's prompt (the rest comes from the prefix cache), "
       "computed at depth from_ctx"},
      {"single_stream_tok_s", "per request 1 / TPOT; reported as a distribution"},
      {"aggregate_tok_s",
       "sum of visible output tokens of every request / (last end - first submit)"},
      {"bound.bandwidth_tok_s",
       "read bandwidth (best of reps) / bytes per decode step; bytes = weights read per step "
       "+ kv_bytes_per_token * context (sliding-window layers: * min(context, window))"},
      {"bound.compute_tok_s",
       "peak f32 FMA FLOP/s (best of reps) / (2 * matmul parameters + 4 * n_layer * n_head * "
       "head_dim * context)"},
      {"seed_model_tok_s",
       "seed 000 §5.2 bandwidth model: peak tok/s * bytes(peak context) / bytes(context)"},
      {"relative_to_peak",
       "tok_s_p50 / tok_s_p50 of the peak rung (the fastest with context <= 2048)"},
      {"kv_bytes",
       "KV bytes the sequence holds at the end of a repetition: "
       "kv_bytes_per_token * (ctx + n_tokens) (sliding-window layers: their window)"},
      {"kv_pool_used_bytes",
       "measured: KV pool pages in use while the rung decoded (the sequence and the pages the "
       "prefix cache keeps) * page bytes"},
      {"peak_rss_bytes", "the process's peak resident set (VmHWM) after the rung"},
      {"tokens", "only user-visible output tokens are counted (never draft, padding or retried)"},
      {"quality.kl",
       "ablation: KL(row 0 || row) = sum_v p0(v) ln(p0(v) / p(v)) of the next-token "
       "distributions, in nats, per position with context in (C/2, C]; mean, median, P99, max"},
      {"quality.same_top1",
       "ablation: share of those positions where row 0 and the row have the same most likely "
       "token"},
      {"quality.needle",
       "ablation: correct / cases of the built-in needle retriever with the row's KV formats, "
       "prompts of C tokens, needle at depths 0.1, 0.5, 0.9"},
  };
}

namespace {

double num(const json& j, const char* key, double dflt = 0) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return dflt;
  return j[key].get<double>();
}

std::string str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  if (j[key].is_string()) return j[key].get<std::string>();
  if (j[key].is_null()) return "";
  return j[key].dump();
}

std::string f1(double v) {
  return fmt::format("{:.1f}", v);
}
std::string f2(double v) {
  return fmt::format("{:.2f}", v);
}
std::string mib(double b) {
  return fmt::format("{:.1f}", b / 1048576.0);
}

std::string ctx_label(int64_t c) {
  if (c >= 1024 && c % 1024 == 0) return fmt::format("{}K", c / 1024);
  return std::to_string(c);
}

// "value ± stddev (n=…)" — the spread next to every figure.
std::string with_spread(double v, const json& s, int digits = 1) {
  const int64_t n = s.is_object() && s.contains("n") ? s["n"].get<int64_t>() : 0;
  if (n < 2) return fmt::format("{:.{}f} (n={})", v, digits, n);
  return fmt::format("{:.{}f} ± {:.{}f} (n={})", v, digits, num(s, "stddev"), digits, n);
}

std::string pct_spread(const json& s) {
  return fmt::format("{:.1f} / {:.1f} / {:.1f}", num(s, "p50"), num(s, "p95"), num(s, "p99"));
}

void add_conditions(const json& r, std::vector<Table>& out) {
  Table t{"Conditions", "", {"condition", "value"}, {}};
  if (!r.contains("conditions")) return;
  const json& c = r["conditions"];
  for (const auto& [group, vals] : c.items()) {
    if (!vals.is_object()) {
      t.rows.push_back({group, vals.is_string() ? vals.get<std::string>() : vals.dump()});
      continue;
    }
    for (const auto& [k, v] : vals.items())
      t.rows.push_back({group + "." + k, v.is_string() ? v.get<std::string>() : v.dump()});
  }
  out.push_back(std::move(t));
}

void add_machine(const json& r, std::vector<Table>& out) {
  if (!r.contains("machine") || !r["machine"].is_object()) return;
  const json& b = r["machine"];
  Table t{"Machine roofline", "", {"measure", "best", "median", "samples"}, {}};
  const auto samples = [](const json& a) {
    std::string s;
    for (const auto& v : a) s += (s.empty() ? "" : ", ") + f1(v.get<double>());
    return s;
  };
  t.note = fmt::format("{} threads, {} MiB buffer", num(b, "threads"), mib(num(b, "buffer_bytes")));
  t.rows.push_back({"read bandwidth (GB/s)", f1(num(b, "read_gbps_best")),
                    f1(num(b, "read_gbps_median")), samples(b.value("read_gbps", json::array()))});
  t.rows.push_back({"f32 FMA peak (GFLOP/s)", f1(num(b, "fma_gflops_best")),
                    f1(num(b, "fma_gflops_median")),
                    samples(b.value("fma_gflops", json::array()))});
  out.push_back(std::move(t));
}

void add_ladder(const json& r, std::vector<Table>& out) {
  if (!r.contains("ladder") || r["ladder"].empty()) return;
  Table t{"Context ladder (decode)",
          "tok/s P50 ± run-to-run stddev of the per-repetition rates; TPOT percentiles over "
          "every timed token; bounds at the mean decode context",
          {"ctx", "tok/s P50", "tok/s P95", "TPOT ms P50 / P95 / P99", "rel. peak", "KV MiB",
           "peak RSS MiB", "bandwidth bound tok/s", "measured ÷ bound", "compute bound tok/s",
           "seed model tok/s"},
          {}};
  for (const auto& g : r["ladder"]) {
    const json& d = g["decode"];
    const json& b = g["bound"];
    t.rows.push_back(
        {ctx_label(g["ctx"].get<int64_t>()),
         with_spread(num(d, "tok_s_p50"), d.value("tok_s_spread", json())), f1(num(d, "tok_s_p95")),
         fmt::format("{:.2f} / {:.2f} / {:.2f}", num(d, "tpot_ms_p50"), num(d, "tpot_ms_p95"),
                     num(d, "tpot_ms_p99")),
         fmt::format("{:.0f} %", 100 * num(g, "relative_to_peak")), mib(num(g, "kv_bytes")),
         mib(num(g, "peak_rss_bytes")), f1(num(b, "bandwidth_tok_s")),
         fmt::format("{:.0f} %", 100 * num(b, "measured_over_bandwidth")),
         f1(num(b, "compute_tok_s")), f1(num(g, "seed_model_tok_s"))});
    // Under --spec: the cell's acceptance, mean draft and share of tokens
    // from verify steps (visible tokens only are counted in tok/s).
    if (g.contains("spec") && g["spec"].is_object()) {
      if (t.header.back() != "speculation") t.header.push_back("speculation");
      const json& sp = g["spec"];
      t.rows.back().push_back(fmt::format(
          "{:.0f} % of {} drafts accepted, k mean {:.2f}, {:.0f} % of tokens from verify steps",
          100 * num(sp, "acceptance"), sp["drafted"].get<int64_t>(), num(sp, "k_mean"),
          100 * num(sp, "verify_token_share")));
    }
  }
  out.push_back(std::move(t));
}

void add_prefill(const json& r, std::vector<Table>& out) {
  if (!r.contains("prefill") || !r["prefill"].is_object()) return;
  const json& p = r["prefill"];
  if (p.contains("points") && !p["points"].empty()) {
    Table t{"Prefill gradient",
            "prompt tok/s = new tokens ÷ TTFT, new tokens computed on top of `from` cached "
            "tokens; ± is the stddev over repetitions where there are several",
            {"source", "from", "to", "new tokens", "TTFT ms", "prompt tok/s"},
            {}};
    for (const auto& q : p["points"])
      t.rows.push_back({str(q, "source"), ctx_label(q["from_ctx"].get<int64_t>()),
                        ctx_label(q["ctx"].get<int64_t>()),
                        std::to_string(q["new_tokens"].get<int64_t>()),
                        with_spread(num(q, "ttft_ms"), q.value("ttft_ms_spread", json()), 0),
                        f1(num(q, "tok_s"))});
    out.push_back(std::move(t));
  }
  if (p.contains("projected") && !p["projected"].empty()) {
    const json& fit = p["fit"];
    Table t{"Projected full re-prefill",
            fmt::format("what re-reading a whole window from scratch costs (an agent harness "
                        "after compaction), from the fit t(depth) = a + b·depth per token: "
                        "a = {:.4f} ms, b = {:.3g} ms per token of depth ({} points)",
                        num(fit, "a_ms"), num(fit, "b_ms"), num(fit, "points")),
            {"window", "projected wait s"},
            {}};
    for (const auto& q : p["projected"])
      t.rows.push_back({ctx_label(q["ctx"].get<int64_t>()), f1(num(q, "seconds"))});
    out.push_back(std::move(t));
  }
}

// The verify-cost curve (verify_curve.h): per depth, k = 0's ms a step,
// each k's cost ratio, and the best k and speedup at each acceptance.
void add_verify_curve(const json& r, std::vector<Table>& out) {
  if (!r.contains("verify_curve") || !r["verify_curve"].is_object()) return;
  const json& v = r["verify_curve"];
  if (!v.contains("points") || v["points"].empty()) return;
  Table t{"Verify-cost curve",
          fmt::format("a speculative verify step of k drafts (k + 1 tokens of one sequence, "
                      "logits for each) over random K/V at each depth, ms P50 of {} steps × "
                      "{} repetitions (each repetition times every k in turn); k > 0 as × the "
                      "k = 0 step; best at α: the k with the most tokens per unit of step time, "
                      "(1 − α^(k+1)) / (1 − α) ÷ its ratio, and that speedup",
                      num(v, "steps"), num(v, "reps")),
          {"depth", "k=0 ms"},
          {}};
  const json& ks = v["ks"];
  for (size_t i = 1; i < ks.size(); ++i)
    t.header.push_back(fmt::format("k={}", ks[i].get<int64_t>()));
  for (const auto& a : v["alphas"])
    t.header.push_back(fmt::format("best at α={:.1f}", a.get<double>()));
  for (const auto& p : v["points"]) {
    std::vector<std::string> cells = {ctx_label(p["depth"].get<int64_t>()),
                                      f2(p["ms_p50"][0].get<double>())};
    for (size_t i = 1; i < p["ratio"].size(); ++i)
      cells.push_back(fmt::format("{:.2f}×", p["ratio"][i].get<double>()));
    for (const auto& b : p["best"])
      cells.push_back(fmt::format("k={} {:.2f}×", b["k"].get<int64_t>(), num(b, "speedup")));
    t.rows.push_back(std::move(cells));
  }
  out.push_back(std::move(t));
}

void add_vision(const json& r, std::vector<Table>& out) {
  if (!r.contains("vision") || !r["vision"].is_object()) return;
  const json& v = r["vision"];
  Table t{"Image cost",
          fmt::format("{} ({} image tokens each); encode = decode + preprocess + encoder + "
                      "projector; prefill = TTFT of a prompt of {} positions holding the image, "
                      "beside a text prompt of as many positions; medians of {} repetitions, {} "
                      "threads",
                      str(v, "mmproj"), v.value("tokens_per_image", 0), v.value("positions", 0),
                      v.value("reps", 0), v.value("threads", 0)),
          {"image", "encode ms", "prefill with image ms", "prefill text-only ms"},
          {}};
  for (const auto& i : v["images"])
    t.rows.push_back({str(i, "file"), f2(num(i, "encode_ms_p50")),
                      f2(num(i, "prefill_image_ms_p50")), f2(num(i, "prefill_text_ms_p50"))});
  out.push_back(std::move(t));
}

void add_concurrency(const json& r, std::vector<Table>& out) {
  if (!r.contains("concurrency") || !r["concurrency"].is_object()) return;
  const json& c = r["concurrency"];
  if (!c.contains("levels") || c["levels"].empty()) return;
  Table t{"Concurrency ladder",
          fmt::format("target {}, prompt {} {}, {} output tokens per request; latencies in ms "
                      "as P50 / P95 / P99; single-stream = per request 1/TPOT, aggregate = all "
                      "visible tokens ÷ wall time",
                      str(c, "target"), num(c, "prompt_length"), str(c, "prompt_unit"),
                      num(c, "max_tokens")),
          {"mode", "N", "rate req/s", "requests (failed)", "aggregate tok/s",
           "single-stream tok/s P50", "TTFT", "TPOT", "ITL", "E2E"},
          {}};
  for (const auto& l : c["levels"]) {
    t.rows.push_back(
        {str(l, "mode"), std::to_string(l["concurrency"].get<int64_t>()),
         str(l, "mode") == "poisson" ? f2(num(l, "rate_req_s")) : "-",
         fmt::format("{} ({})", l["requests"].get<int64_t>(), l["failed"].get<int64_t>()),
         f1(num(l, "aggregate_tok_s")),
         with_spread(num(l["stream_tok_s"], "p50"), l["stream_tok_s"]), pct_spread(l["ttft_ms"]),
         pct_spread(l["tpot_ms"]), pct_spread(l["itl_ms"]), pct_spread(l["e2e_ms"])});
  }
  out.push_back(std::move(t));
  // Scheduling efficiency and the TPOT target, where the levels carry them.
  Table s{"Scheduling",
          "ideal = each request's prefill at the concurrency-1 TTFT (per prompt token) + its "
          "decode steps at the median gap seen while no request waited for its first token, "
          "shared over N streams; efficiency = ideal ÷ wall. Target columns (in-process "
          "engine): steps that ran beside decoding streams under a TPOT target, the target, "
          "and the steps over it by why (decode alone / minimum chunk / estimate)",
          {"mode", "N", "wall s", "ideal s", "efficiency", "decode gap alone ms",
           "TPOT P95 ms", "target ms", "steps under target", "missed (alone/min/est)",
           "prefill deferred"},
          {}};
  for (const auto& l : c["levels"]) {
    const bool has_s = l.contains("scheduling") && l["scheduling"].value("has_decode_alone", false);
    const bool has_e = l.contains("engine") && l["engine"].is_object();
    if (!has_s && !has_e) continue;
    const json& e = has_e ? l["engine"] : json::object();
    const json& g = has_s ? l["scheduling"] : json::object();
    auto en = [&](const char* k) { return e.contains(k) ? num(e, k) : 0.0; };
    s.rows.push_back(
        {str(l, "mode"), std::to_string(l["concurrency"].get<int64_t>()), f2(num(l, "wall_s")),
         has_s ? f2(num(g, "ideal_s")) : "-", has_s ? f2(num(g, "efficiency")) : "-",
         has_s ? f2(num(g, "decode_gap_alone_ms")) : "-", f1(num(l["tpot_ms"], "p95")),
         has_e && en("target_steps") > 0 ? f1(en("target_ms")) : "-",
         has_e ? fmt::format("{:.0f}", en("target_steps")) : "-",
         has_e ? fmt::format("{:.0f} / {:.0f} / {:.0f}", en("target_missed_decode_alone"),
                             en("target_missed_min_chunk"), en("target_missed_estimate"))
               : "-",
         has_e ? fmt::format("{:.0f}", en("prefill_tokens_deferred")) : "-"});
  }
  if (!s.rows.empty()) out.push_back(std::move(s));
}

// One quality cell of a row: KL mean (P99) or top-1 at context `ctx`.
std::string quality_cell(const json& q, int64_t ctx, bool top1) {
  if (!q.is_object()) return "not measured";
  if (q.contains("same_as_row")) return fmt::format("= row {}", q["same_as_row"].get<int64_t>());
  if (!q.contains("kl") || !q["kl"].is_array()) return q.contains("skipped") ? "skipped" : "-";
  for (const auto& c : q["kl"]) {
    if (!c.contains("ctx") || c["ctx"].get<int64_t>() != ctx) continue;
    if (!c.contains("kl_mean")) return "skipped";
    if (top1) return fmt::format("{:.1f} %", 100.0 * num(c, "same_top1"));
    return fmt::format("{:.3g} ({:.3g})", num(c, "kl_mean"), num(c, "kl_p99"));
  }
  return "-";
}

std::string needle_cell(const json& q) {
  if (!q.is_object() || !q.contains("needle") || !q["needle"].is_object()) return "-";
  std::string s;
  for (const auto& c : q["needle"]["cells"]) {
    const std::string at = ctx_label(c["ctx"].get<int64_t>());
    s += (s.empty() ? "" : ", ") +
         (c.contains("correct")
              ? fmt::format("{}/{} @{}", c["correct"].get<int64_t>(), c["total"].get<int64_t>(), at)
              : "skipped @" + at);
  }
  return s.empty() ? "-" : s;
}

// A row's speculation: proposer (an oracle named as such), acceptance, mean
// draft length per verify step, and whether the gate chose it.
std::string spec_cell(const json& row) {
  if (!row.contains("spec") || !row["spec"].is_object()) return "off";
  const json& s = row["spec"];
  const bool oracle = s.contains("oracle") && s["oracle"].is_boolean() && s["oracle"].get<bool>();
  const bool gate = s.contains("gate") && s["gate"].is_boolean() && s["gate"].get<bool>();
  std::string out =
      fmt::format("{}{}: {:.0f} % accepted, k mean {:.2f} ({} up to {})", str(s, "type"),
                  oracle ? " (oracle, measurement only)" : "", 100.0 * num(s, "acceptance"),
                  num(s, "k_mean"), gate ? "gated" : "fixed", num(s, "draft_max"));
  // Per context: the acceptance and the share of tokens from verify steps.
  std::string per;
  if (row.contains("ladder"))
    for (const auto& c : row["ladder"]) {
      if (!c.contains("spec") || !c["spec"].is_object()) continue;
      per += fmt::format("{}{} {:.0f} % / {:.0f} %", per.empty() ? "" : ", ",
                         ctx_label(c["ctx"].get<int64_t>()), 100.0 * num(c["spec"], "acceptance"),
                         100.0 * num(c["spec"], "verify_token_share"));
    }
  if (!per.empty()) out += "; accepted / tokens from verify steps: " + per;
  return out;
}

// Rows that ran the concurrency levels (a grammar, sampling or split switch
// adds them): decode speed at each concurrency, and with a grammar the mask
// time per constrained token.
void add_ablation_grammar(const json& a, std::vector<Table>& out) {
  bool any = false, grammar = false;
  for (const auto& row : a["rows"]) {
    const bool g = row.contains("grammar") && row["grammar"].is_object();
    any |= (row.contains("concurrency") && row["concurrency"].is_array()) || g;
    grammar |= g;
  }
  if (!any) return;
  Table t{grammar ? "Ablation: constrained decoding" : "Ablation: concurrency levels",
          grammar ? "per concurrency N: per-request decode tok/s P50 / aggregate tok/s (Δ "
                    "aggregate vs the row above); mask = time to get one constrained token's "
                    "mask, P50 / P99 in µs (cache hits included), in the context ladder and in "
                    "the concurrency levels"
                  : "per concurrency N: per-request decode tok/s P50 / aggregate tok/s (Δ "
                    "aggregate vs the row above)",
          {"row"},
          {}};
  const json* levels = nullptr;
  for (const auto& row : a["rows"])
    if (row.contains("concurrency") && row["concurrency"].is_array()) levels = &row["concurrency"];
  if (levels != nullptr)
    for (const auto& l : *levels)
      t.header.push_back(fmt::format("N={} tok/s", l["concurrency"].get<int64_t>()));
  if (grammar) {
    t.header.push_back("mask P50 / P99 (ladder)");
    t.header.push_back("mask P50 / P99 (concurrency)");
  }
  auto mask = [](const json& g, const char* k) -> std::string {
    if (!g.is_object() || !g.contains(k) || !g[k].is_object()) return "-";
    return fmt::format("{:.1f} / {:.1f}", num(g[k], "mask_us_p50"), num(g[k], "mask_us_p99"));
  };
  for (const auto& row : a["rows"]) {
    std::vector<std::string> cells = {str(row, "name")};
    const size_t n = levels ? levels->size() : 0;
    for (size_t i = 0; i < n; ++i) {
      if (!row.contains("concurrency") || !row["concurrency"].is_array() ||
          i >= row["concurrency"].size()) {
        cells.push_back("-");
        continue;
      }
      const json& c = row["concurrency"][i];
      std::string cell =
          fmt::format("{} / {}", f1(num(c, "stream_tok_s_p50")), f1(num(c, "aggregate_tok_s")));
      if (c.contains("delta_pct") && c["delta_pct"].is_number())
        cell += fmt::format(" ({:+.1f} %)", c["delta_pct"].get<double>());
      cells.push_back(cell);
    }
    if (grammar) {
      const json g = row.contains("grammar") ? row["grammar"] : json();
      cells.push_back(mask(g, "ladder"));
      cells.push_back(mask(g, "concurrency"));
    }
    t.rows.push_back(cells);
  }
  out.push_back(std::move(t));
}

void add_ablation(const json& r, std::vector<Table>& out) {
  if (!r.contains("ablation") || !r["ablation"].is_object()) return;
  const json& a = r["ablation"];
  if (!a.contains("rows") || a["rows"].empty()) return;
  std::vector<int64_t> ctxs;
  for (const auto& g : a["rows"][0]["ladder"]) ctxs.push_back(g["ctx"].get<int64_t>());
  std::vector<int64_t> qctx;
  if (a.contains("quality") && a["quality"].is_object() && a["quality"].contains("ctx"))
    for (const auto& c : a["quality"]["ctx"]) qctx.push_back(c.get<int64_t>());
  const bool bracket = a.value("bracket", false);
  Table t{"Ablation",
          std::string(bracket ? "bracketed: each row switches one thing on row 0's engine, which "
                                "runs again after every row; tok/s P50 per context with the "
                                "change vs the previous row and [× the mean of the row-0 runs on "
                                "either side]; "
                              : "each row switches one thing on top of the row above; tok/s P50 "
                                "per context with the change vs the previous row; ") +
              "speed gain = tok/s P50 vs row 0 at the largest context. " +
              (qctx.empty() ? str(a, "quality_note")
                            : "Quality vs row 0: KL(row 0 ‖ row) in nats, mean "
                              "(P99), over the positions with context in (C/2, C]; "
                              "top-1 = share of those positions with the same most "
                              "likely token; needle = correct / cases of the "
                              "built-in retriever with the row's KV formats; "
                              "'= row j': computes what row j computes"),
          {"row", "switch"},
          {}};
  for (int64_t c : ctxs) t.header.push_back(ctx_label(c) + " tok/s (Δ)");
  t.header.push_back("speed gain");
  t.header.push_back("speculation");
  for (int64_t c : qctx) {
    t.header.push_back("KL mean (P99) @" + ctx_label(c));
    t.header.push_back("top-1 same @" + ctx_label(c));
  }
  if (!qctx.empty())
    t.header.push_back("needle");
  else
    t.header.push_back("quality cost");
  const json& base_lad = a["rows"][0]["ladder"];
  for (const auto& row : a["rows"]) {
    std::vector<std::string> cells = {str(row, "name"), str(row, "switch")};
    const json& lad = row["ladder"];
    for (size_t i = 0; i < ctxs.size(); ++i) {
      if (i >= lad.size()) {
        cells.push_back("-");
        continue;
      }
      const json& g = lad[i];
      std::string cell = f1(num(g, "tok_s_p50"));
      if (g.contains("delta_pct") && g["delta_pct"].is_number())
        cell += fmt::format(" ({:+.1f} %)", g["delta_pct"].get<double>());
      if (g.contains("vs_bracket") && g["vs_bracket"].is_number())
        cell += fmt::format(" [×{:.2f}]", g["vs_bracket"].get<double>());
      cells.push_back(cell);
    }
    const size_t last = std::min(lad.size(), base_lad.size());
    const double b = last ? num(base_lad[last - 1], "tok_s_p50") : 0.0;
    cells.push_back(b > 0 ? fmt::format("{:+.1f} % @{}",
                                        100.0 * (num(lad[last - 1], "tok_s_p50") / b - 1.0),
                                        ctx_label(lad[last - 1]["ctx"].get<int64_t>()))
                          : "-");
    cells.push_back(spec_cell(row));
    const json q = row.contains("quality") ? row["quality"] : json();
    for (int64_t c : qctx) {
      cells.push_back(quality_cell(q, c, false));
      cells.push_back(quality_cell(q, c, true));
    }
    if (!qctx.empty())
      cells.push_back(needle_cell(q));
    else
      cells.push_back(q.is_object() && q.contains("skipped")
                          ? "not measured (" + str(q, "skipped") + ")"
                          : "not measured");
    t.rows.push_back(std::move(cells));
  }
  out.push_back(std::move(t));
}

// Over ranks (--ablate split=…): which layout wins a read-heavy and a
// write-heavy workload, with every layout's figure.
void add_split_verdict(const json& r, std::vector<Table>& out) {
  if (!r.contains("ablation") || !r["ablation"].is_object()) return;
  const json& a = r["ablation"];
  if (!a.contains("split_verdict") || !a["split_verdict"].is_object()) return;
  Table t{"Split verdict",
          "the layout of the same ranks that wins each kind of work: read-heavy (long "
          "generation) by decode speed, write-heavy (long prompts, compaction) by prefill speed, "
          "at the deepest context every row measured; one run each, on loopback (not a network)",
          {"workload", "winner", "measured by", "every row"},
          {}};
  for (const auto& [key, label] : {std::pair{"read_heavy", "read-heavy (generation)"},
                                   std::pair{"write_heavy", "write-heavy (prompts)"}}) {
    if (!a["split_verdict"].contains(key)) continue;
    const json& v = a["split_verdict"][key];
    std::string all;
    for (const auto& c : v["rows"])
      all += (all.empty() ? "" : "; ") +
             fmt::format("{} ({}) {}", str(c, "row"), str(c, "layout"), f1(num(c, "value")));
    std::string win = fmt::format("{} ({})", str(v["winner"], "layout"), str(v["winner"], "row"));
    if (v.contains("margin_pct") && v["margin_pct"].is_number())
      win +=
          fmt::format(", {:+.1f} % over {}{}", v["margin_pct"].get<double>(), str(v, "runner_up"),
                      v.value("close", false) ? " — close: within 5 %, run again" : "");
    t.rows.push_back({label, win, str(v, "by"), all});
  }
  if (!t.rows.empty()) out.push_back(std::move(t));
}

// The soak's verdict, its figures and every sample (bench/soak_verdict.h).
void add_soak(const json& r, std::vector<Table>& out) {
  if (!r.contains("soak") || !r["soak"].is_object()) return;
  const json& k = r["soak"];
  const bool pass = k.value("pass", false);
  Table v{"Soak verdict",
          pass ? "PASS: no check failed." : "FAIL: see the checks marked fail.",
          {"check", "result", "detail"},
          {}};
  for (const auto& c : k["checks"])
    v.rows.push_back({str(c, "name"), str(c, "status"), str(c, "detail")});
  out.push_back(std::move(v));
  Table f{"Soak figures", "", {"figure", "value"}, {}};
  for (const char* key :
       {"duration_s", "requests", "errors", "errors_5xx", "pages_leaked", "rss_drift_pct_per_h",
        "throughput_drift_pct", "deterministic_ok", "outcomes", "prompt_tokens", "idle"}) {
    if (!k.contains(key)) continue;
    const json& x = k[key];
    f.rows.push_back({key, x.is_null()           ? std::string("not measured")
                           : x.is_number_float() ? fmt::format("{:.3g}", x.get<double>())
                                                 : x.dump()});
  }
  out.push_back(std::move(f));
  Table s{"Soak samples",
          "One row per sample interval; tok/s counts visible tokens received in the interval.",
          {"t (s)", "RSS (MiB)", "KV pages used", "KV pages cached", "queued", "running", "tok/s",
           "requests", "errors", "burst"},
          {}};
  const auto gauge = [](const json& x, const char* key) {
    const double v = num(x, key, -1);
    return v < 0 ? std::string("-") : fmt::format("{:.0f}", v);
  };
  for (const auto& x : k["samples"]) {
    const double rss = num(x, "rss_bytes", -1);
    s.rows.push_back({f1(num(x, "t_s")), rss < 0 ? std::string("-") : mib(rss),
                      gauge(x, "kv_pages_used"), gauge(x, "kv_pages_cached"), gauge(x, "queue"),
                      gauge(x, "running"), f1(num(x, "tok_s")), str(x, "requests"),
                      str(x, "errors"), x.value("burst", false) ? "yes" : ""});
  }
  out.push_back(std::move(s));
}

void add_metrics(const json& r, std::vector<Table>& out) {
  if (!r.contains("metrics") || !r["metrics"].is_object()) return;
  Table t{"Metric definitions", "", {"metric", "formula"}, {}};
  for (const auto& [k, v] : r["metrics"].items()) t.rows.push_back({k, v.get<std::string>()});
  out.push_back(std::move(t));
}

std::string md_cell(std::string s) {
  std::string o;
  for (char ch : s) {
    if (ch == '|')
      o += "\\|";
    else if (ch == '\n')
      o += ' ';
    else
      o += ch;
  }
  return o;
}

}  // namespace

std::vector<Table> report_tables(const json& r) {
  std::vector<Table> out;
  add_soak(r, out);
  add_ladder(r, out);
  add_prefill(r, out);
  add_verify_curve(r, out);
  add_vision(r, out);
  add_concurrency(r, out);
  add_ablation(r, out);
  add_split_verdict(r, out);
  if (r.contains("ablation") && r["ablation"].is_object() && r["ablation"].contains("rows"))
    add_ablation_grammar(r["ablation"], out);
  add_machine(r, out);
  add_conditions(r, out);
  add_metrics(r, out);
  return out;
}

std::string render_markdown(const json& r) {
  std::string s = "# sustain bench report\n\n";
  s += fmt::format("Created {} by `{}`.\n\n", str(r, "created_utc"), str(r, "command_line"));
  if (r.contains("notes") && !r["notes"].empty()) {
    for (const auto& n : r["notes"]) s += "- " + n.get<std::string>() + "\n";
    s += "\n";
  }
  for (const Table& t : report_tables(r)) {
    s += "## " + t.title + "\n\n";
    if (!t.note.empty()) s += t.note + "\n\n";
    s += "|";
    for (const auto& h : t.header) s += fmt::format(" {} |", md_cell(h));
    s += "\n|";
    for (size_t i = 0; i < t.header.size(); ++i) s += "---|";
    s += "\n";
    for (const auto& row : t.rows) {
      s += "|";
      for (const auto& c : row) s += fmt::format(" {} |", md_cell(c));
      s += "\n";
    }
    s += "\n";
  }
  return s;
}

namespace {

Status need(const json& j, const std::string& path, const char* key, json::value_t type) {
  if (!j.is_object() || !j.contains(key))
    return error(Code::kInvalidArgument, "report: missing field {}.{}", path, key);
  const json& v = j[key];
  const bool ok = type == json::value_t::number_float      ? v.is_number()
                  : type == json::value_t::number_unsigned ? v.is_number_integer()
                                                           : v.type() == type;
  if (!ok)
    return error(Code::kInvalidArgument, "report: field {}.{} has type {}, expected {}", path, key,
                 v.type_name(), json(type).type_name());
  return Status::ok();
}

}  // namespace

Status validate_report(const json& r) {
  using V = json::value_t;
  SUSTAIN_TRY(need(r, "", "schema", V::string));
  if (r["schema"] != kReportSchema)
    return error(Code::kInvalidArgument, "report: schema is '{}', expected '{}'", str(r, "schema"),
                 kReportSchema);
  SUSTAIN_TRY(need(r, "", "schema_version", V::number_unsigned));
  SUSTAIN_TRY(need(r, "", "created_utc", V::string));
  SUSTAIN_TRY(need(r, "", "conditions", V::object));
  SUSTAIN_TRY(need(r, "", "metrics", V::object));
  SUSTAIN_TRY(need(r, "", "ladder", V::array));
  const json& c = r["conditions"];
  for (const char* g : {"target", "machine", "build", "workload", "sampler"})
    SUSTAIN_TRY(need(c, "conditions", g, V::object));
  const bool in_process = c["target"].value("kind", "") == "in-process";
  if (in_process) {
    for (const char* g : {"model", "kv", "engine"})
      SUSTAIN_TRY(need(c, "conditions", g, V::object));
    for (const char* k : {"arch", "name", "path", "tensor_formats"})
      if (!c["model"].contains(k))
        return error(Code::kInvalidArgument, "report: missing field conditions.model.{}", k);
    SUSTAIN_TRY(need(c["model"], "conditions.model", "parameters", V::number_unsigned));
    SUSTAIN_TRY(need(c["kv"], "conditions.kv", "k_type", V::string));
    SUSTAIN_TRY(need(c["kv"], "conditions.kv", "v_type", V::string));
    SUSTAIN_TRY(need(c["engine"], "conditions.engine", "threads", V::number_unsigned));
    SUSTAIN_TRY(need(c["engine"], "conditions.engine", "batch_tokens", V::number_unsigned));
  }
  for (const char* k : {"cpu_model", "features"})
    if (!c["machine"].contains(k))
      return error(Code::kInvalidArgument, "report: missing field conditions.machine.{}", k);
  for (const char* k : {"git_commit", "build_type", "version"})
    SUSTAIN_TRY(need(c["build"], "conditions.build", k, V::string));
  for (size_t i = 0; i < r["ladder"].size(); ++i) {
    const json& g = r["ladder"][i];
    const std::string p = fmt::format("ladder[{}]", i);
    SUSTAIN_TRY(need(g, p, "ctx", V::number_unsigned));
    SUSTAIN_TRY(need(g, p, "decode", V::object));
    for (const char* k : {"tok_s_p50", "tok_s_p95", "tpot_ms_p50", "tpot_ms_p95", "tpot_ms_p99"})
      SUSTAIN_TRY(need(g["decode"], p + ".decode", k, V::number_float));
    SUSTAIN_TRY(need(g["decode"], p + ".decode", "samples_ms", V::array));
    SUSTAIN_TRY(need(g, p, "prefill", V::object));
    for (const char* k : {"tok_s", "ttft_ms"})
      SUSTAIN_TRY(need(g["prefill"], p + ".prefill", k, V::number_float));
    SUSTAIN_TRY(need(g, p, "kv_bytes", V::number_unsigned));
    SUSTAIN_TRY(need(g, p, "peak_rss_bytes", V::number_unsigned));
    SUSTAIN_TRY(need(g, p, "bound", V::object));
    for (const char* k : {"bandwidth_tok_s", "compute_tok_s"})
      SUSTAIN_TRY(need(g["bound"], p + ".bound", k, V::number_float));
  }
  if (r.contains("ablation") && !r["ablation"].is_null()) {
    SUSTAIN_TRY(need(r["ablation"], "ablation", "rows", V::array));
    for (size_t i = 0; i < r["ablation"]["rows"].size(); ++i) {
      const json& row = r["ablation"]["rows"][i];
      const std::string p = fmt::format("ablation.rows[{}]", i);
      SUSTAIN_TRY(need(row, p, "ladder", V::array));
      if (!row.contains("quality") || row["quality"].is_null()) continue;
      SUSTAIN_TRY(need(row, p, "quality", V::object));
      const json& q = row["quality"];
      if (q.contains("skipped")) SUSTAIN_TRY(need(q, p + ".quality", "skipped", V::string));
      if (!q.contains("kl")) continue;
      SUSTAIN_TRY(need(q, p + ".quality", "kl", V::array));
      for (size_t k = 0; k < q["kl"].size(); ++k) {
        const json& c = q["kl"][k];
        const std::string pk = fmt::format("{}.quality.kl[{}]", p, k);
        SUSTAIN_TRY(need(c, pk, "ctx", V::number_unsigned));
        if (c.contains("skipped")) continue;
        for (const char* f : {"kl_mean", "kl_p99", "kl_max", "same_top1"})
          SUSTAIN_TRY(need(c, pk, f, V::number_float));
      }
    }
  }
  if (r.contains("soak") && !r["soak"].is_null()) {
    const json& k = r["soak"];
    SUSTAIN_TRY(need(r, "", "soak", V::object));
    SUSTAIN_TRY(need(k, "soak", "duration_s", V::number_float));
    SUSTAIN_TRY(need(k, "soak", "requests", V::number_unsigned));
    SUSTAIN_TRY(need(k, "soak", "errors", V::object));
    SUSTAIN_TRY(need(k, "soak", "errors_5xx", V::number_unsigned));
    SUSTAIN_TRY(need(k, "soak", "deterministic_ok", V::boolean));
    SUSTAIN_TRY(need(k, "soak", "pass", V::boolean));
    SUSTAIN_TRY(need(k, "soak", "checks", V::array));
    SUSTAIN_TRY(need(k, "soak", "samples", V::array));
    // Null when the run could not measure them (no /metrics, too few samples).
    for (const char* f : {"pages_leaked", "rss_drift_pct_per_h", "throughput_drift_pct"})
      if (!k.contains(f) || !(k[f].is_null() || k[f].is_number()))
        return error(Code::kInvalidArgument, "report: field soak.{} must be a number or null", f);
  }
  if (r.contains("concurrency") && !r["concurrency"].is_null()) {
    SUSTAIN_TRY(need(r["concurrency"], "concurrency", "levels", V::array));
    for (size_t i = 0; i < r["concurrency"]["levels"].size(); ++i) {
      const json& l = r["concurrency"]["levels"][i];
      const std::string p = fmt::format("concurrency.levels[{}]", i);
      for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "stream_tok_s"})
        SUSTAIN_TRY(need(l, p, k, V::object));
      SUSTAIN_TRY(need(l, p, "aggregate_tok_s", V::number_float));
      SUSTAIN_TRY(need(l, p, "samples", V::array));
    }
  }
  return Status::ok();
}

Status write_reports(const json& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error(Code::kIo, "cannot create report directory '{}': {}", dir, ec.message());
  const std::pair<std::string, std::string> files[] = {
      {"report.json", report.dump(2) + "\n"},
      {"report.md", render_markdown(report)},
      {"report.html", render_html(report)},
  };
  for (const auto& [name, text] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream f(path, std::ios::binary);
    f << text;
    f.close();
    if (!f) return error(Code::kIo, "cannot write '{}'", path);
  }
  return Status::ok();
}

}  // namespace sustain::bench

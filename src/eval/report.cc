#include "eval/report.h"
#include "base/html.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sustain::eval {
namespace {

using Json = nlohmann::ordered_json;

Json conditions_json(const Conditions& c) {
  Json j;
  j["model"] = c.model;
  if (!c.base_model.empty()) j["base_model"] = c.base_model;
  j["input"] = c.input;
  j["threads"] = c.threads;
  j["batch"] = c.batch;
  j["commit"] = c.commit;
  return j;
}

std::string depth_str(double d) { return fmt::format("{}", d); }

std::set<int64_t> contexts(const std::vector<NeedleRun>& runs) {
  std::set<int64_t> s;
  for (const auto& r : runs)
    for (const auto& [k, v] : r.table.cells) s.insert(k.first);
  return s;
}

std::set<double> depths(const std::vector<NeedleRun>& runs, int64_t ctx) {
  std::set<double> s;
  for (const auto& r : runs)
    for (const auto& [k, v] : r.table.cells)
      if (k.first == ctx) s.insert(k.second);
  return s;
}

Json cells_json(const NeedleTable& t) {
  Json cells = Json::array();
  for (const auto& [k, v] : t.cells)
    cells.push_back({{"ctx", k.first}, {"depth", k.second}, {"correct", v.first}, {"total", v.second}});
  return cells;
}


}  // namespace

std::string needle_json(const Conditions& c, const std::vector<NeedleRun>& runs, bool per_case) {
  Json j;
  j["kind"] = "needle";
  j["conditions"] = conditions_json(c);
  NeedleTable sum;
  Json cfgs = Json::array();
  for (const auto& r : runs) {
    Json x;
    x["cache_type_k"] = r.cache_k;
    x["cache_type_v"] = r.cache_v;
    x["correct"] = r.table.correct;
    x["total"] = r.table.total;
    x["seconds"] = r.seconds;
    x["cells"] = cells_json(r.table);
    if (per_case) {
      Json cases = Json::array();
      for (size_t i = 0; i < r.results.size(); ++i) {
        const NeedleResult& res = r.results[i];
        if (i < r.text.size()) {
          const TextNeedleScored& t = r.text[i];
          cases.push_back({{"tag", r.tags[i]},
                           {"key", t.key},
                           {"value", t.value},
                           {"phrasing", t.phrasing},
                           {"generated", t.generated},
                           {"correct", res.correct},
                           {"seconds", res.seconds}});
          continue;
        }
        cases.push_back({{"tag", r.tags[i]},
                         {"answer", r.answers[i]},
                         {"predicted", res.predicted},
                         {"correct", res.correct},
                         {"p_answer", res.p_answer},
                         {"logit_margin", res.logit_margin}});
      }
      x["cases"] = std::move(cases);
    }
    cfgs.push_back(std::move(x));
    for (const auto& [k, v] : r.table.cells) {
      auto& cell = sum.cells[k];
      cell.first += v.first;
      cell.second += v.second;
    }
    sum.correct += r.table.correct;
    sum.total += r.table.total;
  }
  // Totals over every configuration first, so a script can check one number.
  j["correct"] = sum.correct;
  j["total"] = sum.total;
  j["cells"] = cells_json(sum);
  j["configs"] = std::move(cfgs);
  // Generated text may end inside a UTF-8 character: replace, never throw.
  return j.dump(1, ' ', false, Json::error_handler_t::replace);
}

std::string needle_markdown(const Conditions& c, const std::vector<NeedleRun>& runs) {
  std::string o = fmt::format("# Needle in a haystack\n\nmodel `{}`, input {}, {} threads\n",
                              c.model, c.input, c.threads);
  for (int64_t ctx : contexts(runs)) {
    const auto ds = depths(runs, ctx);
    o += fmt::format("\n**ctx = {}** (correct/trials per needle depth)\n\n| KV (K/V) |", ctx);
    for (double d : ds) o += fmt::format(" {} |", depth_str(d));
    o += " total |\n|---|";
    for (size_t i = 0; i <= ds.size(); ++i) o += "---|";
    o += "\n";
    for (const auto& r : runs) {
      o += fmt::format("| {}/{} |", r.cache_k, r.cache_v);
      int ok = 0, n = 0;
      for (double d : ds) {
        auto it = r.table.cells.find({ctx, d});
        if (it == r.table.cells.end()) {
          o += " - |";
          continue;
        }
        o += fmt::format(" {}/{} |", it->second.first, it->second.second);
        ok += it->second.first;
        n += it->second.second;
      }
      o += fmt::format(" {}/{} |\n", ok, n);
    }
  }
  o += "\n| KV (K/V) | correct | total | seconds |\n|---|---|---|---|\n";
  for (const auto& r : runs)
    o += fmt::format("| {}/{} | {} | {} | {:.1f} |\n", r.cache_k, r.cache_v, r.table.correct,
                     r.table.total, r.seconds);
  return o;
}

std::string needle_html(const Conditions& c, const std::vector<NeedleRun>& runs) {
  std::string o =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>sustain eval needle</title>"
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
      "td,th{border:1px solid #ccc;padding:4px 8px;text-align:center;font-size:13px}"
      "th{background:#f4f4f4}.k{font-size:11px;color:#555}</style></head><body>";
  o += fmt::format("<h1>Needle in a haystack</h1><p>model <code>{}</code>, input {}, {} threads, "
                   "build {}</p><p class=\"k\">Cell color: accuracy (red 0% → green 100%); "
                   "text: correct/trials.</p>",
                   html_escape(c.model), html_escape(c.input), c.threads, html_escape(c.commit));
  const auto ctxs = contexts(runs);
  for (const auto& r : runs) {
    o += fmt::format("<h2>K {} / V {} — {}/{}</h2><table><tr><th>ctx \\ depth</th>",
                     html_escape(r.cache_k), html_escape(r.cache_v), r.table.correct, r.table.total);
    std::set<double> all_d;
    for (const auto& [k, v] : r.table.cells) all_d.insert(k.second);
    for (double d : all_d) o += "<th>" + depth_str(d) + "</th>";
    o += "</tr>";
    for (int64_t ctx : ctxs) {
      o += fmt::format("<tr><th>{}</th>", ctx);
      for (double d : all_d) {
        auto it = r.table.cells.find({ctx, d});
        if (it == r.table.cells.end()) {
          o += "<td>-</td>";
          continue;
        }
        const double acc = it->second.second ? double(it->second.first) / it->second.second : 0.0;
        // Hue 0 (red) to 120 (green).
        o += fmt::format("<td style=\"background:hsl({:.0f},70%,75%)\">{}/{}</td>", 120.0 * acc,
                         it->second.first, it->second.second);
      }
      o += "</tr>";
    }
    o += "</table>";
  }
  o += "</body></html>\n";
  return o;
}

std::string kl_json(const Conditions& c, const std::vector<KlRun>& runs) {
  Json j;
  j["kind"] = "kl";
  j["conditions"] = conditions_json(c);
  Json arr = Json::array();
  for (const auto& r : runs) {
    Json x;
    x["base"] = r.base_label;
    x["test"] = r.test_label;
    x["from_saved_baseline"] = r.from_saved;
    if (r.from_saved) x["saved_top_k"] = r.top_k;
    x["seconds"] = r.seconds;
    Json bs = Json::array();
    for (const auto& b : r.buckets) {
      Json y;
      y["lo"] = b.lo;
      y["hi"] = b.hi;
      y["n"] = b.n;
      y["kl"] = {{"mean", b.kl.mean}, {"median", b.kl.median}, {"p95", b.kl.p95},
                 {"p99", b.kl.p99},   {"max", b.kl.max}};
      if (r.from_saved) y["kl_upper_mean"] = b.kl_high_mean;
      y["same_top1"] = b.same_top1;
      y["dp"] = {{"mean", b.dp_mean}, {"rms", b.dp_rms}, {"p01", b.dp_p01}, {"p05", b.dp_p05},
                 {"p50", b.dp_p50},   {"p95", b.dp_p95}, {"p99", b.dp_p99}};
      y["ppl_base"] = b.ppl_base;
      y["ppl_test"] = b.ppl_test;
      y["ppl_ratio"] = b.ppl_ratio;
      bs.push_back(std::move(y));
    }
    x["buckets"] = std::move(bs);
    arr.push_back(std::move(x));
  }
  j["runs"] = std::move(arr);
  return j.dump(1);
}

std::string kl_markdown(const Conditions& c, const std::vector<KlRun>& runs) {
  std::string o = fmt::format("# KL divergence against a baseline\n\nmodel `{}`{}, input {}, {} threads\n",
                              c.model, c.base_model.empty() ? "" : fmt::format(", baseline model `{}`", c.base_model),
                              c.input, c.threads);
  for (const auto& r : runs) {
    o += fmt::format("\n**{} vs {}**{}\n\n", r.test_label, r.base_label,
                     r.from_saved ? fmt::format(" (saved baseline, top-{}: KL is a lower bound, "
                                                "'KL ≤' the upper bound)", r.top_k)
                                  : "");
    o += "| positions | n | KL mean | median | P95 | P99 | max |";
    if (r.from_saved) o += " KL ≤ |";
    o += " same top-1 | Δp mean | Δp P1 | Δp P99 | PPL base | PPL test | ratio |\n|---|---|---|---|---|---|---|";
    if (r.from_saved) o += "---|";
    o += "---|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < r.buckets.size(); ++i) {
      const auto& b = r.buckets[i];
      const bool all = i + 1 == r.buckets.size();
      o += fmt::format("| {} | {} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} |",
                       all ? fmt::format("all ({}–{})", b.lo, b.hi) : fmt::format("{}–{}", b.lo, b.hi),
                       b.n, b.kl.mean, b.kl.median, b.kl.p95, b.kl.p99, b.kl.max);
      if (r.from_saved) o += fmt::format(" {:.3g} |", b.kl_high_mean);
      o += fmt::format(" {:.2f}% | {:+.3g}% | {:+.3g}% | {:+.3g}% | {:.4g} | {:.4g} | {:.4f} |\n",
                       100.0 * b.same_top1, 100.0 * b.dp_mean, 100.0 * b.dp_p01,
                       100.0 * b.dp_p99, b.ppl_base, b.ppl_test, b.ppl_ratio);
    }
  }
  return o;
}

}  // namespace sustain::eval

// report.json → a self-contained report.html: inline CSS, SVG charts drawn
// here (no script, nothing fetched), then the same tables as report.md.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/html.h"
#include "bench/report.h"
#include "bench/verify_curve.h"

namespace sustain::bench {

using nlohmann::json;

namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};


double num(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

struct Series {
  explicit Series(std::string n, bool d = false) : name(std::move(n)), dashed(d) {}
  std::string name;
  std::vector<std::pair<double, double>> pts;
  bool dashed = false;
};

// A round number ≥ v for the top of an axis.
double nice_ceil(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

std::string fmt_tick(double v) {
  if (v >= 1024 && std::fmod(v, 1024) == 0) return fmt::format("{}K", v / 1024);
  if (std::fabs(v) >= 100 || v == std::floor(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:.2g}", v);
}

constexpr double kW = 680, kH = 360, kL = 64, kR = 170, kT = 34, kB = 48;

// Line chart; log2 x-axis when log_x; y from 0 to a round number above the
// largest value of the series marked as data (bounds above it are clipped,
// so a far-away roofline does not flatten the measured curve).
std::string line_chart(int id, const std::string& title, const std::string& xlabel,
                       const std::string& ylabel, const std::vector<Series>& series, bool log_x,
                       double y_top_hint) {
  double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
  for (const auto& s : series)
    for (const auto& [x, y] : s.pts) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymax = std::max(ymax, y);
    }
  if (!(xmax >= xmin)) return "";
  if (y_top_hint > 0) ymax = std::min(ymax, y_top_hint);
  const double ytop = nice_ceil(ymax * 1.05);
  const auto tx = [&](double x) {
    double f = 0.5;
    if (xmax > xmin)
      f = log_x ? (std::log2(x) - std::log2(xmin)) / (std::log2(xmax) - std::log2(xmin))
                : (x - xmin) / (xmax - xmin);
    return kL + f * (kW - kL - kR);
  };
  const auto ty = [&](double y) { return kH - kB - (y / ytop) * (kH - kT - kB); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"{}\">\n<defs><clipPath id=\"c{}\"><rect x=\"{}\" y=\"{}\" "
      "width=\"{}\" height=\"{}\"/></clipPath></defs>\n",
      kW, kH, kW, kH, html_escape(title), id, kL, kT, kW - kL - kR, kH - kT - kB);
  s += fmt::format("<text x=\"{}\" y=\"20\" class=\"t\">{}</text>\n", kL, html_escape(title));
  // Axes, grid and ticks.
  for (int i = 0; i <= 5; ++i) {
    const double v = ytop * i / 5, y = ty(v);
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" class=\"g\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" class=\"yt\">{}</text>\n",
        kL, y, kW - kR, y, kL - 6, y + 4, fmt_tick(v));
  }
  std::vector<double> xt;
  for (const auto& se : series)
    for (const auto& p : se.pts) xt.push_back(p.first);
  std::sort(xt.begin(), xt.end());
  xt.erase(std::unique(xt.begin(), xt.end()), xt.end());
  double last_x = -1e9;
  for (double v : xt) {
    const double x = tx(v);
    if (x - last_x < 28) continue;  // keep labels apart
    last_x = x;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"xt\">{}</text>\n", x, kH - kB + 16,
                     fmt_tick(v));
  }
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"a\"/>\n", kL, kH - kB,
                   kW - kR, kH - kB);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"a\"/>\n", kL, kT, kL,
                   kH - kB);
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xl\">{}</text>\n", (kL + kW - kR) / 2, kH - 10,
                   html_escape(xlabel));
  s += fmt::format(
      "<text x=\"14\" y=\"{}\" class=\"yl\" transform=\"rotate(-90 14 {})\">{}</text>\n",
      (kT + kH - kB) / 2, (kT + kH - kB) / 2, html_escape(ylabel));
  // Series, clipped to the plot area, with a legend on the right.
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& se = series[i];
    const char* color = kColors[i % 8];
    std::string pts;
    for (const auto& [x, y] : se.pts)
      if (std::isfinite(x) && std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", tx(x), ty(y));
    s += fmt::format(
        "<g clip-path=\"url(#c{})\"><polyline points=\"{}\" fill=\"none\" "
        "stroke=\"{}\" stroke-width=\"2\"{}/>",
        id, pts, color, se.dashed ? " stroke-dasharray=\"6 4\"" : "");
    if (!se.dashed)
      for (const auto& [x, y] : se.pts)
        if (std::isfinite(x) && std::isfinite(y))
          s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", tx(x),
                           ty(y), color);
    s += "</g>\n";
    const double ly = kT + 8 + 18.0 * i;
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
        "stroke-width=\"2\"{}/><text x=\"{}\" y=\"{}\" class=\"lg\">{}</text>\n",
        kW - kR + 10, ly, kW - kR + 30, ly, color, se.dashed ? " stroke-dasharray=\"6 4\"" : "",
        kW - kR + 34, ly + 4, html_escape(se.name));
  }
  s += "</svg>\n";
  return s;
}

// Grouped bars: one group per category, one bar per series.
std::string bar_chart(const std::string& title, const std::string& ylabel,
                      const std::vector<std::string>& groups, const std::vector<Series>& series) {
  double ymax = 0;
  for (const auto& se : series)
    for (const auto& p : se.pts) ymax = std::max(ymax, std::isfinite(p.second) ? p.second : 0);
  if (groups.empty() || series.empty()) return "";
  const double ytop = nice_ceil(ymax * 1.05);
  const double pw = kW - kL - kR, gw = pw / groups.size();
  const double bw = gw * 0.8 / series.size();
  const auto ty = [&](double y) { return kH - kB - (y / ytop) * (kH - kT - kB); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"{}\">\n<text x=\"{}\" y=\"20\" class=\"t\">{}</text>\n",
      kW, kH, kW, kH, html_escape(title), kL, html_escape(title));
  for (int i = 0; i <= 5; ++i) {
    const double v = ytop * i / 5, y = ty(v);
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" class=\"g\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" class=\"yt\">{}</text>\n",
        kL, y, kW - kR, y, kL - 6, y + 4, fmt_tick(v));
  }
  for (size_t g = 0; g < groups.size(); ++g)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"xt\">{}</text>\n", kL + gw * (g + 0.5),
                     kH - kB + 16, html_escape(groups[g]));
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % 8];
    for (const auto& [g, y] : series[i].pts) {
      if (!std::isfinite(y) || g < 0 || g >= groups.size()) continue;
      const double x = kL + gw * g + gw * 0.1 + bw * i;
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{}: {:.1f}</title></rect>\n",
          x, ty(y), bw, kH - kB - ty(y), color, html_escape(series[i].name), y);
    }
    const double ly = kT + 8 + 18.0 * i;
    s += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\" class=\"lg\">{}</text>\n",
        kW - kR + 10, ly - 5, color, kW - kR + 30, ly + 4, html_escape(series[i].name));
  }
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"a\"/>\n", kL, kH - kB,
                   kW - kR, kH - kB);
  s += fmt::format(
      "<text x=\"14\" y=\"{}\" class=\"yl\" transform=\"rotate(-90 14 {})\">{}</text>\n",
      (kT + kH - kB) / 2, (kT + kH - kB) / 2, html_escape(ylabel));
  s += "</svg>\n";
  return s;
}

std::string ladder_charts(const json& r) {
  if (!r.contains("ladder") || r["ladder"].empty()) return "";
  Series meas("measured P50"), p95("measured P95"), bw{"bandwidth bound", true},
      cb("compute bound", true), seed("seed model", true);
  Series t50("TPOT P50"), t95("TPOT P95"), t99("TPOT P99");
  double data_max = 0;
  for (const auto& g : r["ladder"]) {
    const double x = g["ctx"].get<double>();
    const json& d = g["decode"];
    meas.pts.push_back({x, num(d, "tok_s_p50")});
    p95.pts.push_back({x, num(d, "tok_s_p95")});
    bw.pts.push_back({x, num(g["bound"], "bandwidth_tok_s")});
    cb.pts.push_back({x, num(g["bound"], "compute_tok_s")});
    seed.pts.push_back({x, num(g, "seed_model_tok_s")});
    t50.pts.push_back({x, num(d, "tpot_ms_p50")});
    t95.pts.push_back({x, num(d, "tpot_ms_p95")});
    t99.pts.push_back({x, num(d, "tpot_ms_p99")});
    for (double v :
         {num(d, "tok_s_p50"), num(g["bound"], "bandwidth_tok_s"), num(g, "seed_model_tok_s")})
      if (std::isfinite(v)) data_max = std::max(data_max, v);
  }
  std::string s =
      line_chart(1, "Decode speed vs context, with the roofline and the seed model",
                 "context (tokens)", "tok/s", {meas, p95, bw, cb, seed}, true, data_max);
  s += line_chart(2, "Time per output token vs context", "context (tokens)", "ms", {t50, t95, t99},
                  true, 0);
  return s;
}

std::string prefill_chart(const json& r) {
  if (!r.contains("prefill") || !r["prefill"].contains("points") || r["prefill"]["points"].empty())
    return "";
  Series ladder("prompt tok/s (ladder)"), full("prompt tok/s (from empty)");
  for (const auto& q : r["prefill"]["points"]) {
    auto& se = q.value("source", "") == "ladder" ? ladder : full;
    se.pts.push_back({q["ctx"].get<double>(), num(q, "tok_s")});
  }
  std::vector<Series> ss;
  if (!ladder.pts.empty()) ss.push_back(ladder);
  if (!full.pts.empty()) ss.push_back(full);
  return line_chart(3, "Prefill gradient", "context reached (tokens)", "prompt tok/s", ss, true, 0);
}

// The verify-cost curve: each k's step cost against the decode step, and
// the speedup it implies at each acceptance α (the best k at that α), per
// depth, with the break-even line.
std::string verify_charts(const json& r) {
  if (!r.contains("verify_curve") || !r["verify_curve"].is_object()) return "";
  const json& v = r["verify_curve"];
  if (!v.contains("points") || v["points"].empty()) return "";
  std::vector<int64_t> ks;
  for (const auto& k : v["ks"]) ks.push_back(k.get<int64_t>());
  std::vector<Series> cost, gain;
  for (const auto& p : v["points"]) {
    const std::string name = "depth " + fmt_tick(p["depth"].get<double>());
    Series c(name), g(name);
    for (size_t i = 0; i < ks.size() && i < p["ratio"].size(); ++i)
      c.pts.push_back({static_cast<double>(ks[i]), p["ratio"][i].get<double>()});
    for (int a100 = 10; a100 <= 95; a100 += 5) {
      const double a = a100 / 100.0;
      double best = 0;
      for (size_t i = 0; i < ks.size() && i < p["ratio"].size(); ++i) {
        const double ratio = p["ratio"][i].get<double>();
        if (ratio > 0) best = std::max(best, chain_tokens(a, ks[i]) / ratio);
      }
      g.pts.push_back({a, best});
    }
    cost.push_back(std::move(c));
    gain.push_back(std::move(g));
  }
  Series even("break-even", true);
  even.pts = {{0.1, 1.0}, {0.95, 1.0}};
  gain.push_back(even);
  std::string s = line_chart(10, "Verify step cost vs draft length", "drafted tokens k",
                             "× a decode step", cost, false, 0);
  s += line_chart(11, "Speedup implied by the verify cost at acceptance α (best k)",
                  "acceptance α per drafted token", "× decode tok/s", gain, false, 0);
  return s;
}

std::string concurrency_charts(const json& r) {
  if (!r.contains("concurrency") || !r["concurrency"].is_object() ||
      !r["concurrency"].contains("levels"))
    return "";
  Series agg("aggregate tok/s"), single("single-stream tok/s P50");
  Series ttft50("TTFT P50"), ttft95("TTFT P95"), tpot50("TPOT P50"), tpot95("TPOT P95"),
      itl99("ITL P99");
  for (const auto& l : r["concurrency"]["levels"]) {
    if (l.value("mode", "") != "fixed") continue;
    const double n = l["concurrency"].get<double>();
    agg.pts.push_back({n, num(l, "aggregate_tok_s")});
    single.pts.push_back({n, num(l["stream_tok_s"], "p50")});
    ttft50.pts.push_back({n, num(l["ttft_ms"], "p50")});
    ttft95.pts.push_back({n, num(l["ttft_ms"], "p95")});
    tpot50.pts.push_back({n, num(l["tpot_ms"], "p50")});
    tpot95.pts.push_back({n, num(l["tpot_ms"], "p95")});
    itl99.pts.push_back({n, num(l["itl_ms"], "p99")});
  }
  if (agg.pts.empty()) return "";
  std::string s = line_chart(4, "Throughput vs concurrency", "concurrent requests", "tok/s",
                             {agg, single}, true, 0);
  s += line_chart(5, "Latency percentiles vs concurrency", "concurrent requests", "ms",
                  {ttft50, ttft95, tpot50, tpot95, itl99}, true, 0);
  return s;
}

std::string ablation_chart(const json& r) {
  if (!r.contains("ablation") || !r["ablation"].is_object() || !r["ablation"].contains("rows") ||
      r["ablation"]["rows"].empty())
    return "";
  std::vector<std::string> groups;
  for (const auto& g : r["ablation"]["rows"][0]["ladder"])
    groups.push_back(fmt_tick(g["ctx"].get<double>()));
  std::vector<Series> ss;
  for (const auto& row : r["ablation"]["rows"]) {
    Series se(row.value("name", "?"));
    double gi = 0;
    for (const auto& g : row["ladder"]) se.pts.push_back({gi++, num(g, "tok_s_p50")});
    ss.push_back(se);
  }
  return bar_chart("Ablation: decode tok/s P50 per context", "tok/s", groups, ss);
}

// The soak's RSS, throughput and KV pages over time.
std::string soak_charts(const json& r) {
  if (!r.contains("soak") || !r["soak"].is_object() || !r["soak"].contains("samples")) return "";
  Series rss("server RSS"), tok("visible tok/s"), used("KV pages used"), cached("KV pages cached"),
      queued("queued");
  for (const auto& x : r["soak"]["samples"]) {
    const double t = num(x, "t_s");
    const auto gauge = [&](const char* key) {
      const double v = num(x, key);
      return v >= 0 ? v : NAN;
    };
    rss.pts.push_back({t, gauge("rss_bytes") / 1048576.0});
    tok.pts.push_back({t, num(x, "tok_s")});
    used.pts.push_back({t, gauge("kv_pages_used")});
    cached.pts.push_back({t, gauge("kv_pages_cached")});
    queued.pts.push_back({t, gauge("queue")});
  }
  if (tok.pts.empty()) return "";
  std::string s = line_chart(7, "Soak: server RSS over time", "seconds", "MiB", {rss}, false, 0);
  s += line_chart(8, "Soak: throughput over time", "seconds", "tok/s", {tok}, false, 0);
  s += line_chart(9, "Soak: KV pages and queue over time", "seconds", "pages / requests",
                  {used, cached, queued}, false, 0);
  return s;
}

}  // namespace

std::string render_html(const json& r) {
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>sustain bench report</title>\n<style>\n"
      "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}\n"
      "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}\n"
      "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
      "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\n"
      "svg{margin:0.5em 1em 1em 0;background:#fff;border:1px solid #eee}\n"
      ".t{font-size:14px;font-weight:600}.g{stroke:#e5e5e5}.a{stroke:#333}\n"
      ".yt{font-size:11px;text-anchor:end}.xt{font-size:11px;text-anchor:middle}\n"
      ".xl,.yl{font-size:12px;text-anchor:middle}.lg{font-size:11px}\n"
      ".note{color:#555;font-size:13px}\n</style></head><body>\n";
  s += "<h1>sustain bench report</h1>\n";
  s += fmt::format("<p class=\"note\">Created {} by <code>{}</code>.</p>\n",
                   html_escape(r.value("created_utc", "")), html_escape(r.value("command_line", "")));
  if (r.contains("notes") && !r["notes"].empty()) {
    s += "<ul>\n";
    for (const auto& n : r["notes"]) s += "<li>" + html_escape(n.get<std::string>()) + "</li>\n";
    s += "</ul>\n";
  }
  s += "<div>\n" + soak_charts(r) + ladder_charts(r) + prefill_chart(r) + verify_charts(r) +
       concurrency_charts(r) + ablation_chart(r) + "</div>\n";
  for (const Table& t : report_tables(r)) {
    s += "<h2>" + html_escape(t.title) + "</h2>\n";
    if (!t.note.empty()) s += "<p class=\"note\">" + html_escape(t.note) + "</p>\n";
    s += "<table><tr>";
    for (const auto& h : t.header) s += "<th>" + html_escape(h) + "</th>";
    s += "</tr>\n";
    for (const auto& row : t.rows) {
      s += "<tr>";
      for (const auto& c : row) s += "<td>" + html_escape(c) + "</td>";
      s += "</tr>\n";
    }
    s += "</table>\n";
  }
  s += "</body></html>\n";
  return s;
}

}  // namespace sustain::bench

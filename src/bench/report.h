// The bench report: one JSON document (schema in docs/bench.md, stable:
// fields are only ever added) from which report.md and report.html are
// rendered, so the three files can never disagree.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/stats.h"

namespace sustain::bench {

constexpr const char* kReportSchema = "sustain-bench-report";
constexpr int kReportSchemaVersion = 1;

// {n, mean, stddev, min, max, p50, p95, p99}, every value × scale (e.g. 1e3: s → ms).
nlohmann::json summary_json(const Summary& s, double scale = 1.0);

// The metric names and formulas every report carries (docs/bench.md).
nlohmann::json metric_definitions();

// A table as both renderers draw it.
struct Table {
  std::string title;
  std::string note;  // a sentence under the title ("" for none)
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
// The report's tables, in order: conditions, machine, ladder, prefill,
// concurrency, ablation, metric definitions (those with data).
std::vector<Table> report_tables(const nlohmann::json& report);

std::string render_markdown(const nlohmann::json& report);
// A self-contained page: inline CSS and SVG charts, no script, no network.
std::string render_html(const nlohmann::json& report);

// Checks that the fields docs/bench.md promises are present with the right
// types; kInvalidArgument naming the first missing or mistyped field.
Status validate_report(const nlohmann::json& report);

// Writes report.json, report.md and report.html into `dir` (created if
// needed). kIo naming the path on failure.
Status write_reports(const nlohmann::json& report, const std::string& dir);

}  // namespace sustain::bench

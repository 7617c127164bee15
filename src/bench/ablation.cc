#include "bench/ablation.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "bench/load.h"
#include "bench/roofline.h"
#include "bench/stats.h"
#include "engine/ranks.h"
#include "tensor/kv_names.h"

namespace sustain::bench {

using nlohmann::json;

namespace {

// Speculative decoding over the whole row (every rung): null when off.
json spec_json(const engine::Engine& e, const engine::EngineConfig& c) {
  if (!c.spec.enabled()) return nullptr;
  const engine::EngineStats st = e.stats();
  return {
      {"type", c.spec.describe()},
      // An oracle knows the answer: its rows measure what a proposer of
      // that acceptance would gain, not what any real proposer does.
      {"oracle", c.spec.uses("oracle")},
      {"gate", c.spec.gate},
      {"gate_skipped", st.spec_gate_skipped},
      {"gate_probes", st.spec_gate_probes},
      {"gate_rechecks", st.spec_gate_rechecks},
      {"gate_learning_tokens", st.spec_gate_learning_tokens},
      {"draft_max", c.spec.draft_max},
      {"mtp_depth", c.spec.uses("mtp") ? json(c.spec.mtp_depth) : json()},
      {"drafted", st.spec_draft_tokens},
      {"accepted", st.spec_accepted_tokens},
      {"steps", st.spec_steps},
      {"acceptance", st.spec_draft_tokens
                         ? static_cast<double>(st.spec_accepted_tokens) / st.spec_draft_tokens
                         : 0.0},
      {"k_mean", st.spec_steps ? static_cast<double>(st.spec_draft_tokens) / st.spec_steps : 0.0}};
}

// The P50 / P99 of mask times and how many there were: null when none.
json mask_json(const std::vector<float>& us, int64_t tokens) {
  if (us.empty()) return nullptr;
  const Summary m = summarize(std::vector<double>(us.begin(), us.end()));
  return {{"mask_us_p50", m.p50},
          {"mask_us_p99", m.p99},
          {"mask_us_mean", m.mean},
          {"masks", m.n},
          {"tokens", tokens}};
}

// Fixed concurrency levels on the row's engine (the grammar's cost with
// batching): per-request decode tok/s P50 and aggregate tok/s; the tokens
// generated go to *tokens.
Expected<json> concurrency_cells(engine::Engine& e, const AblationInput& in,
                                 const std::shared_ptr<const sampling::ConstraintFactory>& c,
                                 int32_t n_tokens, uint64_t seed, int64_t* tokens) {
  EngineTarget target(e, in.conc_prompt, n_tokens, seed, c, in.ladder.chain);
  LoadOptions lo;
  lo.concurrency.assign(in.concurrency.begin(), in.concurrency.end());
  lo.requests_per_client = in.conc_requests;
  lo.poisson_fractions.clear();
  lo.seed = seed;
  SUSTAIN_ASSIGN_OR_RETURN(std::vector<LoadLevel> levels, run_load(target, lo));
  json cells = json::array();
  for (const LoadLevel& l : levels) {
    if (l.mode != "fixed") continue;
    if (!l.error.empty()) return error(Code::kInternal, "a request failed: {}", l.error);
    *tokens += l.metrics.output_tokens;
    cells.push_back({{"concurrency", l.concurrency},
                     {"stream_tok_s_p50", l.metrics.stream_tok_s.p50},
                     {"aggregate_tok_s", l.metrics.aggregate_tok_s},
                     {"delta_pct", nullptr}});
  }
  return cells;
}

// A row over ranks: the split and what rank 0's transport did (null for a
// row in one process).
json split_json(const engine::EngineStats& st) {
  if (st.split_ranks == 0) return nullptr;
  const double steps = static_cast<double>(std::max<uint64_t>(st.steps, 1));
  return {{"mode", st.split_tensor ? "tensor" : "layer"},
          {"ranks", st.split_ranks},
          {"comm_bytes_per_step", static_cast<double>(st.comm_bytes) / steps},
          {"comm_ms_per_step", 1e3 * st.comm_seconds / steps}};
}

// Over ranks, the seed's question: which layout wins a read-heavy workload
// (long generation: decode tok/s P50 at the deepest context all rows
// measured) and which a write-heavy one (long prompts: prefill tok/s of that
// rung's new tokens). Rows are named by name and layout; null where fewer
// than two layouts ran.
json split_verdict(const json& rows) {
  std::set<std::string> layouts;
  size_t depth = SIZE_MAX;
  for (const auto& r : rows) {
    layouts.insert(r["split"].is_null() ? "one process" : r["split"]["mode"].get<std::string>());
    depth = std::min(depth, r["ladder"].size());
  }
  if (layouts.size() < 2 || depth == 0 || depth == SIZE_MAX) return nullptr;
  json out = json::object();
  for (const auto& [key, field, what] :
       {std::tuple{"read_heavy", "tok_s_p50", "decode tok/s P50"},
        std::tuple{"write_heavy", "prefill_tok_s", "prefill tok/s"}}) {
    json cand = json::array();
    int best = -1;
    double best_v = -1.0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const json& cell = rows[i]["ladder"][depth - 1];
      const json& v = cell[field];
      if (!v.is_number()) continue;
      const std::string layout = rows[i]["split"].is_null()
                                     ? "one process"
                                     : rows[i]["split"]["mode"].get<std::string>() + " split";
      cand.push_back({{"row", rows[i]["name"]}, {"layout", layout}, {"value", v}});
      if (v.get<double>() > best_v) {
        best_v = v.get<double>();
        best = static_cast<int>(cand.size()) - 1;
      }
    }
    if (best < 0) continue;
    // The margin over the best row of another layout: rows run one after
    // another, and these machines drift by tens of percent within an hour,
    // so a margin under 5 % is called close rather than a win.
    const json& w = cand[static_cast<size_t>(best)];
    double runner = -1.0;
    std::string runner_layout;
    for (const auto& c : cand)
      if (c["layout"] != w["layout"] && c["value"].get<double>() > runner) {
        runner = c["value"].get<double>();
        runner_layout = c["layout"].get<std::string>();
      }
    json margin = nullptr;
    if (runner > 0) margin = 100.0 * (best_v / runner - 1.0);
    out[key] = {{"winner", w},
                {"by", fmt::format("{} at context {}", what,
                                   rows[0]["ladder"][depth - 1]["ctx"].get<int64_t>())},
                {"runner_up", runner_layout},
                {"margin_pct", margin},
                {"close", margin.is_number() && margin.get<double>() < 5.0},
                {"rows", cand}};
  }
  return out;
}

}  // namespace

std::string lost_path_note(const std::string& what, const engine::EngineConfig& c,
                           const json& cells) {
  if (!c.spec.uses("oracle") || c.spec.gate) return "";
  std::string lost;
  for (const json& cell : cells) {
    const json& s = cell["spec"];
    if (!s.is_object() || s["decoded_tokens"].get<int64_t>() == 0) continue;
    const double share = s["verify_token_share"].get<double>();
    if (share < 0.5)
      lost += fmt::format("{}ctx {} ({:.0f} % of tokens from verify steps)",
                          lost.empty() ? "" : ", ", cell["ctx"].get<int64_t>(), 100.0 * share);
  }
  if (lost.empty()) return "";
  return fmt::format(
      "{}: the oracle lost its first pass's path at {}: those cells measure "
      "mostly plain decode steps, not the oracle's acceptance{}",
      what, lost,
      c.batch_invariant ? ""
                        : "; without --batch-invariant a verify row or a prompt chunked "
                          "differently is not bit-identical to the first pass, and greedy "
                          "near-ties flip (docs/speculative.md); rerun with --batch-invariant");
}

Status apply_switch(const std::string& spec, AblationRow& row) {
  std::stringstream ss(spec);
  std::string kv;
  bool any = false;
  while (std::getline(ss, kv, ',')) {
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      return error(Code::kInvalidArgument,
                   "--ablate '{}': '{}' is not key=value (keys: ctk, ctv, kv, layout, prefix, "
                   "batch, ubatch, threads, repack, sampling, spec, draft, mtp_depth, gate, "
                   "draft_model, model, grammar, split)",
                   spec, kv);
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    any = true;
    if (k == "ctk" || k == "ctv" || k == "kv") {
      SUSTAIN_ASSIGN_OR_RETURN(QType t, kv_cache_type(v, "--ablate"));
      if (k != "ctv") row.cfg.k_type = t;
      if (k != "ctk") row.cfg.v_type = t;
    } else if (k == "layout") {
      if (v != "tiled" && v != "rows")
        return error(Code::kInvalidArgument,
                     "--ablate '{}': layout must be tiled or rows (KV page layout), got '{}'", spec,
                     v);
      row.cfg.kv_tiled = v == "tiled";
    } else if (k == "repack") {
      if (v != "on" && v != "off")
        return error(Code::kInvalidArgument,
                     "--ablate '{}': repack must be on or off (--repack), got '{}'", spec, v);
      row.cfg.repack = v == "on";
    } else if (k == "sampling") {
      if (v != "pool" && v != "serial")
        return error(Code::kInvalidArgument,
                     "--ablate '{}': sampling must be pool (a step's streams sampled over the "
                     "threads) or serial (one after another on the engine thread), got '{}'",
                     spec, v);
      row.cfg.pool_sampling = v == "pool";
    } else if (k == "prefix") {
      if (v != "on" && v != "off")
        return error(Code::kInvalidArgument, "--ablate '{}': prefix must be on or off, got '{}'",
                     spec, v);
      row.cfg.prefix_cache = v == "on";
    } else if (k == "batch" || k == "ubatch" || k == "threads") {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 65536)
        return error(Code::kInvalidArgument, "--ablate '{}': {}={} is not in 1..65536", spec, k, v);
      if (k == "batch") row.cfg.batch_tokens = n;
      if (k == "ubatch") row.cfg.ubatch_tokens = n;
      if (k == "threads") row.cfg.n_threads = static_cast<int>(n);
    } else if (k == "spec") {
      // One proposer per row (the switch list is comma-separated already).
      if (v == "off") {
        row.cfg.spec.types.clear();
        row.cfg.spec.draft_model.clear();
      } else {
        SUSTAIN_ASSIGN_OR_RETURN(row.cfg.spec.types, spec::parse_types(v));
      }
    } else if (k == "draft") {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 16)
        return error(Code::kInvalidArgument, "--ablate '{}': draft={} is not in 1..16", spec, v);
      row.cfg.spec.draft_max = static_cast<int>(n);
      row.cfg.spec.draft_min = std::min(row.cfg.spec.draft_min, row.cfg.spec.draft_max);
    } else if (k == "mtp_depth") {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 16)
        return error(Code::kInvalidArgument, "--ablate '{}': mtp_depth={} is not in 1..16", spec,
                     v);
      row.cfg.spec.mtp_depth = static_cast<int>(n);
    } else if (k == "gate") {
      if (v != "on" && v != "off")
        return error(Code::kInvalidArgument,
                     "--ablate '{}': gate must be on or off (the speculation gate), got '{}'",
                     spec, v);
      row.cfg.spec.gate = v == "on";
    } else if (k == "draft_model") {
      if (!std::filesystem::exists(v))
        return error(Code::kNotFound, "--ablate '{}': draft model file '{}' does not exist", spec,
                     v);
      row.cfg.spec.draft_model = v;
    } else if (k == "grammar") {
      if (v == "off") {
        row.grammar.clear();
      } else if (v == "json") {
        row.grammar = v;
      } else if (!std::filesystem::is_regular_file(v)) {
        return error(Code::kNotFound,
                     "--ablate '{}': grammar must be off, json or a JSON schema file; '{}' is not "
                     "a file",
                     spec, v);
      } else {
        row.grammar = v;
      }
    } else if (k == "split") {
      // Over ranks (mpirun … bench --split): off runs the row on rank 0
      // alone, the same run on one rank; layer or tensor over the same
      // ranks cut that way; on returns to the job's split.
      if (v != "on" && v != "off" && v != "layer" && v != "tensor")
        return error(Code::kInvalidArgument,
                     "--ablate '{}': split must be on (the job's --split), off (rank 0 alone), "
                     "layer or tensor (the same ranks cut that way), got '{}'",
                     spec, v);
      row.split = v;
    } else if (k == "model") {
      if (!std::filesystem::exists(v))
        return error(Code::kNotFound, "--ablate '{}': model file '{}' does not exist", spec, v);
      row.model = v;
      row.cfg.model_path = v;
    } else {
      return error(
          Code::kInvalidArgument,
          "--ablate '{}': unknown key '{}' (keys: ctk, ctv, kv, layout, prefix, batch, "
          "ubatch, threads, repack, sampling, spec, draft, mtp_depth, gate, draft_model, model, "
          "grammar, split)",
          spec, k);
    }
  }
  if (!any) return error(Code::kInvalidArgument, "--ablate '{}': switches nothing", spec);
  if (row.cfg.spec.uses("draft") && row.cfg.spec.draft_model.empty())
    return error(Code::kInvalidArgument, "--ablate '{}': spec=draft needs draft_model=FILE", spec);
  return Status::ok();
}

Status check_ablation(const std::vector<std::string>& specs) {
  AblationRow probe;
  for (const auto& s : specs) SUSTAIN_TRY(apply_switch(s, probe));
  return Status::ok();
}

Status place_row(AblationRow& row, const std::string& spec, const engine::EngineRanks* ranks) {
  const std::string& sp = row.split;
  if (sp == "on") return Status::ok();
  if (ranks == nullptr)
    return error(Code::kInvalidArgument,
                 "--ablate '{}': the bench runs in one process; start it with mpirun … --split "
                 "layer|tensor to compare layouts",
                 spec);
  if (sp == "off") {
    row.cfg.ranks = nullptr;
    return Status::ok();
  }
  std::string why;
  row.cfg.ranks = ranks->layout(sp == "tensor", &why);
  if (row.cfg.ranks == nullptr)
    return error(Code::kInvalidArgument, "--ablate '{}': the model cannot be split by {} here: {}",
                 spec, sp == "tensor" ? "tensors" : "layers", why);
  return Status::ok();
}

Status check_split_rows(const std::vector<std::string>& specs, const engine::EngineRanks* ranks) {
  AblationRow probe;
  for (const auto& s : specs) {
    SUSTAIN_TRY(apply_switch(s, probe));
    SUSTAIN_TRY(place_row(probe, s, ranks));
  }
  return Status::ok();
}

// Bracketed rows (AblationInput::bracket): rows alternate row 0's engine
// (even rows) and a switch (odd rows). Each ladder cell of a switch row
// gets vs_bracket = its decode tok/s P50 over the mean of the cells of the
// row-0 runs on either side at the same context (null where either is
// missing or not positive); row-0 runs get null.
namespace {
void add_bracket_ratios(json& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    for (auto& c : rows[i]["ladder"]) c["vs_bracket"] = nullptr;
    if (i % 2 == 0 || i + 1 >= rows.size()) continue;
    const json& before = rows[i - 1]["ladder"];
    const json& after = rows[i + 1]["ladder"];
    json& cells = rows[i]["ladder"];
    for (size_t k = 0; k < cells.size() && k < before.size() && k < after.size(); ++k) {
      const auto tok_s = [](const json& c) {
        return c["tok_s_p50"].is_number() ? c["tok_s_p50"].get<double>() : 0.0;
      };
      const double mean = 0.5 * (tok_s(before[k]) + tok_s(after[k]));
      if (tok_s(before[k]) > 0 && tok_s(after[k]) > 0 && tok_s(cells[k]) > 0)
        cells[k]["vs_bracket"] = tok_s(cells[k]) / mean;
    }
  }
}
}  // namespace

Status run_ablation(const AblationInput& in, PhaseBars& prog, Observer& obs, json& report) {
  json rows = json::array();
  const AblationRow base{"baseline", in.base.model_path, in.base};
  AblationRow row = base;
  json prev;
  std::vector<std::pair<std::string, AblationRow>> plan = {{"", row}};
  // Bracketed: row 0's engine again after every row (its switch "-").
  std::vector<bool> repeat = {false};
  for (const auto& s : in.specs) {
    if (in.bracket) row = base;
    if (auto st = apply_switch(s, row); !st) {
      prog.done();
      return st;
    }
    row.name = s;
    plan.push_back({s, row});
    repeat.push_back(false);
    if (in.bracket) {
      plan.push_back({"", base});
      plan.back().second.name = "baseline (again)";
      repeat.push_back(true);
    }
  }
  // Switches whose effect needs several streams at once also run the
  // concurrency levels.
  bool any_grammar = false, any_split = false, any_sampling = false;
  for (auto& p : plan) {
    any_grammar |= !p.second.grammar.empty();
    any_split |= p.second.split != "on";
    any_sampling |= p.second.cfg.pool_sampling != in.base.pool_sampling;
    SUSTAIN_TRY(place_row(p.second, p.first, in.base.ranks));
  }
  json prev_conc;
  for (size_t i = 0; i < plan.size(); ++i) {
    const AblationRow& r = plan[i].second;
    // The blank line first: the bar of the phase before may be unfinished.
    obs.message(fmt::format("\nbench: ablation row {}/{}: {}", i + 1, plan.size(), r.name));
    auto re = engine::Engine::create(r.cfg);
    if (!re) {
      prog.done();
      return re.status().with_context(fmt::format("ablation row '{}'", r.name));
    }
    LadderOptions ao = in.ladder;
    ao.budget_s = 0;
    BenchConstraint bc;
    if (!r.grammar.empty()) {
      if (!in.make_constraint) {
        prog.done();
        return error(Code::kInvalidArgument, "ablation row '{}': grammars are not available here",
                     r.name);
      }
      auto made = in.make_constraint(r.grammar, **re);
      if (!made) {
        prog.done();
        return made.status().with_context(fmt::format("ablation row '{}'", r.name));
      }
      bc = std::move(*made);
      ao.constraint = bc.factory;
    }
    auto lad = run_context_ladder(**re, ao);
    if (!lad) {
      prog.done();
      return lad.status().with_context(fmt::format("ablation row '{}'", r.name));
    }
    json cells = json::array();
    const json full = ladder_json(lad->rungs, model_cost(**re), in.bw);
    for (size_t k = 0; k < full.size(); ++k) {
      json c = {{"ctx", full[k]["ctx"]},
                {"tok_s_p50", full[k]["decode"]["tok_s_p50"]},
                {"tok_s_p95", full[k]["decode"]["tok_s_p95"]},
                {"tpot_ms_p50", full[k]["decode"]["tpot_ms_p50"]},
                {"tok_s_spread", full[k]["decode"]["tok_s_spread"]},
                {"prefill_tok_s", full[k]["prefill"].value("fill", "prefill") == "random"
                                      ? json()
                                      : full[k]["prefill"]["tok_s"]},
                {"kv_bytes", full[k]["kv_bytes"]},
                {"spec", full[k]["spec"]},
                {"delta_pct", nullptr}};
      if (!prev.is_null() && k < prev.size()) {
        const double p = prev[k]["tok_s_p50"].get<double>();
        if (p > 0) c["delta_pct"] = 100.0 * (c["tok_s_p50"].get<double>() - p) / p;
      }
      cells.push_back(c);
    }
    if (const std::string n =
            lost_path_note(fmt::format("ablation row '{}'", r.name), r.cfg, cells);
        !n.empty()) {
      obs.message("bench: " + n);
      report["notes"].push_back(n);
    }
    int64_t ladder_tokens = 0;
    // Generated under the constraint: each rung's fill and timed repetitions.
    for (const auto& rung : lad->rungs)
      ladder_tokens +=
          static_cast<int64_t>(rung.n_tokens) * static_cast<int64_t>(1 + rung.rep_tok_s.size());
    json grammar = nullptr;
    if (bc.factory) {
      grammar = {{"spec", r.grammar},
                 {"ladder", mask_json(bc.take_mask_times_us(), ladder_tokens)}};
    }
    json conc = nullptr;
    if ((any_grammar || any_split || any_sampling) && !in.concurrency.empty()) {
      int64_t conc_tokens = 0;
      auto cc = concurrency_cells(**re, in, bc.factory, ao.n_tokens, ao.seed + 2, &conc_tokens);
      if (!cc) {
        prog.done();
        return cc.status().with_context(fmt::format("ablation row '{}'", r.name));
      }
      conc = std::move(*cc);
      if (!prev_conc.is_null())
        for (size_t k = 0; k < conc.size() && k < prev_conc.size(); ++k) {
          const double p = prev_conc[k]["aggregate_tok_s"].get<double>();
          if (p > 0)
            conc[k]["delta_pct"] = 100.0 * (conc[k]["aggregate_tok_s"].get<double>() - p) / p;
        }
      // The warm-up request is not counted in the levels' tokens.
      if (bc.factory) grammar["concurrency"] = mask_json(bc.take_mask_times_us(), conc_tokens);
      prev_conc = conc;
    }
    rows.push_back({{"name", i == 0 ? "baseline" : r.name},
                    {"switch", plan[i].first.empty() ? "-" : plan[i].first},
                    {"model", model_conditions(**re)},
                    {"kv", kv_conditions(**re)},
                    {"engine", engine_conditions(r.cfg)},
                    {"ladder", cells},
                    {"spec", spec_json(**re, r.cfg)},
                    {"grammar", grammar},
                    {"concurrency", conc},
                    {"split", split_json((**re).stats())},
                    {"quality", nullptr}});
    prev = cells;
  }
  prog.done();
  json quality_summary = nullptr;
  std::string quality_note = "quality not measured (--quality off)";
  std::vector<json> row_quality(plan.size(), {{"skipped", "--quality off"}});
  if (in.quality) {
    std::vector<QualityConfig> qrows;
    std::vector<size_t> qrow_of;  // the plan row of each quality row (repeats of row 0 left out)
    for (size_t i = 0; i < plan.size(); ++i) {
      if (repeat[i]) continue;
      qrow_of.push_back(i);
      const engine::EngineConfig& c = plan[i].second.cfg;
      qrows.push_back({i == 0 ? "baseline" : plan[i].second.name, c.model_path,
                       kv_spelling(c.k_type), kv_spelling(c.v_type),
                       std::min(c.batch_tokens, c.ubatch_tokens), c.n_threads, c.kv_tiled});
    }
    auto q = measure_quality(*in.quality, qrows, obs);
    if (q) {
      for (size_t k = 0; k < qrow_of.size() && k < q->rows.size(); ++k)
        row_quality[qrow_of[k]] = q->rows[k];
      for (size_t i = 0; i < plan.size(); ++i)
        if (repeat[i]) row_quality[i] = {{"skipped", "row 0's engine again (--ablate-bracket)"}};
      quality_summary = q->summary;
      for (const auto& n : q->notes) {
        obs.message("bench: " + n);
        report["notes"].push_back(n);
      }
      quality_note =
          "quality cost vs row 0: KL(row 0 ‖ row) of the next-token distributions in the "
          "bucket (C/2, C] of each quality context C (one lockstep pass, eval kl), and needle "
          "accuracy of the built-in retriever with the row's KV formats";
    } else {
      quality_note = "quality not measured: " + q.status().message();
      report["notes"].push_back(quality_note);
      obs.message("bench: " + quality_note);
      row_quality.assign(plan.size(), {{"skipped", quality_note}});
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) rows[i]["quality"] = row_quality[i];
  if (in.bracket) add_bracket_ratios(rows);
  const json verdict = any_split ? split_verdict(rows) : json();
  report["ablation"] = {
      {"split_verdict", verdict},
      {"rows", rows},
      {"method",
       std::string(in.bracket
                       ? "bracketed (--ablate-bracket): each row applies its switch to row 0's "
                         "engine alone, and row 0's engine runs again after every row; "
                         "vs_bracket = decode tok/s P50 over the mean of the row-0 runs just "
                         "before and after the row, at the same context; "
                       : "each row applies its switch on top of the row above; ") +
           "delta_pct = change of "
           "decode tok/s P50 vs the row above at the same context (concurrency cells: of "
           "aggregate tok/s at the same concurrency); grammar rows constrain every generated "
           "token, mask_us = time to get each token's mask (cache hits included)"},
      {"bracket", in.bracket},
      {"quality", quality_summary},
      {"quality_note", quality_note}};
  return Status::ok();
}

}  // namespace sustain::bench

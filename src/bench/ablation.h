// The ablation matrix: rows that each switch one thing on top of the row
// above (KV formats and layout, prefix cache, batch, threads, model), each
// measured over the contexts the main ladder reached, with the change of
// decode speed against the row above and, optionally, the quality cost
// against row 0 (ablation_quality.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/ablation_quality.h"
#include "bench/bandwidth.h"
#include "bench/observer.h"
#include "bench/workloads.h"
#include "engine/api.h"

namespace sustain::bench {

// One ablation row: what it switches on top of the row above.
struct AblationRow {
  std::string name;
  std::string model;  // "" = the row above's
  engine::EngineConfig cfg;
  // Constrained decoding: "" none, "json" any JSON object, else a JSON
  // schema file; every generated token of the row is constrained.
  std::string grammar;
  // Over ranks (mpirun … bench --split): "on" the job's split, "off" rank 0
  // alone, "layer" / "tensor" the same ranks cut that way.
  std::string split = "on";
};

// A constraint for a row's engine, and the per-token mask times (µs) it
// recorded since the last call. Made by the caller (the CLI), so bench/
// needs nothing of how grammars are compiled.
struct BenchConstraint {
  std::shared_ptr<const sampling::ConstraintFactory> factory;
  std::function<std::vector<float>()> take_mask_times_us;
};
using MakeConstraint =
    std::function<Expected<BenchConstraint>(const std::string& grammar, engine::Engine& e)>;

// Applies `spec` ("kv=q8_0", "batch=256,threads=4": keys ctk, ctv, kv,
// layout, prefix, batch, ubatch, threads, repack (on, off), sampling (pool,
// serial: also runs the concurrency levels), spec (off, ngram, draft), draft
// (--draft-max), draft_model, model, grammar (off, json, FILE), split (on,
// off, layer, tensor: the row over the job's split, on rank 0 alone, or over
// the same ranks cut that way)) to `row`;
// errors name the spec (as --ablate) and what is wrong with it.
Status apply_switch(const std::string& spec, AblationRow& row);

// Applies every spec to a scratch row: checked before anything runs, as a
// typo must not cost a whole bench.
Status check_ablation(const std::vector<std::string>& specs);

// A row's engine over the ranks its split switch asks for: the job's
// layout, none (rank 0 alone) or the other cut of `ranks` (null: the bench
// runs in one process, where any split switch is refused). Errors name
// `spec` and why the layout cannot run.
Status place_row(AblationRow& row, const std::string& spec, const engine::EngineRanks* ranks);
// Every row's split switch checked against the job before anything runs.
Status check_split_rows(const std::vector<std::string>& specs, const engine::EngineRanks* ranks);

// An oracle that drafts on every step it can (gate off) and still made
// under half of a cell's tokens in verify steps (the cells' "spec",
// results.h rung_spec_json) has lost its first pass's path there: without
// --batch-invariant a verify row is not bit-identical to a decode step, and
// the fill computed its prompt in other chunks than the repetitions, so a
// greedy near-tie flips (docs/speculative.md). Such a cell measures plain
// decoding, not the oracle's acceptance: the note naming `what` (the ladder
// or an ablation row) and the cells says so. Empty when every cell kept its
// path or the engine has no oracle.
std::string lost_path_note(const std::string& what, const engine::EngineConfig& c,
                           const nlohmann::json& cells);

struct AblationInput {
  std::vector<std::string> specs;  // the rows after row 0, checked
  // Bracketed rows: row 0's engine with each switch alone (not on top of
  // the rows above), row 0 run again after each, and every ladder cell of
  // a switch row given as vs_bracket = its decode tok/s P50 over the mean
  // of the row-0 runs just before and after it. On a machine whose speed
  // drifts by tens of percent within minutes, a ratio to neighbours taken
  // in the same minutes is what holds (PERF.md).
  bool bracket = false;
  engine::EngineConfig base;       // row 0: the engine the main ladder ran
  LadderOptions ladder;            // its options, ctx = the contexts it measured
  const BandwidthResult* bw = nullptr;
  const QualityOptions* quality = nullptr;  // null: quality not measured (--quality off)
  // Compiles a row's grammar (needed when a row has one).
  MakeConstraint make_constraint;
  // When a row has a grammar, every row also runs these fixed concurrency
  // levels (prompts of conc_prompt tokens, conc_requests per client), so the
  // constraint's cost shows with batching too.
  std::vector<int64_t> concurrency;
  int64_t conc_prompt = 256;
  int conc_requests = 2;
};

// Runs every row (each its own engine) and sets report["ablation"]; the
// quality pass's notes go to report["notes"]. `prog` shows the rows'
// ladders and is finished before the quality pass.
Status run_ablation(const AblationInput& in, PhaseBars& prog, Observer& obs,
                    nlohmann::json& report);

}  // namespace sustain::bench

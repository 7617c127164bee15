// The scheduling flags that serve and bench share: the TPOT target the
// scheduler keeps for running streams, the prefill age bound and batch
// invariance (EngineConfig::tpot_target_ms, prefill_age_bound_s,
// batch_invariant; docs/engine.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "engine/api.h"

namespace sustain::cli {

struct ServingArgs {
  std::string tpot_target = "auto";  // "auto", "0" (off) or milliseconds
  double prefill_age_bound_s = 5.0;
  bool batch_invariant = false;
};

// --batch-invariant's help, for the commands that take it.
extern const char* const kBatchInvariantHelp;

void add_serving_flags(CLI::App* sub, ServingArgs& a);

// Sets those fields of `c`; errors name the flag and the value.
Status apply_serving_flags(const ServingArgs& a, engine::EngineConfig& c);

// --tpot-target's value: kTpotAuto for "auto", else milliseconds (0 = off).
Expected<double> parse_tpot_target(const std::string& v);

}  // namespace sustain::cli

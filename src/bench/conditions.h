// What every bench report records about where and how it was measured
// (docs/bench.md): its frame, the machine, the build and the sampler.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/workloads.h"

namespace sustain::bench {

// The current UTC time in strftime `format`.
std::string utc_now(const char* format);

// A report with its schema, creation time, command line and metric
// definitions, and empty notes[] and ladder[].
nlohmann::json new_report(const std::string& command_line);

// conditions.machine, conditions.build and conditions.sampler.
nlohmann::json machine_conditions();
nlohmann::json build_conditions();
// bench_sampler(chain) as the report's conditions.sampler.
nlohmann::json sampler_conditions(uint64_t seed, const BenchChain& chain = {});

}  // namespace sustain::bench

// `sustain bench soak` (cmd_bench_soak.cc), a subcommand of `bench`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace sustain::cli {

// Adds `soak` under the `bench` subcommand; the returned function runs it
// (exit code) and is called when `soak` was parsed.
std::function<int()> add_bench_soak(CLI::App& bench_cmd);

}  // namespace sustain::cli

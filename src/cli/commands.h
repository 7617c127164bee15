// The `sustain` subcommands. Each lives in its own cmd_<name>.cc and
// registers its flags on a CLI11 subcommand; run() is called after parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace sustain::cli {

// Adds a subcommand to `app` and returns the function that runs it (exit code).
using Runner = std::function<int()>;
Runner add_info(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_eval(CLI::App& app);
Runner add_vision_embed(CLI::App& app);

// Prints "sustain: error: <msg>" to stderr; returns the exit code for errors.
int fail(const std::string& msg);

// Default worker threads: every core this process may use.
int default_threads();

}  // namespace sustain::cli

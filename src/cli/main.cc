// The `sustain` binary: parses the command line and dispatches to one
// subcommand (cmd_*.cc). Errors from parsing name the flag and the problem.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cli/commands.h"

namespace sustain::cli {

int fail(const std::string& msg) {
  std::fprintf(stderr, "sustain: error: %s\n", msg.c_str());
  return 1;
}

int default_threads() { return ThreadPool::hardware_threads(); }

// llama.cpp spells some long options with one dash (-ctk, -ub, ...), which
// CLI11 cannot declare; they are rewritten to their long forms before parsing
// so people's habits carry over.
std::vector<std::string> expand_llama_cpp_aliases(int argc, char** argv) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ub", "--ubatch-size"},
      {"-np", "--parallel"},      {"-fa", "--flash-attn"},    {"-ngl", "--n-gpu-layers"},
      {"-ctkd", "--cache-type-k-draft"}, {"-ctvd", "--cache-type-v-draft"},
      {"-md", "--draft-model"},   {"-sm", "--split-mode"},    {"-ts", "--tensor-split"},
  };
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [from, to] : kAliases) {
      const std::string f(from);
      if (a == f) {
        a = to;
      } else if (a.rfind(f + "=", 0) == 0) {
        a = std::string(to) + a.substr(f.size());
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace sustain::cli

int main(int argc, char** argv) {
  using namespace sustain::cli;
  CLI::App app{
      "sustain — an LLM inference engine and measurement harness built for long contexts.\n"
      "Run `sustain <command> --help` for a command's options.",
      "sustain"};
  app.set_version_flag("--version", std::string("sustain " SUSTAIN_VERSION " (" SUSTAIN_GIT_COMMIT ")"));
  app.require_subcommand(1);
  std::map<CLI::App*, Runner> runners;
  auto reg = [&](Runner r) { runners[app.get_subcommands({}).back()] = std::move(r); };
  reg(add_run(app));
  reg(add_logits(app));
  reg(add_tokenize(app));
  reg(add_info(app));
  reg(add_vision_embed(app));
  reg(add_synth(app));
  reg(add_quantize(app));
  reg(add_plan(app));
  reg(add_bench(app));
  reg(add_serve(app));
  reg(add_eval(app));
  std::vector<std::string> args = expand_llama_cpp_aliases(argc, argv);
  std::vector<char*> argv2;
  for (auto& a : args) argv2.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv2.size()), argv2.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "sustain: error: %s\n", e.what());
    std::fprintf(stderr, "Run `sustain --help` (or `sustain <command> --help`) for usage.\n");
    return 2;
  }
  for (auto* sub : app.get_subcommands()) {
    auto it = runners.find(sub);
    if (it != runners.end()) return it->second();
  }
  return fail("no command given");
}

// The `sustain` binary: parses the command line and dispatches to one
// subcommand (cmd_*.cc). Errors from parsing name the flag and the problem.
#include <cstdio>
#include <map>

#include "base/thread_pool.h"
#include "cli/commands.h"

namespace sustain::cli {

int fail(const std::string& msg) {
  std::fprintf(stderr, "sustain: error: %s\n", msg.c_str());
  return 1;
}

int default_threads() { return ThreadPool::hardware_threads(); }

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
  reg(add_info(app));
  reg(add_synth(app));
  reg(add_quantize(app));
  try {
    app.parse(argc, argv);
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

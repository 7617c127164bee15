// Runs the real `sustain` binary and captures what it printed.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace sustain::test {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `args` is appended to the binary path as a shell command line (quote paths
// with spaces yourself). stdin is /dev/null so nothing can wait on input.
// `prefix` goes before the binary in the same shell command (e.g. a ulimit
// and a `timeout`).
inline CliResult run_cli(const std::string& args, const std::string& prefix = "") {
  static int counter = 0;
  const std::string err_path = tmp_path("stderr_" + std::to_string(getpid()) + "_" +
                                        std::to_string(counter++) + ".txt");
  const std::string cmd =
      prefix + std::string(SUSTAIN_BINARY) + " " + args + " </dev/null 2>" + err_path;
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

}  // namespace sustain::test

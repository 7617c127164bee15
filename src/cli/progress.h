// A one-line progress display on stderr: redrawn in place on a terminal,
// printed at most every few seconds (as full lines) when stderr is a file or
// pipe, so logs stay readable.
#pragma once

#include <chrono>
#include <string>

namespace sustain::cli {

class Progress {
 public:
  explicit Progress(std::string label);
  // fraction in [0, 1]; `detail` is shown after the bar.
  void update(double fraction, const std::string& detail);
  void finish(const std::string& detail);

 private:
  std::string label_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace sustain::cli

#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace sustain::cli {

Progress::Progress(std::string label)
    : label_(std::move(label)),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_(start_ - std::chrono::hours(1)) {}

void Progress::update(double fraction, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  const auto min_gap = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  if (now - last_ < min_gap) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string eta = "";
  if (fraction > 0.01 && fraction < 1.0)
    eta = fmt::format(", ETA {:.0f}s", elapsed * (1.0 - fraction) / fraction);
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth + 0.5);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  const std::string line =
      fmt::format("{} [{}] {:5.1f}% {:.1f}s{}  {}", label_, bar, 100.0 * fraction, elapsed, eta, detail);
  if (tty_) {
    std::fprintf(stderr, "\r%-110.110s", line.c_str());
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish(const std::string& detail) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = fmt::format("{} done in {:.1f}s  {}", label_, elapsed, detail);
  if (tty_) {
    std::fprintf(stderr, "\r%-110.110s\n", line.c_str());
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace sustain::cli

// How a bench run shows what it is doing while it runs: progress bars, one
// per phase, and one-line messages. The caller decides how they look (the
// CLI draws them on stderr); a server endpoint or a test may drop them, so
// the bench itself never prints.
#pragma once

#include <memory>
#include <string>

namespace sustain::bench {

// One progress display. A bar destroyed without finish() was abandoned
// (its phase failed).
class ProgressBar {
 public:
  virtual ~ProgressBar() = default;
  // fraction in [0, 1]; `detail` is shown after the bar.
  virtual void update(double fraction, const std::string& detail) = 0;
  virtual void finish(const std::string& detail) = 0;
};

class Observer {
 public:
  virtual ~Observer() = default;
  // A new bar labelled `label` ("bench ladder"), started now.
  virtual std::unique_ptr<ProgressBar> bar(const std::string& label) = 0;
  // One line for the user ("bench: loading ..."), without its newline.
  virtual void message(const std::string& line) = 0;
};

// Shows nothing.
class SilentObserver : public Observer {
 public:
  std::unique_ptr<ProgressBar> bar(const std::string& label) override;
  void message(const std::string&) override {}
};

// One bar per phase of the workloads' (phase, fraction, detail) progress:
// a new phase finishes the bar of the previous one.
class PhaseBars {
 public:
  explicit PhaseBars(Observer& obs) : obs_(obs) {}
  void operator()(const std::string& phase, double fraction, const std::string& detail);
  // Finishes the current bar, if any.
  void done();

 private:
  Observer& obs_;
  std::string phase_;
  std::unique_ptr<ProgressBar> bar_;
};

}  // namespace sustain::bench

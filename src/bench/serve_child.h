// A `sustain serve` child process for the soak when it is given no --url:
// started on 127.0.0.1 with --port 0, its port read from the line it prints,
// ready once /health answers 200; stopped with SIGTERM (then SIGKILL) and
// its exit status kept, so a crash during the run is part of the verdict.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace sustain::bench {

class ServeChild {
 public:
  // Runs `binary serve ARGS --host 127.0.0.1 --port 0` with stderr in
  // `log_path`, and waits up to `ready_timeout_s` for /health. kUnavailable
  // quoting the log's tail when it exits or never gets ready.
  static Expected<std::unique_ptr<ServeChild>> start(const std::string& binary,
                                                     const std::vector<std::string>& args,
                                                     const std::string& log_path,
                                                     double ready_timeout_s);
  ~ServeChild();
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;

  pid_t pid() const { return pid_; }
  std::string url() const;
  // "" while it runs; else how it ended ("exited with status 1", "killed by signal 9").
  std::string ended() const;
  // SIGTERM, up to `timeout_s` to exit, then SIGKILL. "" when it exited 0,
  // else what went wrong (it had ended already, or exited non-zero).
  std::string stop(double timeout_s);

 private:
  ServeChild() = default;
  bool reap(bool wait);
  pid_t pid_ = -1;
  int port_ = 0;
  // The child's stdout, kept open after its port is read: closed, the
  // server's next line would raise SIGPIPE in it. It prints two lines.
  int out_fd_ = -1;
  std::string log_path_;
  mutable int status_ = 0;
  mutable bool reaped_ = false;
};

}  // namespace sustain::bench

#include "bench/serve_child.h"

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace sustain::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string log_tail(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  return s.size() > 1500 ? "..." + s.substr(s.size() - 1500) : s;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "ended";
}

}  // namespace

Expected<std::unique_ptr<ServeChild>> ServeChild::start(const std::string& binary,
                                                        const std::vector<std::string>& args,
                                                        const std::string& log_path,
                                                        double ready_timeout_s) {
  std::unique_ptr<ServeChild> c(new ServeChild());
  c->log_path_ = log_path;
  std::vector<std::string> argv = {binary, "serve"};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* a : {"--host", "127.0.0.1", "--port", "0"}) argv.emplace_back(a);
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return error(Code::kIo, "cannot write the server log '{}'", log_path);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ::close(log_fd);
    return error(Code::kIo, "pipe() failed for the server's stdout");
  }
  const pid_t parent = getpid();
  c->pid_ = fork();
  if (c->pid_ == 0) {
    // The server must not outlive the soak, however the soak ends (killed
    // included), and it handles its own signals: none blocked, whatever
    // mask the soak runs under.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    dup2(null_fd, 0);
    dup2(fds[1], 1);
    dup2(log_fd, 2);
    execv(binary.c_str(), cargv.data());
    _exit(127);
  }
  ::close(fds[1]);
  ::close(log_fd);
  c->out_fd_ = fds[0];
  if (c->pid_ < 0) return error(Code::kIo, "fork() failed starting '{}'", binary);
  const std::string cmd = fmt::format("{}", fmt::join(argv, " "));
  // "sustain serve: listening on http://127.0.0.1:PORT ..."
  const std::string key = "listening on http://127.0.0.1:";
  const auto deadline = Clock::now() + std::chrono::duration<double>(ready_timeout_s);
  std::string out;
  while (out.find(key) == std::string::npos || out.find('\n', out.find(key)) == std::string::npos) {
    if (Clock::now() > deadline || c->reap(false)) break;
    pollfd pf{c->out_fd_, POLLIN, 0};
    if (poll(&pf, 1, 200) <= 0) continue;
    char buf[512];
    const ssize_t n = read(c->out_fd_, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  const size_t at = out.find(key);
  if (at == std::string::npos)
    return error(Code::kUnavailable, "`{}` did not start listening ({}); its log:\n{}", cmd,
                 c->reaped_ ? describe(c->status_) : "no 'listening on' line", log_tail(log_path));
  c->port_ = std::atoi(out.c_str() + at + key.size());
  httplib::Client cli("127.0.0.1", c->port_);
  cli.set_connection_timeout(2, 0);
  while (Clock::now() < deadline && !c->reap(false)) {
    auto r = cli.Get("/health");  // 503 while the model loads, then 200
    if (r && r->status == 200) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return error(Code::kUnavailable, "`{}`: /health never answered 200 ({}); its log:\n{}", cmd,
               c->reaped_ ? describe(c->status_) : "timed out", log_tail(log_path));
}

bool ServeChild::reap(bool wait) {
  if (reaped_) return true;
  if (pid_ <= 0) return false;
  int st = 0;
  if (waitpid(pid_, &st, wait ? 0 : WNOHANG) == pid_) {
    status_ = st;
    reaped_ = true;
  }
  return reaped_;
}

std::string ServeChild::url() const {
  return fmt::format("http://127.0.0.1:{}", port_);
}

std::string ServeChild::ended() const {
  if (const_cast<ServeChild*>(this)->reap(false)) return describe(status_);
  return "";
}

std::string ServeChild::stop(double timeout_s) {
  if (reap(false)) return "the server " + describe(status_) + " before the soak stopped it";
  kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline && !reap(false))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!reaped_) {
    kill(pid_, SIGKILL);
    reap(true);
    return fmt::format("the server did not exit within {:.0f} s of SIGTERM (killed)", timeout_s);
  }
  if (WIFEXITED(status_) && WEXITSTATUS(status_) == 0) return "";
  return "on SIGTERM the server " + describe(status_);
}

ServeChild::~ServeChild() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    reap(true);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
}

}  // namespace sustain::bench

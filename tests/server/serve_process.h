// Starts the real `sustain serve` on 127.0.0.1 with --port 0, reads the port
// it prints, waits for /health to say the model is loaded, and stops it
// (SIGTERM, then SIGKILL) when destroyed. Also: the tiny test model, made once
// with `sustain synth`, and small HTTP helpers.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"
#include "test_util.h"

namespace sustain::test {

// A model made once with `sustain synth SYNTH_ARGS` into tmp/NAME (written
// under another name first, so a run cut short leaves no half file); "" if
// synth failed.
inline std::string synth_once(const std::string& name, const std::string& synth_args) {
  const std::string p = tmp_path(name);
  if (!std::filesystem::exists(p)) {
    const std::string part = p + ".part" + std::to_string(getpid());
    auto r = run_cli("synth " + synth_args + " -t 2 -o " + part);
    if (r.exit_code != 0) return std::string();
    std::filesystem::rename(part, p);
  }
  return p;
}

// tiny-qwen3 (BPE vocabulary, Qwen3's chat template) with random weights.
inline std::string server_model() {
  static const std::string path =
      synth_once("server_tiny_qwen3.gguf", "--preset tiny-qwen3 --seed 3");
  return path;
}

// tiny-mistral (Mistral v0.3's vocabulary, [TOOL_CALLS] included; no chat
// template) with random weights.
inline std::string mistral_model() {
  static const std::string path =
      synth_once("server_tiny_mistral.gguf", "--preset tiny-mistral --seed 5");
  return path;
}

// A Mistral v0.3-style chat template, written for these tests: tools before
// the last user turn, calls as [TOOL_CALLS] and a JSON array.
inline constexpr const char* kMistralStyleTemplate =
    "{{- bos_token }}{%- for m in messages %}"
    "{%- if m.role == 'user' %}"
    "{%- if tools is defined and tools and loop.last %}[AVAILABLE_TOOLS]{{ tools|tojson }}"
    "[/AVAILABLE_TOOLS]{%- endif %}[INST]{{ m.content }}[/INST]"
    "{%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS]["
    "{%- for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments }}, \"id\": \"{{ c.id }}\"}{%- if not loop.last %}, {% endif %}"
    "{%- endfor %}]{{ eos_token }}"
    "{%- elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}"
    "{%- elif m.role == 'tool' %}[TOOL_RESULTS]{\"content\": {{ m.content|tojson }}, "
    "\"call_id\": \"{{ m.tool_call_id }}\"}[/TOOL_RESULTS]{%- endif %}{%- endfor %}";

// Runs a shell command; its stdout, and its exit code in *code (-1 when it
// did not exit normally). nullopt when it could not be started.
inline std::optional<std::string> run_shell(const std::string& cmd, int* code) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

class ServeProcess {
 public:
  // `args` follow `sustain serve -m MODEL --port 0 -t 2`; MODEL is
  // server_model() unless `model` is given. `launcher` (e.g. an mpirun
  // line) goes before the binary, and then each rank gets -t 1.
  static std::unique_ptr<ServeProcess> start(const std::string& args, std::string* why,
                                             const std::string& model = "",
                                             const std::string& launcher = "") {
    auto p = std::unique_ptr<ServeProcess>(new ServeProcess());
    // The same tests against a server over ranks (tests/dist/CMakeLists.txt
    // runs the server's HTTP tests so): a launcher and flags from the
    // environment, used where the test gives none of its own.
    std::string launch = launcher, extra;
    if (const char* l = std::getenv("SUSTAIN_TEST_SERVE_LAUNCHER"); l && launch.empty()) {
      launch = l;
      if (const char* x = std::getenv("SUSTAIN_TEST_SERVE_ARGS")) extra = std::string(" ") + x;
    }
    int fds[2];
    if (pipe(fds) != 0) {
      *why = "pipe failed";
      return nullptr;
    }
    static int counter = 0;
    p->threads_ = launch.empty() ? 2 : 1;
    p->err_path_ = tmp_path("serve_stderr_" + std::to_string(getpid()) + "_" +
                            std::to_string(counter++) + ".txt");
    const std::string cmd = "exec " + launch + std::string(SUSTAIN_BINARY) + " serve -m " +
                            (model.empty() ? server_model() : model) + " --port 0 -t " +
                            std::to_string(p->threads_) + " " + args + extra + " </dev/null 2>" +
                            p->err_path_;
    p->pid_ = fork();
    if (p->pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    p->out_fd_ = fds[0];
    // "sustain serve: listening on http://127.0.0.1:PORT ..."
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (line.find('\n') == std::string::npos) {
      pollfd pf{p->out_fd_, POLLIN, 0};
      if (std::chrono::steady_clock::now() > deadline || poll(&pf, 1, 1000) < 0) break;
      if (!(pf.revents & (POLLIN | POLLHUP))) continue;
      char buf[256];
      const ssize_t n = read(p->out_fd_, buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    const std::string key = "listening on http://127.0.0.1:";
    const size_t at = line.find(key);
    if (at == std::string::npos) {
      *why = "no 'listening on' line; stdout: " + line + " stderr: " + p->stderr_text();
      return nullptr;
    }
    p->port_ = std::stoi(line.substr(at + key.size()));
    // 503 while loading, then 200.
    auto c = p->client();
    for (int i = 0; i < 600; ++i) {
      auto r = c.Get("/health");
      if (r && r->status == 200) return p;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    *why = "/health never became 200; stderr: " + p->stderr_text();
    return nullptr;
  }

  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      for (int i = 0; i < 100; ++i) {
        if (waitpid(pid_, &st, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
      }
    }
    if (out_fd_ >= 0) close(out_fd_);
    std::remove(err_path_.c_str());
  }

  // True while the process runs (it must survive everything a client sends).
  bool alive() const {
    int st = 0;
    return pid_ > 0 && waitpid(pid_, &st, WNOHANG) == 0;
  }

  // Sends `sig` and waits up to `timeout_ms` for the process to end; its exit
  // status (128 + signal if a signal ended it), or -1 if it is still running.
  int signal_and_wait(int sig, int timeout_ms) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  // Sends `sig` (SIGSTOP, SIGCONT, ...) and returns at once.
  void signal(int sig) const {
    if (pid_ > 0) kill(pid_, sig);
  }

  int port() const { return port_; }
  // Worker threads of the server (of each rank, over ranks).
  int threads() const { return threads_; }
  pid_t pid() const { return pid_; }
  httplib::Client client(int timeout_s = 120) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(timeout_s, 0);
    c.set_write_timeout(timeout_s, 0);
    c.set_connection_timeout(10, 0);
    return c;
  }

  std::string stderr_text() const {
    std::ifstream e(err_path_);
    std::stringstream ss;
    ss << e.rdbuf();
    return ss.str();
  }

 private:
  ServeProcess() = default;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  int threads_ = 2;
  std::string err_path_;
};

#define SUSTAIN_START_SERVER(var, args)                                     \
  std::string var##_why;                                                    \
  auto var = ::sustain::test::ServeProcess::start(args, &var##_why);        \
  ASSERT_NE(::sustain::test::server_model(), "") << "sustain synth failed"; \
  ASSERT_TRUE(var != nullptr) << var##_why

// One metric's value from /metrics text ("name value" lines); -1 if absent.
inline double metric_value(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = ("\n" + text).find(key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at - 1 + key.size()));
}

struct SseResult {
  std::vector<nlohmann::json> events;                        // every data: {...} event
  std::vector<std::chrono::steady_clock::time_point> times;  // when each event arrived
  bool done = false;                                         // ended with data: [DONE]
  int status = 0;
};

// POSTs with stream: true and collects the events; the request is cut off
// (the connection closed) once `stop` is set; `seen` counts events as they
// arrive, for another thread to watch.
inline SseResult post_sse(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                          const httplib::Headers& headers = {},
                          const std::atomic<bool>* stop = nullptr,
                          std::atomic<size_t>* seen = nullptr) {
  SseResult out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
      const std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (ev.rfind("data: ", 0) != 0) continue;  // comments
      const std::string data = ev.substr(6);
      if (data == "[DONE]") {
        out.done = true;
      } else {
        out.events.push_back(nlohmann::json::parse(data));
        out.times.push_back(std::chrono::steady_clock::now());
        if (seen != nullptr) ++*seen;
      }
    }
    return stop == nullptr || !stop->load();
  };
  auto res = c.send(req);
  out.status = res ? res->status : -1;
  if (res && res->status != 200 && !res->body.empty())
    out.events.push_back(nlohmann::json::parse(res->body));
  return out;
}

}  // namespace sustain::test

// The connections themselves, under deadlines of our own. cpp-httplib 0.11
// (a compiled library) accepts each socket and hands it to the virtual
// Server::process_and_close_socket; HttpServer overrides it so that:
//  - requests are read through DeadlineStream: a request's line and headers
//    must arrive within `header` of its first byte (of the accept, for a
//    connection's first request), its body within `body` after the headers,
//    and the headers may not grow past the header limit while they arrive.
//    httplib's own timeouts are per recv(), so a client sending one byte a
//    second never tripped them. A request that misses a deadline is answered
//    408 (431 for headers too large) with a JSON body and the connection is
//    closed; a connection that sent nothing is closed silently.
//  - a write that waits `write` without the client acknowledging a byte
//    (it stopped reading and the socket buffers are full) fails, which ends
//    the response; a stream's request is then cancelled like a disconnect.
//    A client that reads, but only a trickle, is held to a minimum rate:
//    each time the response's writes have spent `write` in all waiting on
//    it, it must have acknowledged at least `min_write_rate` bytes per
//    second of that waiting, else the response ends the same way. A client
//    that keeps up never makes a write wait, so the rule never touches it. The engine never waits on a client in any
//    case: it appends events to a request's queue.
//  - handler threads come from HandlerPool: a connection that arrives while
//    every handler thread is busy goes to a small overflow pool that serves
//    one request and closes (completions get 503 with Retry-After, /health
//    and /metrics are answered), instead of waiting in an unbounded queue.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>

#include "server/metrics.h"

namespace sustain::server {

struct ConnectionLimits {
  std::chrono::milliseconds header{10'000};     // first byte → end of the headers
  std::chrono::milliseconds body{60'000};       // end of the headers → end of the body
  std::chrono::milliseconds write{30'000};      // one write making no progress
  size_t min_write_rate = 1024;                  // bytes/s while writes wait on the client; 0 = off
  std::chrono::milliseconds keep_alive{5'000};  // idle between requests of a connection
  std::chrono::milliseconds max_wait{600'000};  // any one socket wait (--timeout)
  size_t max_header_bytes = 16u << 10;          // request line + headers
  // Deadlines on the overflow path: it has few threads, so they are short.
  std::chrono::milliseconds overflow_read{2'000};
};

enum class ReadFailure { kNone, kHeaderTimeout, kBodyTimeout, kHeadersTooLarge };

// What a handler may ask about the connection its thread serves.
struct Connection {
  int fd = -1;
  bool overflow = false;                          // arrived while every handler thread was busy
  ReadFailure read_failure = ReadFailure::kNone;  // of the current request
  bool write_timed_out = false;
  bool write_too_slow = false;  // ended by the minimum write rate (write_timed_out is set too)
  // What the current request keeps alive until its response has been
  // written: httplib writes a plain response after the handler returns, and
  // a completion's count in ServerState::active must outlast that write (a
  // --split job whose rank died ends the process once the count is zero).
  std::shared_ptr<void> held;
};

// The connection the calling thread serves, or nullptr (not a handler thread).
Connection* current_connection();

// The status and JSON body for a request that could not be read in full:
// 408 for a deadline, 431 for headers too large.
std::pair<int, std::string> read_failure_response(ReadFailure f, const ConnectionLimits& lim);

// A socket read with deadlines per request phase, a cap on the header bytes,
// and writes bounded by the write deadline. Buffers its reads (httplib reads
// headers a byte at a time).
class DeadlineStream final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  // Reads also end (failing) once `stopping` is true: the server stops.
  DeadlineStream(int fd, Connection& conn, const ConnectionLimits& lim,
                 std::chrono::milliseconds body_budget, std::function<bool()> stopping);

  // A new request: its headers are due by `header_deadline`.
  void start_request(Clock::time_point header_deadline);
  // Waits up to `idle` for the next request's first byte; false when none
  // came, the peer closed, or `stop` became true.
  bool wait_for_request(std::chrono::milliseconds idle, const std::function<bool()>& stop);
  // Bytes of the current request handed to httplib so far.
  size_t request_bytes() const { return request_bytes_; }
  // Writes all of `data` (bounded by the write deadline and the minimum
  // write rate).
  bool write_all(const std::string& data);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  // Polls for `events` until `until` (capped by max_wait); true when ready.
  bool wait(short events, Clock::time_point until) const;

  int fd_;
  Connection* conn_;
  const ConnectionLimits* lim_;
  std::chrono::milliseconds body_budget_;
  std::function<bool()> stopping_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  bool in_headers_ = true;
  uint32_t tail_ = 0;  // the last four header bytes, to find "\r\n\r\n"
  size_t header_bytes_ = 0, request_bytes_ = 0;
  Clock::time_point deadline_;
  // Bytes written but not yet acknowledged by the client (SIOCOUTQ); 0
  // where the socket cannot say.
  size_t unacknowledged() const;
  // The minimum write rate: bytes written in all, time spent waiting on the
  // client since the last check, and the bytes the client had acknowledged
  // at that check.
  size_t write_bytes_ = 0;
  Clock::duration write_waited_{};
  size_t taken_at_check_ = 0;
};

// Handler threads. A connection goes to a free worker when one is free, else
// to one of `overflow` threads that answer it at once; past `max_overflow`
// waiting there it is closed unanswered.
class HandlerPool final : public httplib::TaskQueue {
 public:
  HandlerPool(int workers, int overflow, size_t max_overflow);
  ~HandlerPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  enum class Mode { kNormal, kOverflow, kShed };
  // How the connection the calling thread runs was admitted.
  static Mode current_mode();

 private:
  void work(bool overflow);

  std::mutex mu_;
  std::condition_variable cv_, overflow_cv_;
  std::deque<std::function<void()>> jobs_;
  std::deque<std::pair<std::function<void()>, bool>> overflow_jobs_;  // (job, shed)
  size_t workers_, max_overflow_;
  size_t busy_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// httplib's server with the connection handling above.
class HttpServer final : public httplib::Server {
 public:
  // Call before listening; `counters` must outlive the server.
  void configure(const ConnectionLimits& limits, ServerCounters* counters) {
    limits_ = limits;
    counters_ = counters;
  }
  const ConnectionLimits& limits() const { return limits_; }

  // Call after binding. httplib (Debian's build of it) listens with a
  // backlog of 5: a burst of more new connections than that overflows the
  // kernel's accept queue, and each connection past it waits for a SYN-ACK
  // retransmission (1 s, then 3 s, 7 s) before the server even sees it. The
  // kernel caps `backlog` at net.core.somaxconn. False if the socket is not
  // listening.
  bool widen_backlog(int backlog);

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool serve(int sock, Connection& conn);

  ConnectionLimits limits_;
  ServerCounters* counters_ = nullptr;
};

}  // namespace sustain::server

#include "server/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "server/api_error.h"

namespace sustain::server {
namespace {

using Clock = std::chrono::steady_clock;

thread_local Connection* t_connection = nullptr;
thread_local HandlerPool::Mode t_mode = HandlerPool::Mode::kNormal;

double seconds(std::chrono::milliseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
    port = ntohs(in6.sin6_port);
  }
  ip = host;
}

// After an error answered mid-request, the client may still be sending: read
// and drop what comes for a moment, so closing does not reset the connection
// before the client has read the answer.
void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  char sink[4096];
  size_t dropped = 0;
  while (dropped < (1u << 20)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
}

}  // namespace

Connection* current_connection() {
  return t_connection;
}

std::pair<int, std::string> read_failure_response(ReadFailure f, const ConnectionLimits& lim) {
  ApiError e;
  switch (f) {
    case ReadFailure::kHeaderTimeout:
      e = ApiError{408, "invalid_request_error",
                   fmt::format("the request line and headers did not arrive within {} s "
                               "(--header-timeout)",
                               seconds(lim.header)),
                   "", "request_timeout"};
      break;
    case ReadFailure::kBodyTimeout:
      e = ApiError{408, "invalid_request_error",
                   fmt::format("the request body did not arrive within {} s of the headers "
                               "(--body-timeout)",
                               seconds(lim.body)),
                   "", "request_timeout"};
      break;
    case ReadFailure::kHeadersTooLarge:
      e = ApiError{431, "invalid_request_error",
                   fmt::format("the request line and headers are over {} bytes, the most "
                               "allowed",
                               lim.max_header_bytes),
                   "", "headers_too_large"};
      break;
    case ReadFailure::kNone:
      e = ApiError{400, "invalid_request_error", "the HTTP request is malformed", "", ""};
      break;
  }
  return {e.status, error_body(e)};
}

// ---------------------------------------------------------------------------
// DeadlineStream

DeadlineStream::DeadlineStream(int fd, Connection& conn, const ConnectionLimits& lim,
                               std::chrono::milliseconds body_budget,
                               std::function<bool()> stopping)
    : fd_(fd),
      conn_(&conn),
      lim_(&lim),
      body_budget_(body_budget),
      stopping_(std::move(stopping)) {}

void DeadlineStream::start_request(Clock::time_point header_deadline) {
  deadline_ = header_deadline;
  in_headers_ = true;
  tail_ = 0;
  header_bytes_ = 0;
  request_bytes_ = 0;
  conn_->read_failure = ReadFailure::kNone;
}

bool DeadlineStream::wait(short events, Clock::time_point until) const {
  const auto cap = Clock::now() + lim_->max_wait;
  until = std::min(until, cap);
  for (;;) {
    // Rounded up, so that a timeout means the time has passed.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    pollfd p{fd_, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (r > 0) return true;  // ready, or an error the next call reports
    if (r < 0 && errno != EINTR) return false;
    if (r == 0 && Clock::now() >= until) return false;
  }
}

bool DeadlineStream::wait_for_request(std::chrono::milliseconds idle,
                                      const std::function<bool()>& stop) {
  if (pos_ < len_) return true;  // a pipelined request already read
  const auto until = Clock::now() + idle;
  while (!stop()) {
    const auto slice = std::min(until, Clock::now() + std::chrono::milliseconds(100));
    if (wait(POLLIN, slice)) {
      char c;
      const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      return n > 0;
    }
    if (Clock::now() >= until) return false;
  }
  return false;
}

bool DeadlineStream::is_readable() const {
  return pos_ < len_ || wait(POLLIN, deadline_);
}

bool DeadlineStream::is_writable() const {
  return wait(POLLOUT, Clock::now() + lim_->write);
}

ssize_t DeadlineStream::read(char* ptr, size_t size) {
  if (pos_ == len_) {
    const auto until = std::min(deadline_, Clock::now() + lim_->max_wait);
    for (;;) {
      // In slices, so that a server stopping does not wait for the deadline.
      if (!wait(POLLIN, std::min(until, Clock::now() + std::chrono::milliseconds(100)))) {
        const auto now = Clock::now();
        if (now >= deadline_) {
          conn_->read_failure =
              in_headers_ ? ReadFailure::kHeaderTimeout : ReadFailure::kBodyTimeout;
          return -1;
        }
        if (now >= until || stopping_()) return -1;
        continue;
      }
      const ssize_t n = ::recv(fd_, buf_, sizeof buf_, MSG_DONTWAIT);
      if (n > 0) {
        pos_ = 0;
        len_ = static_cast<size_t>(n);
        break;
      }
      if (n == 0) return 0;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
  }
  size_t n = std::min(size, len_ - pos_);
  if (in_headers_) {
    // Hand out bytes up to the end of the headers or the header limit.
    size_t k = 0;
    while (k < n && in_headers_) {
      if (header_bytes_ >= lim_->max_header_bytes) {
        if (k > 0) break;
        conn_->read_failure = ReadFailure::kHeadersTooLarge;
        return -1;
      }
      tail_ = (tail_ << 8) | static_cast<unsigned char>(buf_[pos_ + k]);
      ++header_bytes_;
      ++k;
      if (tail_ == 0x0d0a0d0au) {
        in_headers_ = false;
        deadline_ = Clock::now() + body_budget_;
      }
    }
    n = k;
  }
  std::copy(buf_ + pos_, buf_ + pos_ + n, ptr);
  pos_ += n;
  request_bytes_ += n;
  return static_cast<ssize_t>(n);
}

size_t DeadlineStream::unacknowledged() const {
  int q = 0;
  if (::ioctl(fd_, SIOCOUTQ, &q) != 0 || q < 0) return 0;
  return static_cast<size_t>(q);
}

ssize_t DeadlineStream::write(const char* ptr, size_t size) {
  // Progress is the client acknowledging bytes (the kernel's send queue
  // shrinking), not the socket turning writable: Linux reports a socket
  // writable only once a third of its buffer is free, which a client taking
  // a few KB a second may need many seconds to make.
  auto no_progress_until = Clock::now() + lim_->write;
  // Read only once a write has to wait: a client that keeps up costs no
  // extra system call per write.
  bool waited = false;
  size_t queued = 0;
  for (;;) {
    const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      write_bytes_ += static_cast<size_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!waited) {
      waited = true;
      queued = unacknowledged();
    }
    // Wait for room in slices, so progress and the rate are looked at often.
    const auto t0 = Clock::now();
    const auto slice = std::min({no_progress_until, t0 + std::chrono::milliseconds(100),
                                 t0 + (lim_->write - write_waited_)});
    const bool ready = wait(POLLOUT, slice);
    const auto t1 = Clock::now();
    write_waited_ += t1 - t0;
    const size_t q = unacknowledged();
    if (q < queued) no_progress_until = t1 + lim_->write;
    queued = q;
    if (lim_->min_write_rate > 0 && write_waited_ >= lim_->write) {
      const size_t taken = write_bytes_ - std::min(q, write_bytes_);
      const double waited = std::chrono::duration<double>(write_waited_).count();
      if (static_cast<double>(taken - std::min(taken, taken_at_check_)) <
          static_cast<double>(lim_->min_write_rate) * waited) {
        conn_->write_timed_out = true;
        conn_->write_too_slow = true;
        return -1;
      }
      write_waited_ = {};
      taken_at_check_ = taken;
    }
    if (!ready && t1 >= no_progress_until) {
      conn_->write_timed_out = true;
      return -1;
    }
  }
}

bool DeadlineStream::write_all(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = write(data.data() + off, data.size() - off);
    if (n < 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void DeadlineStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t l = sizeof a;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &l) == 0) address_of(a, ip, port);
}

void DeadlineStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t l = sizeof a;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &l) == 0) address_of(a, ip, port);
}

// ---------------------------------------------------------------------------
// HandlerPool

HandlerPool::HandlerPool(int workers, int overflow, size_t max_overflow)
    : workers_(static_cast<size_t>(std::max(workers, 1))), max_overflow_(max_overflow) {
  for (size_t i = 0; i < workers_; ++i) threads_.emplace_back([this] { work(false); });
  for (int i = 0; i < std::max(overflow, 1); ++i) threads_.emplace_back([this] { work(true); });
}

HandlerPool::~HandlerPool() {
  shutdown();
}

HandlerPool::Mode HandlerPool::current_mode() {
  return t_mode;
}

void HandlerPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (busy_ + jobs_.size() < workers_) {
      jobs_.push_back(std::move(fn));
      cv_.notify_one();
      return;
    }
    const bool shed = overflow_jobs_.size() >= max_overflow_;
    overflow_jobs_.emplace_back(std::move(fn), shed);
  }
  overflow_cv_.notify_one();
}

void HandlerPool::shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ && threads_.empty()) return;
    stop_ = true;
  }
  cv_.notify_all();
  overflow_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void HandlerPool::work(bool overflow) {
  auto& queue_cv = overflow ? overflow_cv_ : cv_;
  for (;;) {
    std::function<void()> fn;
    Mode mode = Mode::kNormal;
    {
      std::unique_lock<std::mutex> l(mu_);
      queue_cv.wait(l,
                    [&] { return stop_ || (overflow ? !overflow_jobs_.empty() : !jobs_.empty()); });
      // Jobs still queued at shutdown run: each owns a socket to close.
      if (overflow) {
        if (overflow_jobs_.empty()) return;
        fn = std::move(overflow_jobs_.front().first);
        mode = overflow_jobs_.front().second ? Mode::kShed : Mode::kOverflow;
        overflow_jobs_.pop_front();
      } else {
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        ++busy_;
      }
    }
    t_mode = mode;
    fn();
    t_mode = Mode::kNormal;
    if (!overflow) {
      std::lock_guard<std::mutex> l(mu_);
      --busy_;
    }
  }
}

// ---------------------------------------------------------------------------
// HttpServer

bool HttpServer::widen_backlog(int backlog) {
  const socket_t s = svr_sock_;
  // listen() again on a listening socket only sets its backlog (Linux, BSD).
  return s != INVALID_SOCKET && ::listen(s, backlog) == 0;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  Connection conn;
  conn.fd = sock;
  const HandlerPool::Mode mode = HandlerPool::current_mode();
  conn.overflow = mode == HandlerPool::Mode::kOverflow;
  bool ret = false;
  bool linger = false;
  if (mode == HandlerPool::Mode::kShed) {
    // Even the overflow queue is full: close at once, unanswered.
    if (counters_ != nullptr) counters_->busy_rejections++;
  } else {
    t_connection = &conn;
    ret = serve(sock, conn);
    t_connection = nullptr;
    linger = conn.read_failure != ReadFailure::kNone;
  }
  if (linger) {
    linger_close(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
  }
  ::close(sock);
  return ret;
}

bool HttpServer::serve(int sock, Connection& conn) {
  const auto header_budget =
      conn.overflow ? std::min(limits_.header, limits_.overflow_read) : limits_.header;
  const auto body_budget =
      conn.overflow ? std::min(limits_.body, limits_.overflow_read) : limits_.body;
  auto stopping = [this] { return svr_sock_ == INVALID_SOCKET; };
  DeadlineStream strm(sock, conn, limits_, body_budget, stopping);
  const size_t count = conn.overflow ? 1 : std::max<size_t>(keep_alive_max_count_, 1);
  bool ret = false;
  for (size_t i = 0; i < count && !stopping(); ++i) {
    if (i == 0) {
      // The first request's deadline runs from the accept.
      strm.start_request(Clock::now() + header_budget);
    } else {
      if (!strm.wait_for_request(limits_.keep_alive, stopping)) break;
      strm.start_request(Clock::now() + header_budget);
    }
    bool closed = false;
    ret = process_request(strm, i + 1 == count, closed, nullptr);
    conn.held.reset();  // the response is written (or its write failed)
    if (conn.write_timed_out) {
      if (counters_ != nullptr) {
        counters_->write_timeouts++;
        if (conn.write_too_slow) counters_->write_too_slow++;
      }
      return false;
    }
    if (conn.read_failure != ReadFailure::kNone) {
      if (counters_ != nullptr && conn.read_failure != ReadFailure::kHeadersTooLarge)
        counters_->read_timeouts++;
      // httplib answered (its error handler turns the 400 into 408 / 431)
      // unless the request line itself was cut short: then answer here. A
      // connection that sent nothing at all is just closed.
      if (!ret && strm.request_bytes() > 0) {
        const auto [status, body] = read_failure_response(conn.read_failure, limits_);
        const char* reason = status == 408 ? "Request Timeout" : "Request Header Fields Too Large";
        if (counters_ != nullptr) counters_->client_errors++;
        strm.write_all(
            fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\n"
                        "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                        status, reason, body.size(), body));
      }
      return false;
    }
    if (!ret || closed) break;
  }
  return ret;
}

}  // namespace sustain::server

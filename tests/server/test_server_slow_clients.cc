// Slow and stalled clients over real HTTP (raw sockets against `sustain
// serve`), with the deadlines made small so each test takes a few seconds:
// a slowloris sending its headers a byte at a time, a body that stops half
// way, a request line never finished, headers that never end, and a stream
// whose client stops reading. Each is answered (408 / 431 with a JSON body)
// or cut off within its deadline, and other clients are served meanwhile.
// Also: every handler thread busy → 503 with Retry-After at once, and
// /health answering while a long prompt prefills.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "e2e/cli_runner.h"
#include "server/serve_process.h"

namespace sustain::test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A connected socket to 127.0.0.1:port; `rcvbuf` > 0 sets SO_RCVBUF first
// (so a client that stops reading fills its window quickly).
int connect_to(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// What the server sent on a raw connection, and whether it closed it.
struct Reply {
  std::string text;
  bool closed = false;
  double seconds = 0;  // from the start of the exchange until the close (or give-up)
};

// Reads whatever is there without blocking; true once the peer closed.
bool drain(int fd, std::string& into) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// Sends `head`, then `drip` one byte per `every` (cycling) until the server
// closes or `give_up` passes, reading what it answers.
Reply slowloris(int port, const std::string& head, const std::string& drip,
                std::chrono::milliseconds every, std::chrono::milliseconds give_up) {
  Reply r;
  const auto t0 = Clock::now();
  const int fd = connect_to(port);
  if (fd < 0) return r;
  send_all(fd, head);
  size_t i = 0;
  while (Clock::now() - t0 < give_up) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(every.count()));
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && drain(fd, r.text)) {
      r.closed = true;
      break;
    }
    if (!drip.empty() && r.text.empty()) {
      const char c = drip[i++ % drip.size()];
      ::send(fd, &c, 1, MSG_NOSIGNAL);
    }
  }
  r.seconds = since(t0);
  ::close(fd);
  return r;
}

int status_of(const std::string& http) {
  if (http.rfind("HTTP/1.1 ", 0) != 0 || http.size() < 12) return -1;
  return std::stoi(http.substr(9, 3));
}

json body_of(const std::string& http) {
  const size_t at = http.find("\r\n\r\n");
  if (at == std::string::npos) return json();
  return json::parse(http.substr(at + 4), nullptr, false);
}

double metric(const ServeProcess& srv, const std::string& name) {
  auto c = srv.client(10);
  auto r = c.Get("/metrics");
  return r && r->status == 200 ? metric_value(r->body, name) : -2;
}

TEST(ServerSlowClients, SlowlorisHeadersGet408WhileOthersAreServed) {
  SUSTAIN_START_SERVER(srv, "-c 256 --header-timeout 1 --http-threads 6");
  const int port = srv->port();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  const std::string drip = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
  std::vector<std::future<Reply>> slow;
  for (int i = 0; i < 4; ++i)
    slow.push_back(std::async(std::launch::async, [&] {
      return slowloris(port, head, drip, std::chrono::milliseconds(100), std::chrono::seconds(6));
    }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Four handler threads are held by the slow clients; the others serve.
  auto c = srv->client(10);
  const auto t0 = Clock::now();
  auto r = c.Post("/v1/completions", R"({"prompt":"hello","max_tokens":4})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_LT(since(t0), 0.9) << "served while the slow clients were still sending";
  for (auto& f : slow) {
    const Reply rep = f.get();
    EXPECT_TRUE(rep.closed) << rep.text;
    EXPECT_EQ(status_of(rep.text), 408) << rep.text;
    const json b = body_of(rep.text);
    ASSERT_TRUE(b.contains("error")) << rep.text;
    EXPECT_EQ(b["error"]["code"], "request_timeout");
    EXPECT_NE(b["error"]["message"].get<std::string>().find("--header-timeout"), std::string::npos);
    // The deadline is 1 s from the accept; the close follows within the
    // linger after the answer (0.5 s).
    EXPECT_GE(rep.seconds, 0.9);
    EXPECT_LT(rep.seconds, 3.0);
  }
  EXPECT_GE(metric(*srv, "sustain_read_timeouts_total"), 4);
  EXPECT_TRUE(srv->alive());
}

TEST(ServerSlowClients, BodyThatStopsHalfWayGets408) {
  SUSTAIN_START_SERVER(srv, "-c 256 --body-timeout 1");
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100\r\n\r\n{\"prompt\":";
  const Reply rep =
      slowloris(srv->port(), head, "", std::chrono::milliseconds(50), std::chrono::seconds(6));
  EXPECT_TRUE(rep.closed);
  EXPECT_EQ(status_of(rep.text), 408) << rep.text;
  const json b = body_of(rep.text);
  ASSERT_TRUE(b.contains("error")) << rep.text;
  EXPECT_NE(b["error"]["message"].get<std::string>().find("--body-timeout"), std::string::npos);
  EXPECT_GE(rep.seconds, 0.9);
  EXPECT_LT(rep.seconds, 3.0);
  // A body sent a byte at a time is bounded the same way.
  const std::string slow_head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
  const Reply drip = slowloris(srv->port(), slow_head, "{\"prompt\": \"aaaaaaa",
                               std::chrono::milliseconds(100), std::chrono::seconds(6));
  EXPECT_EQ(status_of(drip.text), 408) << drip.text;
  EXPECT_LT(drip.seconds, 3.0);
  auto c = srv->client(10);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerSlowClients, UnfinishedRequestLineGets408AndSilenceIsClosed) {
  SUSTAIN_START_SERVER(srv, "-c 256 --header-timeout 0.5");
  // httplib gives up inside the request line; the server still answers.
  const Reply partial = slowloris(srv->port(), "GET /hea", "", std::chrono::milliseconds(50),
                                  std::chrono::seconds(5));
  EXPECT_TRUE(partial.closed);
  EXPECT_EQ(status_of(partial.text), 408) << partial.text;
  EXPECT_TRUE(body_of(partial.text).contains("error")) << partial.text;
  EXPECT_LT(partial.seconds, 2.5);
  // A connection that sends nothing is closed, unanswered, at the deadline.
  const Reply silent =
      slowloris(srv->port(), "", "", std::chrono::milliseconds(50), std::chrono::seconds(5));
  EXPECT_TRUE(silent.closed);
  EXPECT_EQ(silent.text, "");
  EXPECT_GE(silent.seconds, 0.4);
  EXPECT_LT(silent.seconds, 2.5);
}

TEST(ServerSlowClients, HeadersThatNeverEndAreCutAt431) {
  SUSTAIN_START_SERVER(srv, "-c 256");
  const int fd = connect_to(srv->port());
  ASSERT_GE(fd, 0);
  // Header lines under httplib's 8 KiB line limit, fast, without end: the
  // server stops reading a little past the 16 KiB limit and answers.
  send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n");
  const std::string line = "X-Filler: " + std::string(1000, 'f') + "\r\n";
  size_t sent = 0;
  std::string reply;
  const auto t0 = Clock::now();
  bool closed = false;
  while (since(t0) < 5 && !closed) {
    if (sent < (8u << 20) && send_all(fd, line)) sent += line.size();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, sent < (8u << 20) ? 0 : 50) > 0) closed = drain(fd, reply);
    if (status_of(reply) > 0 && reply.find("}") != std::string::npos) break;
  }
  ::close(fd);
  EXPECT_EQ(status_of(reply), 431) << reply.substr(0, 300);
  EXPECT_TRUE(body_of(reply).contains("error")) << reply.substr(0, 300);
  EXPECT_LT(sent, 4u << 20) << "the server should stop reading long before";
  std::printf("431 after the client had sent %zu KiB of headers\n", sent >> 10);
  auto c = srv->client(10);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A chat stream with many large events (8 choices, 20 top logprobs each),
// as raw HTTP: it fills a slow reader's buffers quickly.
std::string big_stream_request() {
  const json big = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                    {"max_tokens", 4000},
                    {"n", 8},
                    {"logprobs", true},
                    {"top_logprobs", 20},
                    {"temperature", 1.0},
                    {"ignore_eos", true},
                    {"stream", true}};
  const std::string body = big.dump();
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(ServerSlowClients, StreamWhoseClientStopsReadingIsCutOffOthersContinue) {
  SUSTAIN_START_SERVER(srv, "-c 4096 -np 10 --write-timeout 1");
  // The big stream, on a socket with a small receive buffer, that the
  // client never reads.
  const int fd = connect_to(srv->port(), 4096);
  ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  ASSERT_TRUE(send_all(fd, big_stream_request()));
  // Meanwhile another stream runs to its end.
  auto c = srv->client(30);
  const json small = {
      {"prompt", "Once upon a time"}, {"max_tokens", 64}, {"ignore_eos", true}, {"stream", true}};
  const SseResult other = post_sse(c, "/v1/completions", small);
  EXPECT_EQ(other.status, 200);
  EXPECT_TRUE(other.done) << "another stream finished while one client was stalled";
  // The stalled one: its write times out, the response ends, its engine
  // requests are cancelled.
  double timeouts = 0, running = 1;
  while (since(t0) < 9) {
    timeouts = metric(*srv, "sustain_write_timeouts_total");
    running = metric(*srv, "sustain_requests_running");
    if (timeouts >= 1 && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double took = since(t0);
  EXPECT_EQ(timeouts, 1);
  EXPECT_EQ(running, 0);
  EXPECT_GE(metric(*srv, "sustain_requests_cancelled_total"), 8);
  std::printf("stalled stream cut off after %.2f s\n", took);
  // The client reads at last: what was buffered, then the close, no [DONE].
  std::string got;
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 50);
    closed = drain(fd, got);
  }
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_EQ(status_of(got), 200);
  EXPECT_EQ(got.find("[DONE]"), std::string::npos);
  // And the server still serves.
  auto r = c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A client on a small receive buffer that reads a stream `chunk` bytes per
// `every` until the server closes or `give_up` passes.
struct Trickle {
  bool closed = false;
  size_t bytes = 0;
  double seconds = 0;
  std::string head;  // the first bytes: the status line
};

Trickle trickle_read(int port, size_t chunk, std::chrono::milliseconds every,
                     std::chrono::milliseconds give_up, const std::atomic<bool>* stop = nullptr) {
  Trickle t;
  const int fd = connect_to(port, 4096);
  if (fd < 0) return t;
  const auto t0 = Clock::now();
  send_all(fd, big_stream_request());
  std::vector<char> buf(chunk);
  while (Clock::now() - t0 < give_up && !(stop != nullptr && *stop)) {
    std::this_thread::sleep_for(every);
    const ssize_t n = ::recv(fd, buf.data(), chunk, MSG_DONTWAIT);
    if (n == 0) {
      t.closed = true;
      break;
    }
    if (n > 0) {
      if (t.head.size() < 64) t.head.append(buf.data(), std::min<size_t>(n, 64 - t.head.size()));
      t.bytes += static_cast<size_t>(n);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      t.closed = true;
      break;
    }
  }
  t.seconds = since(t0);
  ::close(fd);
  return t;
}

// A client that does read, but a trickle, held a handler thread for as long
// as it kept reading: each write made some progress, so the per-write
// deadline never fired. The minimum rate cuts it off; a client reading above
// the rate is served to the end of its window.
TEST(ServerSlowClients, ATrickleReaderIsCutOffAtTheMinimumWriteRate) {
  SUSTAIN_START_SERVER(srv, "-c 8192 -np 10 --write-timeout 2 --min-write-rate 20000");
  const int port = srv->port();
  // About 5 KB/s: below the rate. It reads on until told to stop (what the
  // server had queued before it gave up still reaches it, so it sees the
  // close only much later).
  std::atomic<bool> stop{false};
  const auto t0 = Clock::now();
  auto slow = std::async(std::launch::async, [port, &stop] {
    return trickle_read(port, 512, std::chrono::milliseconds(100), std::chrono::seconds(30),
                        &stop);
  });
  // About 400 KB/s: above it (or simply keeping up with generation).
  const Trickle fast =
      trickle_read(port, 4096, std::chrono::milliseconds(10), std::chrono::seconds(4));
  // The server gives the trickle up: its write fails, its 8 engine requests
  // are cancelled, and the handler thread is free.
  double too_slow = 0, running = 1;
  while (since(t0) < 20) {
    too_slow = metric(*srv, "sustain_write_too_slow_total");
    running = metric(*srv, "sustain_requests_running");
    if (too_slow >= 1 && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double took = since(t0);
  stop = true;
  const Trickle t = slow.get();
  std::printf("trickle reader (%zu bytes read) given up after %.2f s; fast reader: %zu bytes in "
              "%.2f s\n",
              t.bytes, took, fast.bytes, fast.seconds);
  EXPECT_EQ(status_of(t.head), 200) << t.head;
  EXPECT_EQ(too_slow, 1);
  EXPECT_EQ(running, 0);
  EXPECT_EQ(status_of(fast.head), 200) << fast.head;
  EXPECT_FALSE(fast.closed) << "a reader above the rate was cut off after " << fast.seconds
                            << " s";
  EXPECT_EQ(metric(*srv, "sustain_write_timeouts_total"), 1) << "the trickle's, and no other";
  auto c = srv->client(10);
  auto r = c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// The same trickle with no minimum rate is served on: the rule above is what
// cut it off, not the per-write deadline.
TEST(ServerSlowClients, WithoutAMinimumRateATrickleReaderIsServedOn) {
  SUSTAIN_START_SERVER(srv, "-c 8192 -np 10 --write-timeout 2 --min-write-rate 0");
  const int port = srv->port();
  std::atomic<bool> stop{false};
  auto slow = std::async(std::launch::async, [port, &stop] {
    return trickle_read(port, 512, std::chrono::milliseconds(100), std::chrono::seconds(30),
                        &stop);
  });
  // Long past the write deadline: the client acknowledges bytes all along,
  // so its writes make progress and it is served on.
  std::this_thread::sleep_for(std::chrono::seconds(8));
  const double timeouts = metric(*srv, "sustain_write_timeouts_total");
  stop = true;
  const Trickle t = slow.get();
  std::printf("trickle reader without a minimum: %zu bytes in %.2f s, closed=%d\n", t.bytes,
              t.seconds, t.closed);
  EXPECT_EQ(status_of(t.head), 200) << t.head;
  EXPECT_FALSE(t.closed);
  EXPECT_EQ(timeouts, 0);
}

// Opens a stream that runs on a handler thread: its status line says 200.
// A 503 means no thread was free (the connection that polled /health during
// startup may still hold one for a moment): try again.
int open_stream(int port) {
  const std::string body = json{
      {"prompt", "Once upon a time"},
      {"max_tokens", 3000},
      {"ignore_eos", true},
      {"stream", true}}.dump();
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = connect_to(port);
    if (fd < 0) return -1;
    send_all(fd,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body);
    std::string got;
    for (int i = 0; i < 100 && got.find("\r\n") == std::string::npos; ++i) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 50);
      if (drain(fd, got)) break;
    }
    if (status_of(got) == 200) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

TEST(ServerSlowClients, EveryHandlerThreadBusyGets503AtOnce) {
  SUSTAIN_START_SERVER(srv, "-c 4096 -np 2 --http-threads 2");
  // Two running streams hold both handler threads.
  const int a = open_stream(srv->port());
  ASSERT_GE(a, 0);
  const int b = open_stream(srv->port());
  ASSERT_GE(b, 0);
  auto c = srv->client(10);
  auto t0 = Clock::now();
  auto r = c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
  const double took = since(t0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  const json j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
  EXPECT_EQ(j["error"]["code"], "server_busy");
  EXPECT_LT(took, 1.0);
  std::printf("503 with every handler thread busy after %.1f ms\n", took * 1000.0);
  // /health and /metrics are still answered on the overflow path.
  auto h = srv->client(10).Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_GE(metric(*srv, "sustain_busy_rejections_total"), 1);
  // The streams' clients go away: their threads serve again.
  ::close(a);
  ::close(b);
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto c2 = srv->client(10);
    r = c2.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
    status = r ? r->status : -1;
  }
  EXPECT_EQ(status, 200);
}

// A burst of new connections is held by the kernel until the server accepts
// them, not dropped: httplib listens with a backlog of 5, and each
// connection past that waited for a SYN retransmission (1 s, then 3 s) before
// the server saw it (64 clients at once: 5 of them 1.04 s instead of 0.05 s).
// With the server stopped (SIGSTOP), nothing is accepted, so how many
// connect() calls complete is the backlog alone: all 48 with the widened
// one, 10 with httplib's (checked). Once it runs again, every one is answered.
TEST(ServerSlowClients, ABurstOfConnectionsWaitsInTheBacklogNotForRetransmits) {
  SUSTAIN_START_SERVER(srv, "-c 4096 -np 2");
  constexpr int kConns = 48;
  srv->signal(SIGSTOP);
  struct Resume {
    const ServeProcess* p;
    ~Resume() { p->signal(SIGCONT); }
  } resume{srv.get()};
  std::vector<int> fds;
  for (int i = 0; i < kConns; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(srv->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
    fds.push_back(fd);
  }
  // Under the 3 s of the second SYN retransmission.
  std::vector<bool> done(kConns, false);
  int connected = 0;
  const auto t0 = Clock::now();
  while (connected < kConns && since(t0) < 2.5) {
    std::vector<pollfd> ps;
    for (int i = 0; i < kConns; ++i)
      if (!done[i]) ps.push_back(pollfd{fds[i], POLLOUT, 0});
    ::poll(ps.data(), ps.size(), 100);
    for (const auto& p : ps) {
      if (!(p.revents & (POLLOUT | POLLERR | POLLHUP))) continue;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      const int i = static_cast<int>(std::find(fds.begin(), fds.end(), p.fd) - fds.begin());
      done[i] = true;
      if (err == 0) ++connected;
    }
  }
  EXPECT_EQ(connected, kConns) << "connections the kernel completed while the server was "
                                  "stopped, in "
                               << since(t0) << " s";
  srv->signal(SIGCONT);
  int answered = 0;
  for (int fd : fds) {
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    if (!send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) continue;
  }
  for (int fd : fds) {
    std::string text;
    const auto t1 = Clock::now();
    while (since(t1) < 10) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 100);
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && drain(fd, text)) break;
    }
    if (status_of(text) == 200) ++answered;
    ::close(fd);
  }
  EXPECT_EQ(answered, kConns);
  EXPECT_TRUE(srv->alive());
}

TEST(ServerSlowClients, SigtermDoesNotWaitForSlowClients) {
  SUSTAIN_START_SERVER(srv, "-c 256 --header-timeout 60");
  // One connection silent, one half way through its headers: both held by
  // reads that would wait a minute.
  const int silent = connect_to(srv->port());
  const int partial = connect_to(srv->port());
  ASSERT_GE(silent, 0);
  ASSERT_GE(partial, 0);
  send_all(partial, "GET /health HTTP/1.1\r\nHost: x\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Clock::now();
  EXPECT_EQ(srv->signal_and_wait(SIGTERM, 4000), 0);
  const double took = since(t0);
  EXPECT_LT(took, 2.0);
  std::printf("SIGTERM to exit with two slow clients connected: %.2f s\n", took);
  ::close(silent);
  ::close(partial);
}

TEST(ServerSlowClients, HealthAnswersFastWhileALongPromptPrefills) {
  SUSTAIN_REQUIRE_REF();
  // aidreams260K with 16-token ubatches: a 12000-token prompt is 750 forward
  // calls, each attending over everything before it.
  std::string why;
  auto srv =
      ServeProcess::start("-c 16384 -ub 16 -np 2", &why, ref_path("models/aidreams260K-Q8_0.gguf"));
  ASSERT_TRUE(srv != nullptr) << why;
  json ids = json::array();
  for (int i = 0; i < 12000; ++i) ids.push_back(3 + (i * 7) % 500);
  const std::string body = json{{"prompt", ids}, {"max_tokens", 1}}.dump();
  std::atomic<bool> done{false};
  const auto t0 = Clock::now();
  auto prefill = std::async(std::launch::async, [&] {
    auto c = srv->client(120);
    auto r = c.Post("/v1/completions", body, "application/json");
    done = true;
    return r ? r->status : -1;
  });
  // Probe once the engine has the request, until it answers.
  while (!done && metric(*srv, "sustain_requests_running") < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::vector<double> ms;
  while (!done) {
    auto c = srv->client(10);  // a fresh connection each time, like a load balancer
    const auto t = Clock::now();
    auto r = c.Get("/health");
    const double took = since(t) * 1000.0;
    if (done) break;  // the prefill may have ended during this probe
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    ms.push_back(took);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(prefill.get(), 200);
  const double prefill_s = since(t0);
  ASSERT_GE(ms.size(), 10u) << "the prefill (" << prefill_s << " s) was too short to measure";
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2], worst = ms.back();
  std::printf("/health during a %.2f s prefill: %zu probes, median %.2f ms, max %.2f ms\n",
              prefill_s, ms.size(), median, worst);
  RecordProperty("health_median_ms", std::to_string(median));
  RecordProperty("health_max_ms", std::to_string(worst));
  // 100 ms is the goal; the bound leaves room for two busy, shared cores.
  EXPECT_LT(worst, 1000.0);
}

TEST(ServerSlowClients, TimeoutFlagsOutOfRangeAreRefused) {
  for (const char* flag : {"--header-timeout", "--body-timeout", "--write-timeout"}) {
    for (const char* v : {"0", "-1", "abc"}) {
      const CliResult r = run_cli(std::string("serve -m unused.gguf ") + flag + " " + v);
      EXPECT_NE(r.exit_code, 0) << flag << " " << v;
      EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    }
  }
  for (const char* v : {"-1", "abc", "1e12"}) {
    const CliResult r = run_cli(std::string("serve -m unused.gguf --min-write-rate ") + v);
    EXPECT_NE(r.exit_code, 0) << v;
    EXPECT_NE(r.err.find("--min-write-rate"), std::string::npos) << r.err;
  }
  const CliResult r = run_cli("serve -m unused.gguf --http-threads -3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--http-threads"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sustain::test

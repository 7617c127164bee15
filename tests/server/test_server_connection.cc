// The connection layer under its own HTTP server, without an engine: what a
// request holds (Connection::held) is released only once its response is on
// the wire. A completion's count in ServerState::active rides on it, and a
// --split job whose rank died ends the process as soon as the count is zero,
// so a release before the write would cut a plain response's 503 off
// unsent.
#include <gtest/gtest.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "server/connection.h"

namespace sustain::server {
namespace {

using namespace std::chrono_literals;

TEST(HttpConnection, WhatARequestHoldsIsReleasedOnlyOnceItsResponseIsWritten) {
  HttpServer http;
  http.configure(ConnectionLimits{}, nullptr);
  std::promise<void> received;
  std::shared_future<void> got = received.get_future().share();
  // 1: released before the client had the response; 0: after; -1: never.
  std::atomic<int> released_early{-1};
  std::atomic<bool> had_connection{false};
  http.Post("/hold", [&](const httplib::Request&, httplib::Response& res) {
    Connection* c = current_connection();
    had_connection = c != nullptr;
    if (c == nullptr) return;
    // The release waits (at most 5 s) for the client to have the response:
    // were it released before the write, the response would only go out
    // after that wait timed out.
    c->held = std::shared_ptr<void>(nullptr, [got, &released_early](void*) {
      released_early = got.wait_for(5s) == std::future_status::timeout ? 1 : 0;
    });
    res.set_content(std::string(300'000, 'x'), "text/plain");  // larger than one write
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread server([&] { http.listen_after_bind(); });

  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(20, 0);
  auto r = client.Post("/hold", "", "text/plain");
  received.set_value();
  for (int i = 0; i < 500 && released_early.load() < 0; ++i) std::this_thread::sleep_for(10ms);
  http.stop();
  server.join();

  ASSERT_TRUE(had_connection.load()) << "the handler ran outside a served connection";
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), 300'000u);
  EXPECT_EQ(released_early.load(), 0) << "the hold was released before the response was written";
}

}  // namespace
}  // namespace sustain::server

// Private to engine/: the state a request shares between the engine thread
// (producer of events) and the client holding its Stream (consumer).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "engine/api.h"

namespace sustain::engine::detail {

// Wakes the engine loop (a cancel, a dropped Stream, a new request).
struct Waker {
  std::mutex mu;
  std::condition_variable cv;
  bool pending = false;
  void notify() {
    {
      std::lock_guard<std::mutex> l(mu);
      pending = true;
    }
    cv.notify_one();
  }
};

struct RequestState {
  uint64_t id = 0;
  Request req;
  Clock::time_point t_submit;
  std::atomic<bool> cancelled{false};
  std::shared_ptr<Waker> waker;

  // Guarded by mu: what the consumer has not read yet.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenEvent> pending;
  bool done = false;      // the final event is ready
  bool consumed = false;  // the final event was handed out
  Event final_event;

  void push_token(TokenEvent t) {
    {
      std::lock_guard<std::mutex> l(mu);
      pending.push_back(std::move(t));
    }
    cv.notify_all();
  }
  void finish(Event e) {
    {
      std::lock_guard<std::mutex> l(mu);
      final_event = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace sustain::engine::detail

#include "engine/request_state.h"

namespace sustain::engine {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kNone: return "none";
    case Finish::kLength: return "length";
    case Finish::kStop: return "stop";
    case Finish::kCancelled: return "cancelled";
    case Finish::kError: return "error";
  }
  return "unknown";
}

Stream::~Stream() {
  if (!s_) return;
  bool done;
  {
    std::lock_guard<std::mutex> l(s_->mu);
    done = s_->done;
  }
  if (!done) {
    s_->cancelled.store(true);
    s_->waker->notify();
  }
}

uint64_t Stream::id() const { return s_ ? s_->id : 0; }

std::optional<Event> Stream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(s_->mu);
  auto ready = [&] { return !s_->pending.empty() || s_->done; };
  if (timeout == std::chrono::milliseconds::max()) {
    s_->cv.wait(l, ready);
  } else if (!s_->cv.wait_for(l, timeout, ready)) {
    return std::nullopt;
  }
  Event e;
  e.tokens.swap(s_->pending);
  if (s_->done) {
    if (s_->consumed) {
      e.done = true;
      e.finish = s_->final_event.finish;
      return e;
    }
    auto tokens = std::move(e.tokens);
    e = std::move(s_->final_event);
    e.tokens = std::move(tokens);
    s_->consumed = true;
    s_->final_event.finish = e.finish;
  }
  return e;
}

Event Stream::wait() {
  Event all;
  while (true) {
    Event e = *next();
    for (auto& t : e.tokens) all.tokens.push_back(std::move(t));
    if (e.done) {
      e.tokens = std::move(all.tokens);
      return e;
    }
  }
}

}  // namespace sustain::engine

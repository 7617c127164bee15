#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>

namespace sustain {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(index);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::run_job(const std::function<void(int)>& job) {
  if (n_threads_ == 1) {
    job(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &job;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  job(0);
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  const size_t nt = static_cast<size_t>(n_threads_);
  run_job([&](int t) {
    const size_t begin = n * static_cast<size_t>(t) / nt;
    const size_t end = n * (static_cast<size_t>(t) + 1) / nt;
    if (begin < end) fn(begin, end, t);
  });
}

void ThreadPool::parallel_for_dynamic(size_t n, size_t grain,
                                      const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  std::atomic<size_t> next{0};
  run_job([&](int t) {
    for (;;) {
      const size_t begin = next.fetch_add(grain);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + grain), t);
    }
  });
}

}  // namespace sustain

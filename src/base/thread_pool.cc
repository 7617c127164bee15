#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SUSTAIN_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define SUSTAIN_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define SUSTAIN_CPU_RELAX() ((void)0)
#endif

namespace sustain {
namespace {
// How long an idle worker spins before it sleeps. Long enough to bridge the
// gap between two parallel regions of one decode step, short enough that a
// pool left idle gives its cores back almost at once.
constexpr auto kSpinTime = std::chrono::microseconds(200);
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
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
    // Spin for a new generation, then sleep until one arrives.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
      int spins = 0;
      while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
        SUSTAIN_CPU_RELAX();
        if (++spins % 256 == 0 && std::chrono::steady_clock::now() > deadline) break;
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_start_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        gen = generation_.load(std::memory_order_acquire);
      }
    }
    seen = gen;
    if (stop_.load()) return;
    const std::function<void(int)>* job = job_;
    (*job)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_job(const std::function<void(int)>& job) {
  if (n_threads_ == 1) {
    job(0);
    return;
  }
  {
    // The mutex orders the publication against a worker that is about to
    // sleep, so no wake-up is lost; notify is cheap when nobody waits.
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &job;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  job(0);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    SUSTAIN_CPU_RELAX();
    // A worker that was descheduled can take a while: stop burning the core.
    if (++spins > 4096) std::this_thread::yield();
  }
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

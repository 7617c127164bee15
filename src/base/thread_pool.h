// A persistent pool of worker threads. Created once (per engine or tool run)
// from `--threads`; no thread is created per operation. parallel_for splits
// [0, n) into one contiguous range per thread (static partition), and the
// calling thread takes part as worker 0.
//
// Dispatch is the hot path of decode: a small model runs hundreds of
// parallel regions per token, each a few tens of microseconds long. Waking a
// sleeping thread through the kernel costs about as much, so idle workers
// first spin on an atomic generation counter for a bounded time and only
// then sleep on a condition variable; the caller spins for completion.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sustain {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, thread_index) is called once per non-empty range.
  void parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn);

  // Like parallel_for, but hands out chunks of `grain` items dynamically, for
  // uneven work (e.g. tensors of different sizes).
  void parallel_for_dynamic(size_t n, size_t grain,
                            const std::function<void(size_t, size_t, int)>& fn);

  // Runs fn(thread_index) once on every thread of the pool.
  void run_on_all(const std::function<void(int)>& fn) { run_job(fn); }

  // Hardware threads available to this process (sched affinity), at least 1.
  static int hardware_threads();

 private:
  void worker_loop(int index);
  void run_job(const std::function<void(int)>& job);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace sustain

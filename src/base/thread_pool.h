// A persistent pool of worker threads. Created once (per engine or tool run)
// from `--threads`; no thread is created per operation. One thread at a time
// may start parallel regions on a pool.
//
// Dispatch is the hot path of decode: a small model runs hundreds of
// parallel regions per token, each a few tens of microseconds long. Waking a
// sleeping thread through the kernel costs about as much, so idle workers
// first spin for a new region for a bounded time and only then sleep
// (std::atomic::wait on the generation: a futex on Linux).
//
// Claim-based join. parallel_for and parallel_for_dynamic split a region into
// at most size() "slots" (parallel_for: slot s is the s-th contiguous range of
// a static partition; parallel_for_dynamic: every slot pulls grains from a
// shared counter). The caller and the workers claim slots from one atomic
// word; the caller claims first (so slot 0 normally runs on it) and keeps
// claiming until none are left, then waits only for the slots a worker has
// claimed and is still running. A worker that is descheduled (an
// oversubscribed machine) therefore costs nothing unless it had already
// claimed a slot: the caller does its share instead of waiting for it to be
// scheduled again. run_on_all is different: fn(i) runs once on every pool
// thread i, concurrently, and the caller waits for all of them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace sustain {

class ThreadPool {
 public:
  // At most kMaxThreads threads (the slot fields of the claim word).
  static constexpr int kMaxThreads = 32767;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, slot) is called once per non-empty range of a static
  // partition of [0, n) into at most size() ranges. `slot` is the range's
  // index: unique among the calls of one region and < size(), so it may
  // index per-thread scratch, but it is not the identity of the OS thread
  // (the caller may run several slots one after another).
  void parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn);

  // Like parallel_for, but hands out chunks of `grain` items dynamically, for
  // uneven work (e.g. tensors of different sizes). `slot` as above: calls
  // with the same slot never overlap in time.
  void parallel_for_dynamic(size_t n, size_t grain,
                            const std::function<void(size_t, size_t, int)>& fn);

  // Runs fn(thread_index) exactly once on every thread of the pool (the
  // caller is thread 0), concurrently, and returns when all have finished.
  void run_on_all(const std::function<void(int)>& fn);

  // Hardware threads available to this process (sched affinity), at least 1.
  static int hardware_threads();

 private:
  // A type-erased job: run(ctx, slot_or_thread_index). Lives on the caller's
  // stack for the duration of one region.
  struct Job {
    void (*run)(const void* ctx, int index);
    const void* ctx;
  };

  void worker_loop(int index);
  // Runs job over n_slots claimable slots, or, with all_threads, once on
  // every pool thread.
  void run_job(const Job& job, int n_slots, bool all_threads);
  void publish(uint64_t word);

  int n_threads_;
  uint32_t generation_ = 0;  // last generation published (caller only)
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<const Job*> job_{nullptr};
  // generation:32 | all_threads:1 | n_slots:15 | next_slot:16. Workers spin
  // (then sleep) on the generation; slots are claimed by CAS on next_slot.
  alignas(64) std::atomic<uint64_t> claim_{0};
  // The generation of claim_, stored after it; sleeping workers wait on it.
  std::atomic<uint32_t> wake_{0};
  // Slots (or, for run_on_all, threads) finished by workers this region.
  alignas(64) std::atomic<int> done_{0};
};

}  // namespace sustain

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

// The claim word: generation:32 | all_threads:1 | n_slots:15 | next_slot:16.
constexpr uint64_t kAllThreads = uint64_t{1} << 31;
constexpr uint64_t kSlotMask = 0x7fff;
inline uint32_t word_gen(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
inline int word_slots(uint64_t w) { return static_cast<int>((w >> 16) & kSlotMask); }
inline int word_next(uint64_t w) { return static_cast<int>(w & 0xffff); }
inline uint64_t make_word(uint32_t gen, int n_slots, int next, bool all) {
  return (uint64_t{gen} << 32) | (all ? kAllThreads : 0) |
         (static_cast<uint64_t>(n_slots) << 16) | static_cast<uint64_t>(next);
}
// Claims the next slot of w's generation. On success returns the slot; on
// failure returns -1 with w reloaded (it may name a newer generation).
inline int try_claim(std::atomic<uint64_t>& claim, uint64_t& w) {
  while (!(w & kAllThreads) && word_next(w) < word_slots(w)) {
    const uint32_t gen = word_gen(w);
    if (claim.compare_exchange_weak(w, w + 1, std::memory_order_acquire,
                                    std::memory_order_acquire)) {
      return word_next(w);
    }
    if (word_gen(w) != gen) break;
  }
  return -1;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::clamp(n_threads, 1, kMaxThreads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  publish(make_word(++generation_, 0, 0, false));
  for (auto& t : workers_) t.join();
}

int ThreadPool::hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::publish(uint64_t word) {
  claim_.store(word, std::memory_order_release);
  // seq_cst: the store must not pass the library's check for sleepers in
  // notify_all (a load), or a worker going to sleep could be missed.
  // notify_all costs no system call while no worker sleeps, and never waits
  // for a woken worker to be scheduled (a condition variable's broadcast can:
  // glibc's pthread_cond_broadcast waits for waiters woken by the previous
  // broadcast that have not yet run, which stalls the caller exactly when
  // the machine is oversubscribed).
  wake_.store(word_gen(word), std::memory_order_seq_cst);
  wake_.notify_all();
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;  // generation of the last claim word this thread acted on
  for (;;) {
    // Spin for a new generation, then sleep until one arrives.
    uint64_t w = claim_.load(std::memory_order_acquire);
    if (word_gen(w) == seen) {
      const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
      int spins = 0;
      while (word_gen(w = claim_.load(std::memory_order_acquire)) == seen) {
        SUSTAIN_CPU_RELAX();
        if (++spins % 256 == 0 && std::chrono::steady_clock::now() > deadline) break;
      }
      // wait() returns once wake_ differs from `seen`; publish() stores
      // claim_ before wake_, so a changed wake_ means a new claim word.
      while (word_gen(w) == seen) {
        wake_.wait(seen, std::memory_order_acquire);
        w = claim_.load(std::memory_order_acquire);
      }
    }
    // w may be newer than the generation that woke us: regions that finished
    // without this thread are simply skipped. Act on w's generation, and
    // remember it, so a run_on_all job is neither run twice nor missed.
    for (;;) {
      seen = word_gen(w);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (w & kAllThreads) {
        // The caller waits for every thread, so the job is live.
        const Job* job = job_.load(std::memory_order_relaxed);
        job->run(job->ctx, index);
        done_.fetch_add(1, std::memory_order_release);
        break;
      }
      const int slot = try_claim(claim_, w);
      if (slot < 0) {
        if (word_gen(w) != seen) continue;  // a newer region began meanwhile
        break;  // nothing left: never touch this region's job
      }
      // A claimed slot keeps the caller (and so the job) waiting until it is
      // done; the acquire of the claim made the job pointer visible.
      const Job* job = job_.load(std::memory_order_relaxed);
      job->run(job->ctx, slot);
      done_.fetch_add(1, std::memory_order_release);
      w = claim_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::run_job(const Job& job, int n_slots, bool all_threads) {
  job_.store(&job, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  // Publishing with next_slot = 1 claims slot 0 for the caller. For
  // all_threads the slot fields are unused.
  publish(make_word(++generation_, n_slots, all_threads ? 0 : 1, all_threads));
  job.run(job.ctx, 0);
  int waiting_for = n_threads_ - 1;
  if (!all_threads) {
    int own = 1;
    uint64_t w = claim_.load(std::memory_order_relaxed);
    for (int slot; (slot = try_claim(claim_, w)) >= 0; ++own) {
      job.run(job.ctx, slot);
      w = claim_.load(std::memory_order_relaxed);
    }
    waiting_for = n_slots - own;  // slots that workers claimed
  }
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != waiting_for) {
    SUSTAIN_CPU_RELAX();
    // A worker that was descheduled can take a while: stop burning the core.
    if (++spins > 4096) std::this_thread::yield();
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  const Job job{[](const void* ctx, int t) {
                  (*static_cast<const std::function<void(int)>*>(ctx))(t);
                },
                &fn};
  run_job(job, n_threads_, true);
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  const size_t n_slots = std::min(n, static_cast<size_t>(n_threads_));
  if (n_slots == 1) {
    fn(0, n, 0);
    return;
  }
  struct Ctx {
    size_t n, n_slots;
    const std::function<void(size_t, size_t, int)>* fn;
  } ctx{n, n_slots, &fn};
  const Job job{[](const void* p, int s) {
                  const auto& c = *static_cast<const Ctx*>(p);
                  const size_t begin = c.n * static_cast<size_t>(s) / c.n_slots;
                  const size_t end = c.n * (static_cast<size_t>(s) + 1) / c.n_slots;
                  if (begin < end) (*c.fn)(begin, end, s);
                },
                &ctx};
  run_job(job, static_cast<int>(n_slots), false);
}

void ThreadPool::parallel_for_dynamic(size_t n, size_t grain,
                                      const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t n_grains = (n - 1) / grain + 1;
  const size_t n_slots = std::min(n_grains, static_cast<size_t>(n_threads_));
  if (n_slots == 1) {
    for (size_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain), 0);
    return;
  }
  struct Ctx {
    size_t n, grain;
    std::atomic<size_t> next{0};
    const std::function<void(size_t, size_t, int)>* fn;
  } ctx{n, grain, {}, &fn};
  const Job job{[](const void* p, int s) {
                  auto& c = *const_cast<Ctx*>(static_cast<const Ctx*>(p));
                  for (;;) {
                    const size_t begin = c.next.fetch_add(c.grain, std::memory_order_relaxed);
                    if (begin >= c.n) break;
                    (*c.fn)(begin, std::min(c.n, begin + c.grain), s);
                  }
                },
                &ctx};
  run_job(job, static_cast<int>(n_slots), false);
}

}  // namespace sustain

// The thread pool: every index is visited exactly once, whatever the split,
// back-to-back regions (the spin path) and regions after an idle pause (the
// sleep path) both complete, and a pool of one runs inline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace sustain {
namespace {

TEST(ThreadPool, EveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t b, size_t e, int t) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, threads);
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << threads << " " << n;
      std::vector<std::atomic<int>> dyn(n);
      pool.parallel_for_dynamic(n, 3, [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) dyn[i]++;
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(dyn[i].load(), 1);
    }
  }
}

TEST(ThreadPool, ManyBackToBackRegionsAndIdlePauses) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int r = 0; r < 2000; ++r)
    pool.parallel_for(3, [&](size_t b, size_t e, int) { sum += static_cast<long>(e - b); });
  EXPECT_EQ(sum.load(), 6000);
  // Long enough for the workers to stop spinning and sleep.
  for (int r = 0; r < 3; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int> ran{0};
    pool.run_on_all([&](int) { ran++; });
    EXPECT_EQ(ran.load(), 3);
  }
}

}  // namespace
}  // namespace sustain

// A decode step allocates nothing: after the first call sizes the buffers,
// sample(), accept() and top_probs() on a 151936-token vocabulary make no
// heap allocation. Counted by replacing the global operator new in this test
// binary (which is why it is a binary of its own).
#include <array>
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/sampler.h"

namespace {
std::atomic<long> g_allocations{0};
}

// GCC pairs its built-in idea of operator new with the free() below once they
// are inlined and warns, although both sides are replaced here consistently.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace sustain::sampling {
namespace {

TEST(SamplerAlloc, CounterSeesAllocations) {
  // Guards the test below against a counter that never moves.
  const long before = g_allocations.load();
  auto* v = new std::vector<int>(1000);
  delete v;
  EXPECT_GE(g_allocations.load() - before, 2);
}

TEST(SamplerAlloc, NoAllocationAfterTheFirstCall) {
  const int32_t n_vocab = 151936;
  std::vector<float> logits(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) logits[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;

  SamplerConfig configs[5];
  configs[0].repeat_penalty = 1.1f;  // the default chain plus penalties
  configs[0].presence_penalty = 0.5f;
  configs[1].top_k = 0;  // top-p over the whole vocabulary (nucleus_logits)
  configs[1].min_p = 0.0f;
  configs[2].temperature = 0.0f;  // greedy
  configs[2].repeat_penalty = 1.3f;
  configs[3].top_k = 0;  // a temperature alone (softmax_logits, top_probs of it)
  configs[3].top_p = 1.0f;
  configs[3].min_p = 0.0f;
  configs[4].top_k = 0;  // top-p and min-p (min-p's bound as the floor)

  for (const SamplerConfig& c : configs) {
    Sampler s(c);
    for (int32_t t = 0; t < 100; ++t) s.accept(t);  // a prompt
    s.sample(logits.data(), n_vocab);               // sizes the buffers
    std::array<TokenProb, 20> top;

    const long before = g_allocations.load();
    long sum = 0;
    for (int step = 0; step < 50; ++step) {
      sum += s.sample(logits.data(), n_vocab);
      s.accept(step);
      sum += static_cast<long>(s.top_probs(top));
    }
    const long allocated = g_allocations.load() - before;
    EXPECT_EQ(allocated, 0) << "temperature " << c.temperature << ", top_k " << c.top_k;
    EXPECT_GT(sum, 0);
  }
}

}  // namespace
}  // namespace sustain::sampling

#include "sampling/processors.h"

#include "sampling/constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/status.h"

namespace sustain::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// top_p() first sorts this many candidates and widens by kTopPGrowth while the
// nucleus is not yet complete: with a full vocabulary (~150K) sorting
// everything costs far more than the few hundred tokens a nucleus usually has.
constexpr size_t kTopPFirstSort = 256;
constexpr size_t kTopPGrowth = 4;

// Makes data[begin, end) hold, sorted, the candidates that rank
// begin..end-1 among data[begin, size), given that data[0, begin) already
// holds the top `begin` in order.
void sort_range(Candidates& c, size_t begin, size_t end) {
  Candidate* d = c.data;
  if (end < c.size) std::nth_element(d + begin, d + end - 1, d + c.size, ranks_before);
  std::sort(d + begin, d + end, ranks_before);
}

}  // namespace

void fill_candidates(Candidates& c, Candidate* buffer, const float* logits, int32_t n_vocab) {
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float l = logits[i];
    buffer[i] = Candidate{i, std::isnan(l) ? kNegInf : l, 0.0f};
  }
  c.data = buffer;
  c.size = static_cast<size_t>(n_vocab);
  c.sorted = false;
}

void logit_bias(Candidates& c, std::span<const LogitBias> biases) {
  SUSTAIN_CHECK(!c.sorted);
  for (const LogitBias& b : biases)
    if (b.id >= 0 && static_cast<size_t>(b.id) < c.size) c.data[b.id].logit += b.bias;
}

bool apply_mask(Candidates& c, std::span<const uint32_t> allowed) {
  const size_t n_bits = allowed.size() * 32;
  size_t kept = 0;
  for (size_t i = 0; i < c.size; ++i) {
    const auto id = static_cast<size_t>(c.data[i].id);
    if (id < n_bits && ((allowed[id / 32] >> (id % 32)) & 1) != 0) ++kept;
  }
  if (kept == 0) return false;
  kept = 0;
  for (size_t i = 0; i < c.size; ++i) {
    const auto id = static_cast<size_t>(c.data[i].id);
    if (id < n_bits && ((allowed[id / 32] >> (id % 32)) & 1) != 0) c.data[kept++] = c.data[i];
  }
  c.size = kept;
  return true;
}

void top_k(Candidates& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size) return;
  if (!c.sorted) sort_range(c, 0, static_cast<size_t>(k));
  c.size = static_cast<size_t>(k);
  c.sorted = true;
}

void top_p(Candidates& c, float p) {
  if (p >= 1.0f || c.size == 0) return;
  softmax(c);
  size_t n_sorted = c.size;
  if (!c.sorted) {
    n_sorted = std::min(c.size, kTopPFirstSort);
    sort_range(c, 0, n_sorted);
  }
  // Summed in double so a long tail of tiny probabilities is not lost to
  // float rounding before p is reached.
  double cum = 0.0;
  for (size_t i = 0; i < c.size; ++i) {
    if (i == n_sorted) {
      const size_t next = std::min(c.size, n_sorted * kTopPGrowth);
      sort_range(c, n_sorted, next);
      n_sorted = next;
    }
    cum += c.data[i].prob;
    if (cum >= p) {
      c.size = i + 1;
      break;
    }
  }
  // Either the cut fell inside the sorted prefix, or rounding kept the sum
  // below p and the loop sorted everything.
  c.sorted = true;
}

void min_p(Candidates& c, float p) {
  if (p <= 0.0f || c.size == 0) return;
  float max_logit = kNegInf;
  for (size_t i = 0; i < c.size; ++i) max_logit = std::max(max_logit, c.data[i].logit);
  // In log space, so no softmax is needed: p_i >= p * p_max  <=>  l_i >= l_max + ln p.
  // With max_logit = -inf every token passes (-inf >= -inf), which keeps them all.
  const float min_logit = max_logit + std::log(p);
  size_t kept = 0;
  for (size_t i = 0; i < c.size; ++i) {
    if (c.data[i].logit >= min_logit) c.data[kept++] = c.data[i];
  }
  SUSTAIN_CHECK(kept > 0);  // the maximum always satisfies its own bound
  c.size = kept;
}

void temperature(Candidates& c, float t) {
  SUSTAIN_CHECK(t > 0.0f);
  for (size_t i = 0; i < c.size; ++i) c.data[i].logit /= t;
}

void softmax(Candidates& c) {
  if (c.size == 0) return;
  float max_logit = c.data[0].logit;
  for (size_t i = 1; i < c.size; ++i) max_logit = std::max(max_logit, c.data[i].logit);
  // Tokens equal to the maximum get weight exactly 1 rather than exp(l - max):
  // that is the same for finite logits, and defined where l - max would be
  // inf - inf or -inf - -inf (NaN).
  double sum = 0.0;
  for (size_t i = 0; i < c.size; ++i) {
    const float l = c.data[i].logit;
    const float w = l == max_logit ? 1.0f : std::exp(l - max_logit);
    c.data[i].prob = w;
    sum += w;
  }
  const double inv = 1.0 / sum;
  for (size_t i = 0; i < c.size; ++i) {
    c.data[i].prob = static_cast<float>(c.data[i].prob * inv);
  }
}

size_t draw(const Candidates& c, double u) {
  SUSTAIN_CHECK(c.size > 0);
  double total = 0.0;
  for (size_t i = 0; i < c.size; ++i) total += c.data[i].prob;
  // Strictly greater: a zero-probability token adds nothing to cum, so it can
  // never be the first to pass the target, even at u = 0.
  const double target = u * total;
  double cum = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < c.size; ++i) {
    const float p = c.data[i].prob;
    if (p <= 0.0f) continue;
    last_nonzero = i;
    cum += p;
    if (cum > target) return i;
  }
  // Unreachable when total > 0 (cum ends at total > target); a list with no
  // probability at all gets its last positive entry or the first.
  return last_nonzero;
}

int32_t argmax_logits(const float* logits, int32_t n) {
  SUSTAIN_CHECK(n > 0);
  // Four independent 4-float vectors (GCC/Clang vector extensions: SSE on
  // x86-64, NEON on ARM64, whatever the build's baseline). `x > m` is false
  // for NaN, which so never becomes a maximum.
  using V4 = float __attribute__((vector_size(16)));
  constexpr int kLanes = 16;
  V4 m[4];
  for (V4& v : m) v = V4{kNegInf, kNegInf, kNegInf, kNegInf};
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < 4; ++j) {
      V4 x;
      std::memcpy(&x, logits + i + 4 * j, sizeof(x));
      m[j] = x > m[j] ? x : m[j];
    }
  float best = kNegInf;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (const V4& v : m)
    for (int j = 0; j < 4; ++j) best = v[j] > best ? v[j] : best;
  // Every logit -inf or NaN: all tie at -inf, and the lowest id wins.
  if (best == kNegInf) return 0;
  // The first block of 16 that holds it, then its place in the block.
  using I4 = int32_t __attribute__((vector_size(16)));
  const V4 b{best, best, best, best};
  for (i = 0; i + kLanes <= n; i += kLanes) {
    I4 hit{0, 0, 0, 0};
    for (int j = 0; j < 4; ++j) {
      V4 x;
      std::memcpy(&x, logits + i + 4 * j, sizeof(x));
      hit |= x == b;
    }
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
  }
  while (logits[i] != best) ++i;
  return i;
}

void top_k_logits(Candidates& c, Candidate* buffer, const float* logits, int32_t n_vocab,
                  int32_t k) {
  SUSTAIN_CHECK(k > 0 && k < n_vocab);
  // A heap whose front is the candidate ranking last among those kept.
  auto worse_first = [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); };
  auto at = [&](int32_t i) {
    return Candidate{i, std::isnan(logits[i]) ? kNegInf : logits[i], 0.0f};
  };
  Candidate* heap = buffer;
  for (int32_t i = 0; i < k; ++i) heap[i] = at(i);
  std::make_heap(heap, heap + k, worse_first);
  // A later id never displaces an equal logit (the lower id ranks first),
  // and NaN counts as -inf: only a logit strictly above the front's can
  // enter, which `x > t` (false for NaN) tests 16 at a time.
  using V4 = float __attribute__((vector_size(16)));
  using I4 = int32_t __attribute__((vector_size(16)));
  constexpr int32_t kBlock = 16;
  int32_t i = k;
  auto consider = [&](int32_t j) {
    if (!(logits[j] > heap[0].logit)) return;
    std::pop_heap(heap, heap + k, worse_first);
    heap[k - 1] = at(j);
    std::push_heap(heap, heap + k, worse_first);
  };
  for (; i < n_vocab && i % kBlock != 0; ++i) consider(i);
  for (; i + kBlock <= n_vocab; i += kBlock) {
    const float t = heap[0].logit;
    const V4 tv{t, t, t, t};
    I4 hit{0, 0, 0, 0};
    for (int j = 0; j < 4; ++j) {
      V4 x;
      std::memcpy(&x, logits + i + 4 * j, sizeof(x));
      hit |= x > tv;
    }
    if ((hit[0] | hit[1] | hit[2] | hit[3]) == 0) continue;
    for (int32_t j = i; j < i + kBlock; ++j) consider(j);
  }
  for (; i < n_vocab; ++i) consider(i);
  std::sort(heap, heap + k, ranks_before);
  c.data = buffer;
  c.size = static_cast<size_t>(k);
  c.sorted = true;
}

size_t argmax(const Candidates& c) {
  SUSTAIN_CHECK(c.size > 0);
  size_t best = 0;
  for (size_t i = 1; i < c.size; ++i) {
    if (ranks_before(c.data[i], c.data[best])) best = i;
  }
  return best;
}

}  // namespace sustain::sampling

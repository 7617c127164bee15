#include "sampling/processors.h"

#include "sampling/constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/status.h"
#include "kernels/ops.h"

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
  if (end < c.size) std::nth_element(d + begin, d + end - 1, d + c.size, RanksBefore{});
  std::sort(d + begin, d + end, RanksBefore{});
}

// A sum of n floats in double, element i into running sum i % 8, the eight
// folded in one fixed order: the same bits for the same values in the same
// places however a caller feeds them (in pieces that start at multiples of
// 8), and eight independent additions instead of one long chain.
class Sum8 {
 public:
  void add(const float* w, size_t n, size_t first) {
    SUSTAIN_CHECK(first % 8 == 0);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (size_t j = 0; j < 8; ++j) acc_[j] += w[i + j];
    for (size_t j = 0; i < n; ++i, ++j) acc_[j] += w[i];
  }
  double total() const {
    return ((acc_[0] + acc_[1]) + (acc_[2] + acc_[3])) +
           ((acc_[4] + acc_[5]) + (acc_[6] + acc_[7]));
  }

 private:
  double acc_[8] = {};
};

// softmax's pieces: weights go through kernels::exp_weights this many at a time.
constexpr size_t kChunk = 256;

// The largest logit, NaN ignored (-inf if there is none), in a vector pass:
// four independent 4-float vectors (GCC/Clang vector extensions: SSE on
// x86-64, NEON on ARM64, whatever the build's baseline). `x > m` is false for
// NaN, which so never becomes a maximum.
using V4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));
constexpr int32_t kLanes = 16;
float max_of(const float* logits, int32_t n) {
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
  return best;
}

// The draw over n probabilities prob(i) (draw()'s contract): block sums of
// kDrawBlock (Sum8 each) locate the block, and a running sum within it the
// token, so a full vocabulary costs short chains of additions, not two of
// n. block_sum(b, k) is Sum8's total of prob(b .. b + k - 1). Zero-
// probability tokens are never returned.
constexpr size_t kDrawBlock = 64;
constexpr size_t kDrawSums = 4096;  // block sums kept: vocabularies up to 262,144
template <class Prob, class BlockSum>
size_t draw_by(size_t n, Prob prob, BlockSum block_sum, double u) {
  SUSTAIN_CHECK(n > 0);
  double sums[kDrawSums];
  auto sum_of = [&](size_t b) {
    const size_t j = b / kDrawBlock;
    return j < kDrawSums ? sums[j] : block_sum(b, std::min(kDrawBlock, n - b));
  };
  double total = 0.0;
  for (size_t b = 0; b < n; b += kDrawBlock) {
    const double s = block_sum(b, std::min(kDrawBlock, n - b));
    if (b / kDrawBlock < kDrawSums) sums[b / kDrawBlock] = s;
    total += s;
  }
  const double target = u * total;
  // The block holding target, or with rounding (u * total == total) the
  // last block with any probability.
  double cum = 0.0;
  size_t found = n, last_positive = n;
  for (size_t b = 0; b < n; b += kDrawBlock) {
    const double s = sum_of(b);
    if (s > 0.0) last_positive = b;
    if (cum + s > target) {
      found = b;
      break;
    }
    cum += s;
  }
  if (found == n) found = last_positive;
  if (found == n) return 0;  // no probability anywhere
  // Strictly greater: a zero-probability token adds nothing to cum, so it
  // can never be the first to pass the target, even at u = 0.
  size_t last_nonzero = found;
  for (size_t i = found; i < std::min(n, found + kDrawBlock); ++i) {
    const float p = prob(i);
    if (p <= 0.0f) continue;
    last_nonzero = i;
    cum += p;
    if (cum > target) return i;
  }
  return last_nonzero;
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
  // kernels::exp_weights gives tokens equal to the maximum weight exactly 1
  // rather than exp(l - max): that is the same for finite logits, and
  // defined where l - max would be inf - inf or -inf - -inf (NaN). Its
  // weights and Sum8's total are what softmax_logits() computes from raw
  // logits, bit for bit.
  float l[kChunk], w[kChunk];
  Sum8 sum;
  for (size_t b = 0; b < c.size; b += kChunk) {
    const size_t k = std::min(kChunk, c.size - b);
    for (size_t j = 0; j < k; ++j) l[j] = c.data[b + j].logit;
    kernels::exp_weights(l, 1.0f, max_logit, w, static_cast<int64_t>(k));
    for (size_t j = 0; j < k; ++j) c.data[b + j].prob = w[j];
    sum.add(w, k, b);
  }
  const double inv = 1.0 / sum.total();
  for (size_t i = 0; i < c.size; ++i) {
    c.data[i].prob = static_cast<float>(c.data[i].prob * inv);
  }
}

size_t draw(const Candidates& c, double u) {
  auto block_sum = [&](size_t b, size_t k) {
    float block[kDrawBlock];
    for (size_t j = 0; j < k; ++j) block[j] = c.data[b + j].prob;
    Sum8 s;
    s.add(block, k, 0);
    return s.total();
  };
  return draw_by(
      c.size, [&](size_t i) { return c.data[i].prob; }, block_sum, u);
}

size_t draw_dense(const float* prob, size_t n, double u) {
  auto block_sum = [&](size_t b, size_t k) {
    Sum8 s;
    s.add(prob + b, k, 0);
    return s.total();
  };
  return draw_by(
      n, [&](size_t i) { return prob[i]; }, block_sum, u);
}

bool softmax_logits(float* prob, const float* logits, int32_t n, float t) {
  SUSTAIN_CHECK(n > 0 && t > 0.0f);
  const float m = max_of(logits, n);
  if (!std::isfinite(m)) return false;
  // temperature() divides each logit by t, and softmax() takes the maximum
  // of the quotients: m / t, as division by t > 0 keeps order.
  kernels::exp_weights(logits, t, m / t, prob, n);
  Sum8 sum;
  sum.add(prob, static_cast<size_t>(n), 0);
  const double inv = 1.0 / sum.total();
  for (int32_t i = 0; i < n; ++i) prob[i] = static_cast<float>(prob[i] * inv);
  return true;
}

double log_sum_exp(const float* logits, int32_t n, float* weights) {
  SUSTAIN_CHECK(n > 0);
  const float m = max_of(logits, n);
  if (!std::isfinite(m)) return m;
  kernels::exp_weights(logits, 1.0f, m, weights, n);
  Sum8 sum;
  sum.add(weights, static_cast<size_t>(n), 0);
  return static_cast<double>(m) + std::log(sum.total());
}

namespace {

// Calls emit(i) for each i < n with logits[i] >= floor, in id order: a
// vector compare makes a block of 16 logits a bit mask, and only its set
// bits are visited (a Gaussian's floor leaves one or two in most blocks).
template <class Emit>
void each_at_or_above(const float* logits, int32_t n, float floor, Emit emit) {
  int32_t i = 0;
  const V4 f{floor, floor, floor, floor};
  for (; i + kLanes <= n; i += kLanes) {
    uint32_t mask = 0;
    for (int j = 0; j < 4; ++j) {
      V4 x;
      std::memcpy(&x, logits + i + 4 * j, sizeof(x));
      const I4 hit = x >= f;
      for (int lane = 0; lane < 4; ++lane)
        mask |= static_cast<uint32_t>(hit[lane] & 1) << (4 * j + lane);
    }
    for (; mask != 0; mask &= mask - 1) emit(i + __builtin_ctz(mask));
  }
  for (; i < n; ++i)
    if (logits[i] >= floor) emit(i);
}

// Gathers the tokens with logits[i] >= floor as (key << 32 | id), in id
// order, into out, and returns how many. The key is the logit's bits made
// monotone and complemented, so that ascending keys are descending logits
// (-0 taken as +0, which compares equal).
size_t gather_keys(const float* logits, int32_t n, float floor, uint64_t* out) {
  size_t k = 0;
  each_at_or_above(logits, n, floor, [&](int32_t i) {
    float l = logits[i];
    if (l == 0.0f) l = 0.0f;
    uint32_t u;
    std::memcpy(&u, &l, sizeof(u));
    u = (u >> 31) != 0 ? u : ~(u | 0x80000000u);
    out[k++] = (static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>(i);
  });
  return k;
}

// Sorts v[0, k) by the high 32 bits, ascending and stable (LSD radix, a
// byte a pass; a byte every key shares is skipped); tmp holds k entries.
// Stable, so ties keep gather_keys' id order: the result is ranks_before's.
void radix_sort_high(uint64_t* v, uint64_t* tmp, size_t k) {
  uint32_t count[4][256] = {};
  for (size_t i = 0; i < k; ++i) {
    const auto h = static_cast<uint32_t>(v[i] >> 32);
    for (int b = 0; b < 4; ++b) ++count[b][(h >> (8 * b)) & 255];
  }
  uint64_t* src = v;
  uint64_t* dst = tmp;
  for (int b = 0; b < 4; ++b) {
    uint32_t offset[256];
    uint32_t at = 0;
    bool one_bucket = false;
    for (int d = 0; d < 256; ++d) {
      one_bucket |= count[b][d] == k;
      offset[d] = at;
      at += count[b][d];
    }
    if (one_bucket) continue;
    for (size_t i = 0; i < k; ++i) dst[offset[(src[i] >> (32 + 8 * b)) & 255]++] = src[i];
    std::swap(src, dst);
  }
  if (src != v) std::memcpy(v, src, k * sizeof(uint64_t));
}

}  // namespace

bool nucleus_logits(Candidates& c, Candidate* buffer, float* weights, uint64_t* keys,
                    const float* logits, int32_t n, float p, float mp) {
  SUSTAIN_CHECK(n > 0 && (p < 1.0f || mp > 0.0f));
  const float m = max_of(logits, n);
  if (!std::isfinite(m)) return false;
  // min_p's bound, as min_p() computes it (the maximum is the top token's).
  const float min_logit = mp > 0.0f ? m + std::log(mp) : kNegInf;
  c.data = buffer;
  c.size = 0;
  if (p >= 1.0f) {
    // min_p alone keeps the tokens at or above its bound, in id order, with
    // the prob fill_candidates gave them (0).
    each_at_or_above(logits, n, min_logit, [&](int32_t i) {
      buffer[c.size++] = Candidate{i, logits[i], 0.0f};
    });
    c.sorted = false;
    return true;
  }
  // top_p's probabilities: softmax at temperature 1 over every logit in id
  // order, as softmax() makes them over fill_candidates' list.
  kernels::exp_weights(logits, 1.0f, m, weights, n);
  Sum8 sum;
  sum.add(weights, static_cast<size_t>(n), 0);
  const double total = sum.total(), inv = 1.0 / total;
  // Every token at or above a logit floor ranks before every token below
  // it, so the sorted tokens above a floor begin the sorted vocabulary, and
  // where their probabilities reach p they hold the nucleus.
  //
  // Tries a floor: true where the cut is made (or min_p's bound is reached,
  // whose tokens the chain's min_p would keep), c holding the result.
  auto try_floor = [&](float floor) {
    const size_t k = gather_keys(logits, n, floor, keys);
    radix_sort_high(keys, keys + k, k);
    // top_p's cut on the sorted tokens, as top_p() makes it.
    double cum = 0.0;
    c.sorted = true;
    for (size_t j = 0; j < k; ++j) {
      const auto id = static_cast<int32_t>(static_cast<uint32_t>(keys[j]));
      const auto prob = static_cast<float>(weights[id] * inv);
      buffer[j] = Candidate{id, logits[id], prob};
      cum += prob;
      if (cum >= p) {
        c.size = j + 1;
        return true;
      }
    }
    // Short of p: with min_p's bound reached, the chain's min_p would cut
    // here anyway (c holds all of it, sorted).
    c.size = k;
    return floor == min_logit;
  };
  // With min_p, its bound is the floor: the result lies above it.
  if (mp > 0.0f) return try_floor(min_logit);
  // Without, the floor is guessed from a histogram of the weights by their
  // float bits (exponent and two bits of mantissa: bins a quarter of an
  // octave wide); a guess that falls short, at a bin's edge, is lowered a
  // bin at a time.
  constexpr int kShift = 21, kBins = 1 << (31 - kShift);  // weights are >= 0
  float mass[kBins] = {};
  for (int32_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, weights + i, sizeof(u));
    mass[u >> kShift] += weights[i];
  }
  const double want = static_cast<double>(p) * total * (1.0 + 1e-4);
  double above = 0.0;
  int bin = kBins - 1;
  for (; bin > 0; --bin) {
    above += mass[bin];
    if (above >= want) break;
  }
  for (; bin > 0; --bin) {
    // The bin's lowest weight, as a logit below the top (with room for the
    // rounding of l - m and exp's few ulp).
    const uint32_t edge_bits = static_cast<uint32_t>(bin) << kShift;
    float edge;
    std::memcpy(&edge, &edge_bits, sizeof(edge));
    if (try_floor(m + std::log(edge) - 1e-3f)) return true;
  }
  return false;  // the nucleus reaches float's last weights: the chain decides
}

int32_t argmax_logits(const float* logits, int32_t n) {
  SUSTAIN_CHECK(n > 0);
  const float best = max_of(logits, n);
  // Every logit -inf or NaN: all tie at -inf, and the lowest id wins.
  if (best == kNegInf) return 0;
  // The first block of 16 that holds it, then its place in the block.
  const V4 b{best, best, best, best};
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
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
  constexpr int32_t kBlock = kLanes;
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
  std::sort(heap, heap + k, RanksBefore{});
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

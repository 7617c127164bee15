// The steps of the sampling chain, each on a list of candidate tokens. The
// Sampler runs them in llama.cpp's default order (logit bias → penalties →
// top-k → top-p → min-p → temperature → softmax → draw); they are public so speculative
// decoding can reuse them and tests can pin each one on hand-computed input.
//
// Order of candidates: processors may reorder and shrink the live prefix.
// "Sorted" always means descending logit with ties broken by ascending id, a
// strict total order, so which tokens survive a cut (top-k at a tie, say) is
// the same on every platform and standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sustain::sampling {

// An additive bias of one token's logit (OpenAI's logit_bias).
struct LogitBias {
  int32_t id;
  float bias;
};

struct Candidate {
  int32_t id;
  float logit;
  float prob;  // filled by softmax() (and by top_p(), which needs probabilities)
};

// The live candidates: data[0, size). Processors shrink size; data is owned by
// the caller (the Sampler's reusable buffer), so no processor allocates.
struct Candidates {
  Candidate* data = nullptr;
  size_t size = 0;
  bool sorted = false;  // data[0, size) is in the order described above
};

// Fills c.data[0, n_vocab) with (id, logit) from a model's logits. NaN logits
// become -inf: a NaN would break every comparison below, and a token whose
// score is undefined should not be chosen.
void fill_candidates(Candidates& c, Candidate* buffer, const float* logits, int32_t n_vocab);

// Adds each bias to its token's logit. Runs on the candidates as
// fill_candidates left them (data[i].id == i, unsorted); an id outside
// [0, size) is skipped (the edge checks ids against the vocabulary).
void logit_bias(Candidates& c, std::span<const LogitBias> biases);

// Keeps the k highest (sorting them); k <= 0 or k >= size leaves all.
void top_k(Candidates& c, int32_t k);

// Nucleus: keeps the smallest prefix of the sorted candidates whose
// probabilities (softmax at temperature 1 of the current logits) sum to >= p,
// and at least one token. p >= 1 leaves all. Sorts only as far as it needs:
// with a full vocabulary the nucleus is usually within the first few hundred.
void top_p(Candidates& c, float p);

// Keeps tokens whose probability is >= p times the highest probability, i.e.
// logit >= max_logit + ln(p); the top token always stays. p <= 0 leaves all.
// Keeps the candidates' relative order (and so `sorted`).
void min_p(Candidates& c, float p);

// Divides logits by t (> 0); order is unchanged.
void temperature(Candidates& c, float t);

// prob = softmax(logit) over the live candidates. Works for any logits,
// including several +inf (they share the mass) or all -inf (uniform).
void softmax(Candidates& c);

// Index into c.data of the token whose cumulative probability interval holds
// u in [0, 1). Probabilities are re-summed here, so float rounding in
// softmax() can never leave u past the end; zero-probability tokens are never
// picked.
size_t draw(const Candidates& c, double u);

// draw() over a dense distribution: prob[i] is token i's, as a list of n
// candidates in id order would hold them; the same index for the same u.
size_t draw_dense(const float* prob, size_t n, double u);

// What fill_candidates → temperature(t) → softmax leave as candidate i's
// prob, written to prob[i] for the n logits, bit for bit, without building
// the candidates: the whole-vocabulary distribution of a client that sends a
// temperature alone. Returns false (prob unspecified) when the largest
// logit is not finite (all NaN or -inf, or +inf), which the chain decides.
bool softmax_logits(float* prob, const float* logits, int32_t n, float t);

// What fill_candidates → top_p(p) → min_p(mp) leave in c (p < 1 or mp > 0),
// the same candidates in the same order with the same logits and prob,
// without building and sorting n candidates: min_p alone keeps the tokens
// above its bound in one pass; top_p takes the softmax weights (into
// weights[0, n)), guesses from their histogram a logit floor whose tokens
// hold the nucleus, and sorts only those (radix, on keys[0, 2 n)).
// buffer needs n entries. Returns false (c unspecified) where the chain has
// to decide: a maximum that is not finite, or a nucleus reaching down to
// weights below float's normal range.
bool nucleus_logits(Candidates& c, Candidate* buffer, float* weights, uint64_t* keys,
                    const float* logits, int32_t n, float p, float mp);

// ln of the sum of exp(logits[i]) over the n > 0 logits, NaN ignored: the
// log-softmax denominator a logprobs request is answered against. The
// weights go through kernels::exp_weights into weights[0, n) (scratch) and
// are summed in a fixed order (terms below e^-87 of the largest drop out,
// as they do from every softmax here). A largest logit that is not finite
// is returned as it is.
double log_sum_exp(const float* logits, int32_t n, float* weights);

// Index of the highest logit, lowest id on ties (greedy decoding). Requires
// c.size > 0.
size_t argmax(const Candidates& c);

// The same choice made on raw logits[0, n) (n > 0), as argmax over what
// fill_candidates would make of them (NaN counts as -inf), without building
// the candidates: greedy decoding with nothing that changes a logit. A
// vector pass for the maximum and one for its first index: 2.6 us against
// 49 us for fill_candidates + argmax over 49,152 logits (Zen 4, baseline
// x86-64 build).
int32_t argmax_logits(const float* logits, int32_t n);

// fill_candidates followed by top_k(c, k), for 0 < k < n_vocab, in one pass
// over the logits that keeps the k best in a heap (a block of 16 logits none
// of which beats the heap's worst costs one vector compare), then sorts
// them: the same k candidates in the same order, without writing and
// partitioning n_vocab 12-byte candidates. buffer needs k entries.
void top_k_logits(Candidates& c, Candidate* buffer, const float* logits, int32_t n_vocab,
                  int32_t k);

// The order used for "sorted": true if a comes before b.
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
// ranks_before as a function object, for std::sort and its kin: passed as a
// function pointer it is called, not inlined (a nucleus of 4,000 took twice
// as long to sort).
struct RanksBefore {
  bool operator()(const Candidate& a, const Candidate& b) const { return ranks_before(a, b); }
};

}  // namespace sustain::sampling

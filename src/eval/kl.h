// What a change (KV format, weight format) costs in quality, position by
// position: KL(base‖test) of the next-token distributions, whether the top-1
// token is the same, Δp of the token that actually came next, and each side's
// perplexity — aggregated per context bucket so the growth of the error with
// context is visible.
//
// A baseline can be saved without its full vocabulary rows (SavedRow): the
// top-k logits plus the log-sum-exp over the whole vocabulary. KL against a
// saved row is then computed on the distribution coarsened to {top-k tokens,
// "everything else"}, which by the log-sum inequality is a lower bound of the
// true KL; since every tail token has p ≤ p_k (the k-th largest probability)
// and the test distribution is known in full, the largest KL consistent with
// the saved row is computable too (mass p_k on the least likely test tokens).
// Each position reports both, so the error of a saved baseline is bounded,
// not guessed: kl_low ≤ KL ≤ kl_high, and with k = n_vocab kl_low = kl_high.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace sustain::eval {

// log Σ exp(x_i), computed in double without overflow.
double log_sum_exp(const float* x, int64_t n);

// One baseline position kept for later comparison.
struct SavedRow {
  double lse = 0.0;               // log-sum-exp of the full row (double: logits near ±100
                                  // would lose ~1e-5 of log p in f32, more than a small KL)
  std::vector<int32_t> ids;       // top-k token ids, most likely first
  std::vector<float> logits;      // their logits
};

// Keeps the k most likely tokens of `logits` (k capped at n_vocab).
SavedRow compress_row(const float* logits, int64_t n_vocab, int k);

// One position's comparison. `next` is the token that followed (-1: none,
// then dp/nll fields are 0 and has_next is false).
struct PositionStats {
  double kl = 0.0;       // KL(base‖test) in nats (a lower bound when from a saved row)
  double kl_high = 0.0;  // = kl for full rows; else the largest KL consistent with the saved row
  bool same_top1 = false;
  bool has_next = false;
  double p_base = 0.0, p_test = 0.0;  // probability of `next`
  double nll_base = 0.0, nll_test = 0.0;
};

// Both rows in full.
PositionStats compare_rows(const float* base, const float* test, int64_t n_vocab, int32_t next);
// Base from a saved row (its ids must be < n_vocab, checked by the reader).
// `base_next_logit` is the base logit of `next` when it is outside the
// saved top-k (the saved file keeps it per position); ignored otherwise.
PositionStats compare_saved(const SavedRow& base, float base_next_logit, const float* test,
                            int64_t n_vocab, int32_t next);

// Percentile by linear interpolation between order statistics (q in [0, 1]);
// 0 for an empty vector. Sorts `v`.
double percentile(std::vector<double>& v, double q);

struct Summary {
  double mean = 0.0, median = 0.0, p95 = 0.0, p99 = 0.0, max = 0.0;
};
Summary summarize(std::vector<double> v);

// Positions [lo, hi) of the context, aggregated.
struct BucketStats {
  int64_t lo = 0, hi = 0;
  int64_t n = 0;         // positions compared
  int64_t n_next = 0;    // of which with an observed next token
  Summary kl;
  double kl_high_mean = 0.0;     // mean of the upper bounds (= kl.mean for full rows)
  double same_top1 = 0.0;        // share of positions
  double dp_mean = 0.0;          // mean of p_test − p_base of the observed next token
  double dp_p01 = 0.0, dp_p05 = 0.0, dp_p50 = 0.0, dp_p95 = 0.0, dp_p99 = 0.0;
  double dp_rms = 0.0;
  double ppl_base = 0.0, ppl_test = 0.0, ppl_ratio = 0.0;
};

// Accumulates positions and produces per-bucket statistics.
class KlAccumulator {
 public:
  // Bucket upper edges, increasing, e.g. {512, 4096, 16384, 32768}; positions
  // at or above the last edge form one more bucket. Empty: one bucket.
  explicit KlAccumulator(std::vector<int64_t> edges);
  void add(int64_t pos, const PositionStats& s);
  // Buckets that received positions, then the whole range last (lo 0, hi = max pos + 1).
  // A bucket's hi is its edge, or one past its last position when the input ended before it.
  std::vector<BucketStats> buckets() const;

 private:
  struct Acc {
    std::vector<double> kl, dp;
    double kl_high_sum = 0.0;
    int64_t same = 0;
    double nll_base = 0.0, nll_test = 0.0;
    int64_t lo = 0, hi = 0;
    int64_t last = -1;  // largest position added
  };
  static BucketStats finish(const Acc& a);
  std::vector<int64_t> edges_;
  std::vector<Acc> acc_;
  Acc all_;
};

// Parses "512,4096,16384" (increasing positive integers).
Expected<std::vector<int64_t>> parse_edges(const std::string& s, const char* flag);

}  // namespace sustain::eval

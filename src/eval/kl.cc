#include "eval/kl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace sustain::eval {

double log_sum_exp(const float* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  if (!std::isfinite(m)) return m;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

namespace {

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

// p·log(p/q) with the conventions 0·log(0/q) = 0.
double kl_term(double p, double log_p, double log_q) { return p > 0.0 ? p * (log_p - log_q) : 0.0; }

}  // namespace

SavedRow compress_row(const float* logits, int64_t n_vocab, int k) {
  SavedRow r;
  r.lse = log_sum_exp(logits, n_vocab);
  const int64_t kk = std::min<int64_t>(std::max(k, 1), n_vocab);
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  std::iota(idx.begin(), idx.end(), 0);
  // Ties broken by id so the saved file does not depend on the sort's whims.
  auto more = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), more);
  r.ids.assign(idx.begin(), idx.begin() + kk);
  r.logits.resize(static_cast<size_t>(kk));
  for (int64_t i = 0; i < kk; ++i) r.logits[static_cast<size_t>(i)] = logits[r.ids[static_cast<size_t>(i)]];
  return r;
}

PositionStats compare_rows(const float* base, const float* test, int64_t n_vocab, int32_t next) {
  PositionStats s;
  const double lb = log_sum_exp(base, n_vocab), lt = log_sum_exp(test, n_vocab);
  double kl = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const double log_p = base[i] - lb, log_q = test[i] - lt;
    kl += kl_term(std::exp(log_p), log_p, log_q);
  }
  // Rounding can leave a tiny negative sum for identical rows.
  s.kl = s.kl_high = std::max(0.0, kl);
  s.same_top1 = argmax(base, n_vocab) == argmax(test, n_vocab);
  if (next >= 0 && next < n_vocab) {
    s.has_next = true;
    s.nll_base = lb - base[next];
    s.nll_test = lt - test[next];
    s.p_base = std::exp(-s.nll_base);
    s.p_test = std::exp(-s.nll_test);
  }
  return s;
}

PositionStats compare_saved(const SavedRow& base, float base_next_logit, const float* test,
                            int64_t n_vocab, int32_t next) {
  PositionStats s;
  const double lb = base.lse, lt = log_sum_exp(test, n_vocab);
  const size_t k = base.ids.size();
  std::vector<uint8_t> in_top(static_cast<size_t>(n_vocab), 0);
  double p_top = 0.0, q_top = 0.0, kl_top = 0.0;
  for (size_t i = 0; i < k; ++i) {
    const int32_t id = base.ids[i];
    in_top[static_cast<size_t>(id)] = 1;
    const double log_p = base.logits[i] - lb, log_q = test[id] - lt;
    const double p = std::exp(log_p);
    p_top += p;
    q_top += std::exp(log_q);
    kl_top += kl_term(p, log_p, log_q);
  }
  // Tail: the mass outside the top-k, for the baseline (t) and the test (u).
  const double t = std::max(0.0, 1.0 - p_top);
  const double u = std::max(0.0, 1.0 - q_top);
  double kl_low = kl_top;
  double kl_high = kl_top;
  if (t > 0.0 && k < static_cast<size_t>(n_vocab)) {
    kl_low += u > 0.0 ? t * std::log(t / u) : 0.0;
    // Largest Σ_tail p log(p/q) with 0 ≤ p ≤ cap, Σ p = t: a vertex of that
    // polytope (the objective is convex), i.e. mass `cap` on the tokens the
    // test finds least likely, the remainder on the next one.
    const double cap = k > 0 ? std::exp(static_cast<double>(base.logits[k - 1]) - lb) : t;
    std::vector<double> log_q_tail;
    log_q_tail.reserve(static_cast<size_t>(n_vocab) - k);
    for (int64_t i = 0; i < n_vocab; ++i)
      if (!in_top[static_cast<size_t>(i)]) log_q_tail.push_back(test[i] - lt);
    const size_t need = std::min(log_q_tail.size(),
                                 static_cast<size_t>(std::ceil(t / std::max(cap, 1e-300))) + 1);
    std::partial_sort(log_q_tail.begin(), log_q_tail.begin() + need, log_q_tail.end());
    double left = t, worst = 0.0;
    for (size_t i = 0; i < need && left > 0.0; ++i) {
      const double p = std::min(cap, left);
      worst += p * (std::log(p) - log_q_tail[i]);
      left -= p;
    }
    kl_high += worst;
    // The coarse KL is the minimum over tails; numerical noise must not invert them.
    kl_high = std::max(kl_high, kl_low);
  }
  s.kl = std::max(0.0, kl_low);
  s.kl_high = std::max(s.kl, kl_high);
  s.same_top1 = k > 0 && base.ids[0] == argmax(test, n_vocab);
  if (next >= 0 && next < n_vocab) {
    s.has_next = true;
    double logit = base_next_logit;
    for (size_t i = 0; i < k; ++i)
      if (base.ids[i] == next) logit = base.logits[i];
    s.nll_base = lb - logit;
    s.nll_test = lt - test[next];
    s.p_base = std::exp(-s.nll_base);
    s.p_test = std::exp(-s.nll_test);
  }
  return s;
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double x = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(x));
  const size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (v[j] - v[i]) * (x - static_cast<double>(i));
}

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.median = percentile(v, 0.5);
  s.p95 = percentile(v, 0.95);
  s.p99 = percentile(v, 0.99);
  s.max = v.back();  // sorted by percentile()
  return s;
}

KlAccumulator::KlAccumulator(std::vector<int64_t> edges) : edges_(std::move(edges)) {
  acc_.resize(edges_.size() + 1);
  int64_t lo = 0;
  for (size_t i = 0; i < acc_.size(); ++i) {
    acc_[i].lo = lo;
    acc_[i].hi = i < edges_.size() ? edges_[i] : -1;  // -1: open-ended, set from data
    if (i < edges_.size()) lo = edges_[i];
  }
}

void KlAccumulator::add(int64_t pos, const PositionStats& s) {
  const size_t b = static_cast<size_t>(std::upper_bound(edges_.begin(), edges_.end(), pos) -
                                       edges_.begin());
  for (Acc* a : {&acc_[b], &all_}) {
    a->kl.push_back(s.kl);
    a->kl_high_sum += s.kl_high;
    a->same += s.same_top1;
    if (s.has_next) {
      a->dp.push_back(s.p_test - s.p_base);
      a->nll_base += s.nll_base;
      a->nll_test += s.nll_test;
    }
  }
  all_.hi = std::max(all_.hi, pos + 1);
  acc_[b].last = std::max(acc_[b].last, pos);
}

BucketStats KlAccumulator::finish(const Acc& a) {
  BucketStats b;
  b.lo = a.lo;
  // A bucket reaches its edge, or the last position seen when the input ends before it.
  b.hi = a.last >= 0 && (a.hi < 0 || a.last + 1 < a.hi) ? a.last + 1 : a.hi;
  b.n = static_cast<int64_t>(a.kl.size());
  b.n_next = static_cast<int64_t>(a.dp.size());
  if (b.n == 0) return b;
  b.kl = summarize(a.kl);
  b.kl_high_mean = a.kl_high_sum / static_cast<double>(b.n);
  b.same_top1 = static_cast<double>(a.same) / static_cast<double>(b.n);
  if (b.n_next > 0) {
    std::vector<double> dp = a.dp;
    const double n = static_cast<double>(b.n_next);
    b.dp_mean = std::accumulate(dp.begin(), dp.end(), 0.0) / n;
    double sq = 0.0;
    for (double x : dp) sq += x * x;
    b.dp_rms = std::sqrt(sq / n);
    b.dp_p01 = percentile(dp, 0.01);
    b.dp_p05 = percentile(dp, 0.05);
    b.dp_p50 = percentile(dp, 0.50);
    b.dp_p95 = percentile(dp, 0.95);
    b.dp_p99 = percentile(dp, 0.99);
    b.ppl_base = std::exp(a.nll_base / n);
    b.ppl_test = std::exp(a.nll_test / n);
    b.ppl_ratio = b.ppl_test / b.ppl_base;
  }
  return b;
}

std::vector<BucketStats> KlAccumulator::buckets() const {
  std::vector<BucketStats> out;
  for (const Acc& a : acc_)
    if (!a.kl.empty()) out.push_back(finish(a));
  out.push_back(finish(all_));
  return out;
}

Expected<std::vector<int64_t>> parse_edges(const std::string& s, const char* flag) {
  std::vector<int64_t> v;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x <= 0)
      return error(Code::kInvalidArgument, "{}: '{}' in '{}' is not a positive integer", flag,
                   item, s);
    if (!v.empty() && x <= v.back())
      return error(Code::kInvalidArgument, "{}: edges must increase ('{}' after {})", flag, item,
                   v.back());
    v.push_back(x);
    i = j + 1;
  }
  return v;
}

}  // namespace sustain::eval

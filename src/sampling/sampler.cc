#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>

namespace sustain::sampling {
namespace {

// top_probs over a dense distribution: up to this many by insertion.
constexpr size_t kInsertionTop = 32;

Status bad(const char* field, const char* rule, double value) {
  return error(Code::kInvalidArgument, "sampler: {} must be {}, got {}", field, rule, value);
}

// NaN fails every comparison, so each range check below is written as
// "!(in range)" to reject it too; infinities fall outside every range.
Status check_range(const char* field, float v, float lo, float hi, bool lo_open, const char* rule) {
  const bool above_lo = lo_open ? v > lo : v >= lo;
  if (!(above_lo && v <= hi)) return bad(field, rule, v);
  return Status::ok();
}

}  // namespace

Status validate(const SamplerConfig& c) {
  if (std::isnan(c.temperature)) return bad("temperature", "a number", c.temperature);
  SUSTAIN_TRY(check_range("temperature", c.temperature, 0.0f, kMaxTemperature, false,
                          "in [0, 100] (0 means greedy)"));
  if (c.top_k < 0) return bad("top_k", ">= 0 (0 disables it)", c.top_k);
  SUSTAIN_TRY(check_range("top_p", c.top_p, 0.0f, 1.0f, true, "in (0, 1] (1 disables it)"));
  SUSTAIN_TRY(check_range("min_p", c.min_p, 0.0f, 1.0f, false, "in [0, 1] (0 disables it)"));
  SUSTAIN_TRY(check_range("repeat_penalty", c.repeat_penalty, 0.0f, kMaxRepeatPenalty, true,
                          "in (0, 10] (1 disables it)"));
  if (c.repeat_last_n < 0 || c.repeat_last_n > kMaxRepeatLastN) {
    return bad("repeat_last_n", "in [0, 1048576] (0 disables penalties)", c.repeat_last_n);
  }
  constexpr float kPf = kMaxPresenceFrequencyPenalty;
  SUSTAIN_TRY(check_range("presence_penalty", c.presence_penalty, -kPf, kPf, false,
                          "in [-2, 2] (0 disables it)"));
  SUSTAIN_TRY(check_range("frequency_penalty", c.frequency_penalty, -kPf, kPf, false,
                          "in [-2, 2] (0 disables it)"));
  std::vector<int32_t> ids;
  ids.reserve(c.logit_bias.size());
  for (const LogitBias& b : c.logit_bias) {
    if (b.id < 0) return bad("a logit_bias token id", ">= 0", b.id);
    SUSTAIN_TRY(check_range("a logit_bias value", b.bias, -kMaxLogitBias, kMaxLogitBias, false,
                            "in [-100, 100]"));
    ids.push_back(b.id);
  }
  std::sort(ids.begin(), ids.end());
  if (auto d = std::adjacent_find(ids.begin(), ids.end()); d != ids.end())
    return error(Code::kInvalidArgument, "sampler: logit_bias names token {} more than once", *d);
  return Status::ok();
}

Expected<Sampler> Sampler::create(const SamplerConfig& config) {
  SUSTAIN_TRY(validate(config));
  return Sampler(config);
}

Sampler::Sampler(const SamplerConfig& config)
    : config_(config),
      rng_(config.seed),
      history_(config.repeat_last_n, config.repeat_penalty, config.frequency_penalty,
               config.presence_penalty) {
  SUSTAIN_CHECK(validate(config).is_ok());
  if (config.constraint) constraint_ = config.constraint->start();
}

void Sampler::accept(int32_t token) {
  history_.accept(token);
}

void Sampler::prepare(const float* logits, int32_t n_vocab) {
  SUSTAIN_CHECK(logits != nullptr && n_vocab > 0);
  if (buffer_.size() < static_cast<size_t>(n_vocab)) buffer_.resize(n_vocab);
  Candidates& c = live_;
  if (config_.top_k > 0 && config_.top_k < n_vocab && logits_untouched()) {
    // Nothing changes a logit before top-k: the k best straight from the
    // logits (top_k in finish_chain then keeps them all). With the default
    // chain over 49,152 logits, 447 us a token became ~40 us (docs/serving.md).
    top_k_logits(c, buffer_.data(), logits, n_vocab, config_.top_k);
    return;
  }
  fill_candidates(c, buffer_.data(), logits, n_vocab);
  if (!config_.logit_bias.empty()) logit_bias(c, config_.logit_bias);
  history_.apply(c);
  if (constraint_) apply_mask(c, constraint_->allowed());
}

void Sampler::finish_chain() {
  Candidates& c = live_;
  top_k(c, config_.top_k);
  top_p(c, config_.top_p);
  min_p(c, config_.min_p);
  temperature(c, config_.temperature);
  softmax(c);
}

void Sampler::record(int32_t token) {
  history_.accept(token);
  if (constraint_) constraint_->accept(token);
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  dense_n_ = 0;
  if (config_.temperature <= 0.0f && logits_untouched()) {
    // Greedy with nothing that changes a logit: the argmax of the logits
    // themselves, the same token the chain below would pick. Serving eight
    // streams, filling candidates took 6 % of the engine thread's time.
    SUSTAIN_CHECK(logits != nullptr && n_vocab > 0);
    const int32_t token = argmax_logits(logits, n_vocab);
    last_ = TokenProb{token, 1.0f, 0.0f};
    last_greedy_ = true;
    record(token);
    return token;
  }
  if (config_.temperature > 0.0f && wide_ok(n_vocab)) {
    if (const int32_t token = sample_wide(logits, n_vocab); token >= 0) {
      record(token);
      return token;
    }
  }
  prepare(logits, n_vocab);
  Candidates& c = live_;
  int32_t token;
  if (config_.temperature <= 0.0f) {
    // top-k, top-p and min-p all keep the argmax, so greedy skips them.
    token = c.data[argmax(c)].id;
    last_ = TokenProb{token, 1.0f, 0.0f};
    last_greedy_ = true;
  } else {
    finish_chain();
    const Candidate& chosen = c.data[draw(c, rng_.uniform())];
    token = chosen.id;
    last_ = TokenProb{token, chosen.prob, std::log(chosen.prob)};
    last_greedy_ = false;
  }
  record(token);
  return token;
}

int32_t Sampler::sample_wide(const float* logits, int32_t n_vocab) {
  SUSTAIN_CHECK(logits != nullptr && n_vocab > 0);
  if (dense_.size() < static_cast<size_t>(n_vocab)) dense_.resize(n_vocab);
  if (config_.top_p >= 1.0f && config_.min_p <= 0.0f) {
    // Temperature alone: the whole vocabulary, drawn from in id order.
    if (!softmax_logits(dense_.data(), logits, n_vocab, config_.temperature)) return -1;
    const size_t i = draw_dense(dense_.data(), static_cast<size_t>(n_vocab), rng_.uniform());
    last_ = TokenProb{static_cast<int32_t>(i), dense_[i], std::log(dense_[i])};
    last_greedy_ = false;
    dense_n_ = static_cast<size_t>(n_vocab);
    return last_.id;
  }
  if (!nucleus_chain(logits, n_vocab)) return -1;
  const Candidates& c = live_;
  const Candidate& chosen = c.data[draw(c, rng_.uniform())];
  last_ = TokenProb{chosen.id, chosen.prob, std::log(chosen.prob)};
  last_greedy_ = false;
  return chosen.id;
}

bool Sampler::nucleus_chain(const float* logits, int32_t n_vocab) {
  if (buffer_.size() < static_cast<size_t>(n_vocab)) buffer_.resize(n_vocab);
  if (dense_.size() < static_cast<size_t>(n_vocab)) dense_.resize(n_vocab);
  if (keys_.size() < 2 * static_cast<size_t>(n_vocab)) keys_.resize(2 * n_vocab);
  if (!nucleus_logits(live_, buffer_.data(), dense_.data(), keys_.data(), logits, n_vocab,
                      config_.top_p, config_.min_p))
    return false;
  temperature(live_, config_.temperature);
  softmax(live_);
  return true;
}

namespace {

// speculative_choice over n entries: entry i is token id(i) with target
// probability prob(i); pd is the target's probability of the draft, and
// draw_p(u) draws from the target itself.
template <class Id, class Prob, class DrawP>
int64_t choose(size_t n, Id id, Prob prob, double pd, int32_t draft, std::span<const float> q_by_id,
               double u_accept, double u_residual, DrawP draw_p) {
  const double qd = draft >= 0 && static_cast<size_t>(draft) < q_by_id.size()
                        ? static_cast<double>(q_by_id[static_cast<size_t>(draft)])
                        : 0.0;
  // Accept with min(1, p/q); a draft its proposal gave no mass (an
  // inconsistent proposer) is accepted only where p has it, never forced.
  if (pd > 0.0 && (qd <= 0.0 || u_accept * qd < pd)) return -1;
  auto residual = [&](size_t i) {
    const auto t = static_cast<size_t>(id(i));
    return std::max(0.0, prob(i) - (t < q_by_id.size() ? q_by_id[t] : 0.0));
  };
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += residual(i);
  // p == q up to rounding leaves no residual: p itself is the right law then.
  if (!(total > 0.0)) return static_cast<int64_t>(draw_p(u_residual));
  const double target = u_residual * total;
  double cum = 0.0;
  size_t last_positive = 0;
  for (size_t i = 0; i < n; ++i) {
    const double r = residual(i);
    if (r <= 0.0) continue;
    last_positive = i;
    cum += r;
    if (cum > target) return static_cast<int64_t>(i);
  }
  return static_cast<int64_t>(last_positive);
}

}  // namespace

int64_t speculative_choice(const Candidates& p, int32_t draft, std::span<const float> q_by_id,
                           double u_accept, double u_residual) {
  SUSTAIN_CHECK(p.size > 0);
  double pd = 0.0;
  for (size_t i = 0; i < p.size; ++i)
    if (p.data[i].id == draft) pd = p.data[i].prob;
  return choose(
      p.size, [&](size_t i) { return p.data[i].id; },
      [&](size_t i) { return static_cast<double>(p.data[i].prob); }, pd, draft, q_by_id, u_accept,
      u_residual, [&](double u) { return draw(p, u); });
}

int64_t speculative_choice_dense(std::span<const float> p_by_id, int32_t draft,
                                 std::span<const float> q_by_id, double u_accept,
                                 double u_residual) {
  SUSTAIN_CHECK(!p_by_id.empty());
  const double pd = draft >= 0 && static_cast<size_t>(draft) < p_by_id.size()
                        ? static_cast<double>(p_by_id[static_cast<size_t>(draft)])
                        : 0.0;
  return choose(
      p_by_id.size(), [](size_t i) { return i; },
      [&](size_t i) { return static_cast<double>(p_by_id[i]); }, pd, draft, q_by_id, u_accept,
      u_residual, [&](double u) { return draw_dense(p_by_id.data(), p_by_id.size(), u); });
}

int32_t Sampler::sample_speculative(const float* logits, int32_t n_vocab, int32_t draft,
                                    std::span<const TokenProb> q) {
  dense_n_ = 0;
  if (config_.temperature <= 0.0f) return sample(logits, n_vocab);
  if (q_dense_.size() < static_cast<size_t>(n_vocab)) q_dense_.assign(n_vocab, 0.0f);
  for (const TokenProb& e : q)
    if (e.id >= 0 && e.id < n_vocab) q_dense_[static_cast<size_t>(e.id)] = e.prob;
  const std::span<const float> q_by_id(q_dense_.data(), static_cast<size_t>(n_vocab));
  int32_t token = -1;
  float prob = 0.0f;
  if (wide_ok(n_vocab) && config_.top_p >= 1.0f && config_.min_p <= 0.0f) {
    // Temperature alone: the whole vocabulary by id from the raw logits,
    // which is the chain's candidate list (id order, the same
    // probabilities), so the same accept/resample, without 49,152
    // candidates built per verified row.
    if (dense_.size() < static_cast<size_t>(n_vocab)) dense_.resize(n_vocab);
    if (softmax_logits(dense_.data(), logits, n_vocab, config_.temperature)) {
      const std::span<const float> p(dense_.data(), static_cast<size_t>(n_vocab));
      const double u1 = rng_.uniform(), u2 = rng_.uniform();
      const int64_t pick = speculative_choice_dense(p, draft, q_by_id, u1, u2);
      token = pick >= 0 ? static_cast<int32_t>(pick) : draft;
      prob = token >= 0 && token < n_vocab ? dense_[static_cast<size_t>(token)] : 0.0f;
      dense_n_ = static_cast<size_t>(n_vocab);
    }
  }
  if (token < 0) {
    // Top-p or min-p without top-k and with nothing before them: the same
    // candidates from the raw logits.
    const bool shortcut = wide_ok(n_vocab) && (config_.top_p < 1.0f || config_.min_p > 0.0f);
    if (!shortcut || !nucleus_chain(logits, n_vocab)) {
      prepare(logits, n_vocab);
      finish_chain();
    }
    const Candidates& c = live_;
    const double u1 = rng_.uniform(), u2 = rng_.uniform();
    const int64_t pick = speculative_choice(c, draft, q_by_id, u1, u2);
    token = draft;
    if (pick >= 0) {
      token = c.data[pick].id;
      prob = c.data[pick].prob;
    } else {
      for (size_t i = 0; i < c.size; ++i)
        if (c.data[i].id == draft) prob = c.data[i].prob;
    }
  }
  for (const TokenProb& e : q)
    if (e.id >= 0 && e.id < n_vocab) q_dense_[static_cast<size_t>(e.id)] = 0.0f;
  last_ = TokenProb{token, prob, std::log(prob)};
  last_greedy_ = false;
  record(token);
  return token;
}

size_t Sampler::top_probs(std::span<TokenProb> out) {
  if (last_.id < 0 || out.empty()) return 0;
  if (last_greedy_) {
    out[0] = last_;
    return 1;
  }
  if (dense_n_ > 0) {
    // The whole vocabulary (temperature alone): the n most probable, ties
    // to the lower id. A few by insertion into a short sorted list; many
    // (a caller asking for the whole distribution) in a heap whose front
    // is the worst kept, so n = 49,152 is n log n, not n squared.
    const size_t n = std::min(out.size(), dense_n_);
    auto better = [](const TokenProb& a, const TokenProb& b) {
      return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
    };
    if (n > kInsertionTop) {
      for (size_t i = 0; i < n; ++i) out[i] = TokenProb{static_cast<int32_t>(i), dense_[i], 0.0f};
      std::make_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), better);
      for (size_t i = n; i < dense_n_; ++i) {
        const TokenProb e{static_cast<int32_t>(i), dense_[i], 0.0f};
        if (!better(e, out[0])) continue;
        std::pop_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), better);
        out[n - 1] = e;
        std::push_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), better);
      }
      std::sort_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), better);
      for (size_t i = 0; i < n; ++i) out[i].logprob = std::log(out[i].prob);
      return n;
    }
    size_t have = 0;
    for (size_t i = 0; i < dense_n_; ++i) {
      const float p = dense_[i];
      if (have == n && !(p > out[n - 1].prob)) continue;
      size_t j = have < n ? have++ : n - 1;
      for (; j > 0 && p > out[j - 1].prob; --j) out[j] = out[j - 1];
      out[j] = TokenProb{static_cast<int32_t>(i), p, std::log(p)};
    }
    return n;
  }
  const size_t n = std::min(out.size(), live_.size);
  // Probabilities are monotone in the final logits, so the chain's order is
  // the probability order; only the first n need sorting.
  if (!live_.sorted) {
    std::partial_sort(live_.data, live_.data + n, live_.data + live_.size, RanksBefore{});
  }
  for (size_t i = 0; i < n; ++i) {
    const Candidate& cand = live_.data[i];
    out[i] = TokenProb{cand.id, cand.prob, std::log(cand.prob)};
  }
  return n;
}

size_t Sampler::probs(std::span<TokenProb> out) const {
  if (last_.id < 0 || out.empty()) return 0;
  if (last_greedy_) {
    out[0] = TokenProb{last_.id, 1.0f, 0.0f};
    return 1;
  }
  if (dense_n_ > 0) {
    const size_t n = std::min(out.size(), dense_n_);
    for (size_t i = 0; i < n; ++i) out[i] = TokenProb{static_cast<int32_t>(i), dense_[i], 0.0f};
    return n;
  }
  const size_t n = std::min(out.size(), live_.size);
  for (size_t i = 0; i < n; ++i) out[i] = TokenProb{live_.data[i].id, live_.data[i].prob, 0.0f};
  return n;
}

}  // namespace sustain::sampling

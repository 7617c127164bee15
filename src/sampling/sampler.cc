#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>

namespace sustain::sampling {
namespace {

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

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  SUSTAIN_CHECK(logits != nullptr && n_vocab > 0);
  if (buffer_.size() < static_cast<size_t>(n_vocab)) buffer_.resize(n_vocab);
  Candidates& c = live_;
  fill_candidates(c, buffer_.data(), logits, n_vocab);
  if (!config_.logit_bias.empty()) logit_bias(c, config_.logit_bias);
  history_.apply(c);
  if (constraint_) apply_mask(c, constraint_->allowed());

  int32_t token;
  if (config_.temperature <= 0.0f) {
    // top-k, top-p and min-p all keep the argmax, so greedy skips them.
    token = c.data[argmax(c)].id;
    last_ = TokenProb{token, 1.0f, 0.0f};
    last_greedy_ = true;
  } else {
    top_k(c, config_.top_k);
    top_p(c, config_.top_p);
    min_p(c, config_.min_p);
    temperature(c, config_.temperature);
    softmax(c);
    const Candidate& chosen = c.data[draw(c, rng_.uniform())];
    token = chosen.id;
    last_ = TokenProb{token, chosen.prob, std::log(chosen.prob)};
    last_greedy_ = false;
  }
  history_.accept(token);
  if (constraint_) constraint_->accept(token);
  return token;
}

size_t Sampler::top_probs(std::span<TokenProb> out) {
  if (last_.id < 0 || out.empty()) return 0;
  if (last_greedy_) {
    out[0] = last_;
    return 1;
  }
  const size_t n = std::min(out.size(), live_.size);
  // Probabilities are monotone in the final logits, so the chain's order is
  // the probability order; only the first n need sorting.
  if (!live_.sorted) {
    std::partial_sort(live_.data, live_.data + n, live_.data + live_.size, ranks_before);
  }
  for (size_t i = 0; i < n; ++i) {
    const Candidate& cand = live_.data[i];
    out[i] = TokenProb{cand.id, cand.prob, std::log(cand.prob)};
  }
  return n;
}

}  // namespace sustain::sampling

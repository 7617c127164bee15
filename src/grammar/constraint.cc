#include "grammar/constraint.h"

#include <chrono>

namespace sustain::grammar {
namespace {

class State final : public sampling::TokenConstraint {
 public:
  State(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab,
        std::shared_ptr<SharedMasks> shared, std::shared_ptr<GrammarConstraint::MaskTimes> times)
      : matcher_(std::move(g)),
        masker_(vocab, std::move(shared)),
        vocab_(std::move(vocab)),
        times_(std::move(times)) {}

  std::span<const uint32_t> allowed() override {
    if (!ended_) {
      if (!times_->on.load(std::memory_order_relaxed)) return masker_.mask(matcher_);
      const auto t0 = std::chrono::steady_clock::now();
      const TokenMask& m = masker_.mask(matcher_);
      const std::chrono::duration<float, std::micro> dt = std::chrono::steady_clock::now() - t0;
      std::lock_guard<std::mutex> l(times_->mu);
      if (times_->us.size() < GrammarConstraint::kMaxMaskTimes) times_->us.push_back(dt.count());
      return m;
    }
    // After the end (an end-of-generation token under ignore_eos, or a token
    // the grammar did not take): only more ends.
    if (end_only_.empty()) {
      end_only_.assign((static_cast<size_t>(vocab_->n_vocab()) + 31) / 32, 0);
      for (int32_t id : vocab_->eog()) end_only_[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    }
    return end_only_;
  }

  void accept(int32_t token) override {
    if (ended_) return;
    if (token < 0 || token >= vocab_->n_vocab() || vocab_->is_eog(token) ||
        !matcher_.advance(vocab_->piece(token)))
      ended_ = true;
  }

 private:
  Matcher matcher_;
  TokenMasker masker_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<GrammarConstraint::MaskTimes> times_;
  bool ended_ = false;
  TokenMask end_only_;
};

}  // namespace

std::unique_ptr<sampling::TokenConstraint> GrammarConstraint::start() const {
  return std::make_unique<State>(grammar_, vocab_, shared_, times_);
}

std::vector<float> GrammarConstraint::take_mask_times_us() const {
  std::lock_guard<std::mutex> l(times_->mu);
  std::vector<float> out;
  out.swap(times_->us);
  return out;
}

Status GrammarConstraint::check_startable() const {
  Matcher m(grammar_);
  if (m.state().can_end) return Status::ok();
  TokenMasker masker(vocab_, shared_);
  const TokenMask& mask = masker.mask(m);
  for (size_t w = 0; w < mask.size(); ++w) {
    uint32_t bits = mask[w];
    while (bits != 0) {
      const int b = __builtin_ctz(bits);
      bits &= bits - 1;
      if (!vocab_->is_eog(static_cast<int32_t>(w * 32 + static_cast<size_t>(b))))
        return Status::ok();
    }
  }
  return Status(Code::kInvalidArgument,
                "no token of this model's vocabulary can start the grammar (or it matches "
                "nothing)");
}

}  // namespace sustain::grammar

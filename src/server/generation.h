// The engine side of one HTTP completion: its n engine Streams (one per
// choice, seeds seed+i), read together, each through a ChoiceText. Dropping
// a Generation cancels whatever is still running.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/choice.h"
#include "server/request.h"

namespace sustain::server {

struct ChoiceUpdate {
  int index = 0;
  std::string text;                         // new text to send (may be empty)
  std::vector<TokenLogprobEntry> logprobs;  // entries of the tokens consumed
  const char* finish_reason = nullptr;      // set on the choice's last update
  Status error;                             // the engine failed this choice
};

class Generation {
 public:
  Generation(engine::Engine& engine, const CompletionRequest& r, int64_t prompt_tokens);
  ~Generation();

  // Submits the n requests. On failure the ones already queued are cancelled.
  // `media`: the prompt's images, when it has any (prompt is media->ids).
  Status submit(const std::vector<int32_t>& prompt, int32_t max_tokens,
                std::shared_ptr<const engine::MediaPrompt> media = nullptr);

  // Waits up to `wait` for something to happen and reports it per choice.
  void poll(std::chrono::milliseconds wait, const std::function<void(ChoiceUpdate&)>& emit);
  bool done() const;
  void cancel();  // the client went away

  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t cached_prompt_tokens() const { return cached_prompt_tokens_; }
  // Speculative decoding, summed over the choices.
  int64_t spec_drafted() const { return spec_drafted_; }
  int64_t spec_accepted() const { return spec_accepted_; }
  int64_t spec_steps() const { return spec_steps_; }
  int64_t completion_tokens() const;
  int n() const { return static_cast<int>(choices_.size()); }

 private:
  void consume(int i, engine::Event& ev, ChoiceUpdate& u);

  engine::Engine* engine_;
  const CompletionRequest* req_;
  int64_t prompt_tokens_ = 0, cached_prompt_tokens_ = 0;
  int64_t spec_drafted_ = 0, spec_accepted_ = 0, spec_steps_ = 0;
  std::vector<engine::Stream> streams_;
  std::vector<ChoiceText> choices_;
  std::vector<bool> finished_;
};

}  // namespace sustain::server

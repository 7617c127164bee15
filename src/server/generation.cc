#include "server/generation.h"

namespace sustain::server {

Generation::Generation(engine::Engine& engine, const CompletionRequest& r, int64_t prompt_tokens)
    : engine_(&engine), req_(&r), prompt_tokens_(prompt_tokens) {}

Generation::~Generation() {
  cancel();
}

Status Generation::submit(const std::vector<int32_t>& prompt, int32_t max_tokens,
                          std::shared_ptr<const engine::MediaPrompt> media) {
  const auto& tok = engine_->tokenizer();
  for (int i = 0; i < req_->n; ++i) {
    engine::Request er;
    er.prompt = prompt;
    er.media = media;
    er.max_tokens = max_tokens;
    er.sampling = req_->sampling;
    // Choice i replays with seed + i, so each choice of a seeded request is
    // reproducible and the choices differ from each other.
    er.sampling.seed = req_->sampling.seed + static_cast<uint64_t>(i);
    er.ignore_eos = req_->ignore_eos;
    er.speculative = req_->speculative;
    er.tpot_target_ms = req_->tpot_target_ms;
    er.logprobs = req_->logprobs;
    er.top_logprobs = req_->top_logprobs;
    auto s = engine_->submit(std::move(er));
    if (!s) {
      cancel();
      return s.status();
    }
    streams_.push_back(std::move(*s));
    choices_.emplace_back(tok, req_->stop, req_->logprobs, req_->keep_token);
    finished_.push_back(false);
  }
  return Status::ok();
}

bool Generation::done() const {
  for (bool f : finished_)
    if (!f) return false;
  return true;
}

void Generation::cancel() {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (!finished_[i]) {
      engine_->cancel(streams_[i].id());
      finished_[i] = true;
    }
}

int64_t Generation::completion_tokens() const {
  int64_t n = 0;
  for (const auto& c : choices_) n += c.tokens();
  return n;
}

void Generation::consume(int i, engine::Event& ev, ChoiceUpdate& u) {
  ChoiceText& c = choices_[i];
  for (const auto& t : ev.tokens) {
    u.text += c.push(t);
    if (c.stopped()) break;
  }
  if (c.stopped()) {
    // The stop string is complete: nothing after it is wanted.
    engine_->cancel(streams_[i].id());
    finished_[i] = true;
    u.finish_reason = "stop";
  } else if (ev.done) {
    u.text += c.finish();
    finished_[i] = true;
    if (i == 0) cached_prompt_tokens_ = ev.usage.cached_prompt_tokens;
    spec_drafted_ += ev.usage.spec_drafted;
    spec_accepted_ += ev.usage.spec_accepted;
    spec_steps_ += ev.usage.spec_steps;
    if (c.stopped()) {
      u.finish_reason = "stop";
    } else if (ev.finish == engine::Finish::kError) {
      u.finish_reason = "error";
      u.error =
          ev.error.is_ok() ? Status(Code::kInternal, "the engine failed this request") : ev.error;
    } else {
      u.finish_reason = engine::finish_name(ev.finish);
    }
  }
  u.logprobs = c.take_logprobs();
}

void Generation::poll(std::chrono::milliseconds wait,
                      const std::function<void(ChoiceUpdate&)>& emit) {
  bool any = false;
  int first_open = -1;
  for (int i = 0; i < n(); ++i) {
    if (finished_[i]) continue;
    if (first_open < 0) first_open = i;
    auto ev = streams_[i].next(std::chrono::milliseconds(0));
    if (!ev) continue;
    any = true;
    ChoiceUpdate u;
    u.index = i;
    consume(i, *ev, u);
    emit(u);
  }
  if (any || first_open < 0) return;
  auto ev = streams_[first_open].next(wait);
  if (!ev) return;
  ChoiceUpdate u;
  u.index = first_open;
  consume(first_open, *ev, u);
  emit(u);
}

}  // namespace sustain::server

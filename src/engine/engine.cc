// Engine: lifecycle (create, submit, cancel, stats) and the step loop. The
// loop thread is the only one that touches the model, the KV pool, the
// prefix cache and the sequences; clients reach it through the inbox, the
// cancel flags and each request's Stream.
#include <algorithm>
#include <cmath>
#include <thread>
#include <unordered_map>

#include "base/batch_invariant.h"
#include "engine/ranks.h"
#include "engine/relay.h"
#include "engine/request_state.h"
#include "engine/scheduler.h"
#include "model/repack.h"

namespace sustain::engine {

using detail::RequestState;

Engine::Engine(const EngineConfig& c) : config_(c) {}

Engine::~Engine() {
  if (impl_) impl_->shutdown();
}

Expected<std::unique_ptr<Engine>> Engine::create(const EngineConfig& c) {
  if (c.n_threads < 0) return error(Code::kInvalidArgument, "engine: threads must be >= 0 (0 = all cores), got {}", c.n_threads);
  if (c.n_ctx < 2) return error(Code::kInvalidArgument, "engine: context (-c) must be at least 2 tokens, got {}", c.n_ctx);
  if (c.n_parallel < 1 || c.n_parallel > kMaxParallel)
    return error(Code::kInvalidArgument, "engine: --parallel must be in [1, {}], got {}", kMaxParallel, c.n_parallel);
  if (c.batch_tokens < 1) return error(Code::kInvalidArgument, "engine: --batch-size must be >= 1, got {}", c.batch_tokens);
  if (c.ubatch_tokens < 1) return error(Code::kInvalidArgument, "engine: --ubatch-size must be >= 1, got {}", c.ubatch_tokens);
  if (c.kv_tokens < 0) return error(Code::kInvalidArgument, "engine: KV pool tokens must be >= 0, got {}", c.kv_tokens);
  if (c.kv_budget_bytes < 0) return error(Code::kInvalidArgument, "engine: --kv-budget must be >= 0, got {}", c.kv_budget_bytes);
  if (c.max_queue < 0) return error(Code::kInvalidArgument, "engine: --max-queue must be >= 0, got {}", c.max_queue);
  if (!(c.tpot_target_ms == kTpotAuto || (c.tpot_target_ms >= 0 && c.tpot_target_ms <= 1e6)))
    return error(Code::kInvalidArgument,
                 "engine: --tpot-target must be auto, 0 (off) or a time in (0, 1e6] ms, got {}",
                 c.tpot_target_ms);
  if (!(c.prefill_age_bound_s >= 0 && c.prefill_age_bound_s <= 1e6))
    return error(Code::kInvalidArgument,
                 "engine: --prefill-age-bound must be in [0, 1e6] seconds, got {}",
                 c.prefill_age_bound_s);
  if (c.page_tokens < 1 || c.page_tokens > 4096)
    return error(Code::kInvalidArgument, "engine: page size must be in [1, 4096] tokens, got {}", c.page_tokens);
  // Before any workspace is sized: the mode changes the attention scratch.
  set_batch_invariant(c.batch_invariant);
  set_weight_repack(c.repack);

  // Proposers run on rank 0 (ngram, a draft model, the MTP block, the
  // bench's oracle); verify steps, rollback and a hybrid's state backups go
  // to every rank as any step does. The MTP block reads the target's final
  // hidden state: rank 0's own under a tensor split, the last rank's (sent
  // with the logits) under a layer split.

  std::unique_ptr<Engine> e(new Engine(c));
  SUSTAIN_TRY(spec::validate(c.spec));
  if (c.ranks == nullptr) {
    SUSTAIN_ASSIGN_OR_RETURN(e->model_, Model::load(c.model_path));
    SUSTAIN_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_gguf(e->model_->file()));
    e->tok_ = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
    SUSTAIN_ASSIGN_OR_RETURN(relay::KvSetup setup, relay::kv_setup(*e->model_, c, nullptr));
    SUSTAIN_ASSIGN_OR_RETURN(auto impl, Scheduler::create(*e, setup.g, setup.pool_tokens));
    e->impl_ = std::move(impl);
    e->impl_->start();
    return e;
  }

  // Over ranks: every rank loads its part and sizes its pool; the pool is
  // the fewest tokens any rank holds, so page ids mean the same everywhere.
  Expected<relay::KvSetup> setup = Status::ok();
  auto model = Model::load(c.model_path, c.ranks->shard);
  if (model) {
    e->model_ = std::move(*model);
    setup = relay::kv_setup(*e->model_, c, c.ranks);
  } else {
    setup = model.status();
  }
  int64_t pool_tokens = 0;
  SUSTAIN_TRY(relay::open_followers(*c.ranks, c, setup, &pool_tokens));
  auto tok = tokenizer::Tokenizer::from_gguf(e->model_->file());
  Expected<std::unique_ptr<Scheduler>> impl = tok.status();
  if (tok) {
    e->tok_ = std::make_unique<tokenizer::Tokenizer>(std::move(*tok));
    Status whole = Status::ok();
    // A layer split's rank 0 holds the whole model (it runs only its
    // blocks); a tensor split's holds its cut, so the block runs on a
    // whole one.
    if (c.spec.uses("mtp") && c.ranks->tensor()) {
      auto m = Model::load(c.model_path);
      if (m)
        e->mtp_model_ = std::move(*m);
      else
        whole = m.status();
    }
    if (whole)
      impl = Scheduler::create(*e, setup->g, pool_tokens);
    else
      impl = whole;
  }
  SUSTAIN_TRY(relay::confirm_followers(*c.ranks, impl.status()));
  e->impl_ = std::move(*impl);
  e->impl_->start();
  return e;
}

Expected<Stream> Engine::submit(Request r) {
  const int64_t n_vocab = model_->config().n_vocab;
  if (r.prompt.empty())
    return error(Code::kInvalidArgument, "request: the prompt is empty (no tokens)");
  if (r.media) {
    const MediaPrompt& m = *r.media;
    if (m.ids != r.prompt)
      return error(Code::kInvalidArgument, "request: the prompt is not the one its images were laid out in");
    if (m.n_embd != model_->config().n_embd)
      return error(Code::kInvalidArgument,
                   "request: image embeddings of width {}, but the model's width is {}", m.n_embd,
                   model_->config().n_embd);
    if (m.non_causal && !m.images.empty() && model_->config().n_recurrent_layer() > 0)
      return error(Code::kUnsupported,
                   "request: this projector's image tokens attend both ways, which a model with "
                   "recurrent (linear-attention) layers cannot compute");
    const int64_t chunk = std::min(config_.batch_tokens, config_.ubatch_tokens);
    for (size_t i = 0; i < m.images.size(); ++i) {
      const auto& im = m.images[i];
      if (im.begin < 0 || im.end > m.size() || im.end <= im.begin ||
          (im.row + im.end - im.begin) * m.n_embd > static_cast<int64_t>(m.embd.size()))
        return error(Code::kInvalidArgument, "request: image {} is out of its prompt", i + 1);
      if (im.end - im.begin > chunk)
        return error(Code::kInvalidArgument,
                     "request: image {} takes {} positions, more than a forward chunk of {} "
                     "(raise --batch-size and --ubatch-size)",
                     i + 1, im.end - im.begin, chunk);
    }
  }
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.media && MediaPrompt::is_image_key(r.prompt[i]) && r.media->image_at(static_cast<int64_t>(i)))
      continue;
    if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
      return error(Code::kInvalidArgument,
                   "request: prompt token {} at index {} is outside the vocabulary (0..{})",
                   r.prompt[i], i, n_vocab - 1);
  }
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n + 1 > config_.n_ctx)
    return error(Code::kInvalidArgument,
                 "request: the prompt is {} tokens, but the context is {} tokens (room is needed "
                 "for at least one generated token)",
                 n, config_.n_ctx);
  if (r.max_tokens <= 0)
    return error(Code::kInvalidArgument, "request: max_tokens must be > 0, got {}", r.max_tokens);
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs)
    return error(Code::kInvalidArgument, "request: top_logprobs must be in [0, {}], got {}",
                 kMaxTopLogprobs, r.top_logprobs);
  if (!(r.tpot_target_ms >= 0 && r.tpot_target_ms <= 1e6))
    return error(Code::kInvalidArgument,
                 "request: tpot_target_ms must be in [0, 1e6] (0 = the server's), got {}",
                 r.tpot_target_ms);
  SUSTAIN_TRY(sampling::validate(r.sampling));
  if (r.synthetic_prefix) {
    const char* why = nullptr;
    if (config_.ranks != nullptr)
      why = "over ranks (each rank would need the same random K/V)";
    else if (kv_geometry().windowed())
      why = "with sliding-window layers";
    else if (r.media)
      why = "with images in the prompt";
    else if (r.speculative && (config_.spec.uses("draft") || config_.spec.uses("mtp")))
      why = "with the draft or mtp proposer (its own KV would need the prompt computed)";
    if (why != nullptr)
      return error(Code::kUnsupported,
                   "request: a random-filled prompt (bench --fill random) is not supported {}",
                   why);
  }
  return impl_->submit(std::move(r));
}

void Engine::cancel(uint64_t id) { impl_->cancel(id); }
EngineStats Engine::stats() const { return impl_->stats(); }
int64_t Engine::kv_bytes() const { return impl_->kv_bytes(); }
const kv::KvGeometry& Engine::kv_geometry() const { return impl_->kv_geometry(); }
int64_t Engine::kv_capacity_tokens() const { return impl_->kv_capacity_tokens(); }

}  // namespace sustain::engine

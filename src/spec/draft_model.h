// The "draft" proposer: a second, smaller GGUF of the same vocabulary runs
// ahead of the target. Each step it catches up with every drafting
// sequence's verified tokens (its own KV keeps what it computed, cut back
// to the longest prefix still valid after a rejection) and then samples up
// to k tokens, one batched forward per drafted position over all the
// sequences, from its own distribution q at the request's temperature,
// top-k, top-p and min-p. Its drafts carry q, so the engine verifies them
// by rejection sampling proper (min(1, p/q), residual max(0, p-q)).
//
// Its KV lives in a pool of its own, sized to mirror the target's (the
// target's pool tokens plus a draft's worth per sequence), so it never
// needs pages the target could use and never runs out where the target
// does not. Recurrent (hybrid) draft models are refused: their state cannot
// be cut back after a rejection.
//
// A draft model reads text only: the positions of a prompt's images
// (negative ids, engine/media_prompt.h) are left out of what it sees, so it
// drafts from the text around them, at positions of its own. Its drafts are
// worse after an image, never wrong (the engine verifies every one).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "spec/draw.h"
#include "spec/proposer.h"

namespace sustain::spec {

struct DraftModelOptions {
  QType k_type = QType::F16, v_type = QType::F16;
  int page_tokens = 32;
  int64_t pool_tokens = 0;    // KV tokens over all sequences (> 0)
  int n_seqs = 1;             // sequences drafted for at once (sizes a sliding-window pool)
  int64_t ubatch_tokens = 512;
  float p_min = 0.0f;         // stop drafting below this top probability (temperature 1)
  // A drafted position's sequences draw their tokens at once over the pool
  // (each sequence's sampler is its own); false: one after another.
  bool pool_sampling = true;
};

class DraftModelProposer final : public Proposer {
 public:
  // `model` is the loaded draft GGUF (the caller checks its vocabulary
  // against the target's); `pool` runs its forwards and must outlive it.
  static Expected<std::unique_ptr<DraftModelProposer>> create(std::unique_ptr<Model> model,
                                                              const DraftModelOptions& o,
                                                              ThreadPool& pool);
  const char* name() const override { return "draft"; }
  void propose_batch(std::span<Job> jobs) override;
  void forget(uint64_t seq) override;

  int64_t kv_bytes() const { return static_cast<int64_t>(cache_->bytes_allocated()); }
  // Pages its KV holds now (0 when no sequence is kept): a leak check.
  int32_t pages_in_use() const { return cache_->n_pages() - cache_->n_free_pages(); }
  const Model& model() const { return *model_; }

 private:
  struct SeqState {
    kv::PageTable table;
    std::vector<int32_t> computed;  // the tokens whose K/V are in `table`
    // A sequence with images: its tokens without them (what the draft
    // reads), built from the first `seen` of the sequence's tokens.
    std::vector<int32_t> text;
    size_t seen = 0;
    bool has_image = false;
    std::optional<sampling::Sampler> sampler;
  };
  DraftModelProposer(std::unique_ptr<Model> m, const DraftModelOptions& o, ThreadPool& pool)
      : model_(std::move(m)), opt_(o), pool_(pool) {}
  // Feeds every job's tokens the draft has not computed yet; leaves one
  // logits row per job in logits_. false: the forward failed (no drafts).
  bool catch_up(std::span<Job> jobs, std::span<SeqState*> st);
  // Draws the next token of live[idx[r]] from logits row r for every r
  // (spec/draw.h: over the pool where there are several); keep[r]: it
  // drafts on (p_min).
  void draw_rows(std::span<Job> live, std::span<SeqState*> st, const std::vector<size_t>& idx,
                 std::vector<char>& keep);
  // The tokens the draft reads for `tokens`: themselves, or for a sequence
  // with images the text without them (kept up to date in `s`).
  std::span<const int32_t> text_view(SeqState& s, std::span<const int32_t> tokens);

  std::unique_ptr<Model> model_;
  DraftModelOptions opt_;
  ThreadPool& pool_;
  std::optional<kv::KvCache> cache_;
  Workspace ws_;
  Batch batch_;
  std::vector<float> logits_;
  std::vector<std::vector<sampling::TokenProb>> probs_;  // draw scratch, one per pool slot
  std::vector<DrawItem> draws_;
  std::unordered_map<uint64_t, SeqState> seqs_;
};

}  // namespace sustain::spec

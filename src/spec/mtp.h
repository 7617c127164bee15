// The "mtp" proposer: the target's own MTP / NextN block (Qwen3.5's
// blk.N.nextn.*, Model::forward_mtp) drafts the token after the next one.
//
// The block is one more transformer layer with a KV of its own. Its entry at
// position i takes token i and the main model's normed final hidden state at
// position i − 1 (zeros at 0), and its logits there predict token i + 1.
// After every engine step the proposer is handed what each running sequence
// computed (Proposer::observe: the verified positions and their hidden
// states) and feeds the block every entry that has become computable, in one
// batched forward over all sequences; the entry of the sequence's last token
// (sampled, not yet computed by the target) leaves the block's output there.
// The head turns it into logits for the next position only when a draft is
// asked for (propose_batch, in one batch over the drafting sequences): a
// sequence the speculation gate keeps from drafting costs the block's one
// layer a token, not also the vocabulary-wide head. The draft is drawn at
// the request's temperature (q is kept, so the engine verifies by
// rejection sampling).
// Only verified tokens ever enter the block's KV, so a rejected draft needs
// no rollback. A prompt's image positions enter the block as their image
// rows (Observed::rows), as they entered the target.
//
// More than one token a step (MtpOptions::depth): the block's entry at the
// first draft's position takes that draft and, in place of the target's
// hidden state there (not computed yet), the block's own normed output at
// the position before — the rows its head read — and so on, one batched
// pass over the drafting sequences per token. Those entries are
// speculative: they leave the block's KV after the step, and the real ones
// enter when the target has verified the tokens.
//
// A prompt served from the target's prefix cache (MtpOptions::prefix_cache):
// the target computed no hidden states there, so the block keeps a prefix
// cache of its own over its pages (kv::PrefixCache, the same page-aligned
// keys), filled when a sequence ends with the entries it computed from real
// hidden states, and beside it, for each page boundary p, the hidden state
// at p − 1 that entry p reads. A sequence first seen past position 0 takes
// the longest cached prefix whose boundary state is kept and goes on from
// there exactly as a cold run would. Positions neither cache covers get
// zeros, as before: drafts there are worse, never wrong, and such entries
// never enter the cache.
//
// Its KV lives in a pool of its own that mirrors the target's, in f16.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "spec/draw.h"
#include "spec/proposer.h"

namespace sustain::spec {

struct MtpOptions {
  int page_tokens = 32;
  int64_t pool_tokens = 0;  // KV tokens over all sequences (> 0)
  int64_t ubatch_tokens = 512;
  float p_min = 0.0f;  // no draft below this top probability (temperature 1)
  int depth = 1;       // tokens drafted a step at most (chained passes)
  // Keep finished sequences' entries for prompts that share their prefix
  // (the engine's --no-prefix-cache turns it off with the target's).
  bool prefix_cache = true;
  // The block's own KV (-ctkd / -ctvd, as a draft model's): any format the
  // target's cache takes whose block divides the block's head dimension.
  QType k_type = QType::F16, v_type = QType::F16;
  // The sequences' draws of a pass at once over the pool (spec/draw.h).
  bool pool_sampling = true;
};

class MtpProposer final : public Proposer {
 public:
  // `target` is the engine's model (it must have an MTP block) and, like
  // `pool`, must outlive the proposer.
  static Expected<std::unique_ptr<MtpProposer>> create(const Model& target, const MtpOptions& o,
                                                       ThreadPool& pool);
  const char* name() const override { return "mtp"; }
  bool wants_hidden() const override { return true; }
  void observe(std::span<const Observed> steps) override;
  void propose_batch(std::span<Job> jobs) override;
  void forget(uint64_t seq) override;

  // The pool, and the boundary states kept beside its cached pages at
  // their most (one a page; what `plan --spec mtp` counts).
  int64_t kv_bytes() const {
    return static_cast<int64_t>(cache_->bytes_allocated() +
                                (prefix_ ? size_t(cache_->n_pages()) * row_bytes() : 0));
  }
  // Pages sequences hold (not those only the block's prefix cache keeps).
  int32_t pages_in_use() const {
    return cache_->n_pages() - cache_->n_free_pages() - pages_cached();
  }
  int32_t pages_cached() const { return prefix_ ? prefix_->evictable() : 0; }
  // Entries sequences took from the block's prefix cache instead of
  // computing them with zeros for the target's missing hidden states.
  uint64_t prefix_tokens_reused() const { return reused_tokens_; }
  // The block's logits at the sequence's last token (what its next draft is
  // drawn from; the head runs here if it has not yet) and that token's
  // position, or nullptr / -1.
  const float* next_logits(uint64_t seq, int64_t* pos = nullptr);

 private:
  struct SeqState {
    kv::PageTable table;  // the block's K/V of positions [0, done)
    int64_t done = 0;
    std::vector<float> h_next;  // the main hidden at position done − 1, when known
    bool has_h_next = false;
    int64_t x_pos = -1;  // the position whose entry left `x` (the block's output)
    std::vector<float> x;
    int64_t logits_pos = -1;  // the position whose head output is in `logits`
    std::vector<float> logits;
    std::vector<float> h_out;  // the block's normed output there (what a chained pass reads)
    std::optional<sampling::Sampler> sampler;
    std::vector<int32_t> tokens;  // of the entries [0, done)
    int64_t inexact = -1;         // the first entry computed without its hidden state (-1: none)
    uint64_t chain = 0;           // page_key of tokens [0, chain_end)
    int64_t chain_end = 0;
  };
  // The key of the prefix that ends a page after `parent`'s (0: none).
  static uint64_t page_key(uint64_t parent, std::span<const int32_t> page);
  size_t row_bytes() const { return sizeof(float) * static_cast<size_t>(model_.config().n_embd); }
  // A new sequence first seen past position 0: its entries before `limit`
  // from the block's prefix cache, where both the pages and the boundary
  // state are kept.
  void attach_cached(SeqState& s, std::span<const int32_t> tokens, int64_t limit);
  // Keeps h (the hidden state at p − 1) for the page boundary p of s.
  void keep_boundary(SeqState& s, std::span<const int32_t> tokens, int64_t p, const float* h);
  // Room for n more entries of s, evicting cached pages if need be.
  bool reserve(SeqState& s, int64_t n);
  MtpProposer(const Model& m, const MtpOptions& o, ThreadPool& pool)
      : model_(m), opt_(o), pool_(pool) {}
  // Runs batch_ / h_prev_ through the block; the output rows of the tokens
  // marked for logits go to the sequences in `last_seqs` (batch order).
  // false: the forward failed.
  bool run(const std::vector<std::pair<SeqState*, int64_t>>& last_seqs);
  // Runs the head for the sequences whose output at x_pos has no logits yet.
  void ensure_logits(std::span<SeqState* const> seqs);

  const Model& model_;
  MtpOptions opt_;
  ThreadPool& pool_;
  std::optional<kv::KvCache> cache_;
  std::unique_ptr<kv::PrefixCache> prefix_;  // over *cache_; destroyed first
  // Boundary states by page_key, the oldest dropped first past one a page.
  std::unordered_map<uint64_t, std::vector<float>> bounds_;
  std::deque<uint64_t> bound_order_;
  uint64_t reused_tokens_ = 0;
  Workspace ws_;
  Batch batch_;
  std::vector<float> h_prev_, logits_, x_rows_, normed_;
  std::vector<std::vector<sampling::TokenProb>> probs_;  // draw scratch, one per pool slot
  std::vector<DrawItem> draws_;
  std::unordered_map<uint64_t, SeqState> seqs_;
};

}  // namespace sustain::spec

// Private to engine/: the messages between rank 0's engine and the
// followers of an engine over ranks (ranks.h), and the KV setup both sides
// compute from the same EngineConfig.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/api.h"
#include "engine/ranks.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace sustain::engine::relay {

// The KV geometry and pool size of an engine on this rank: the model's
// whole cache, or with ranks the cache of this rank's blocks (layer split)
// or heads (tensor split, the model loaded with its shard). Errors name the
// setting (a --kv-budget that holds less than the context).
struct KvSetup {
  kv::KvGeometry g;
  int64_t pool_tokens = 0;
};
Expected<KvSetup> kv_setup(const Model& m, const EngineConfig& c, const EngineRanks* r);

// Rank 0, Engine::create: sends the config to the followers, and with them
// agrees on the pool (the fewest tokens any rank's --kv-budget holds, so
// that page ids mean the same everywhere). `local` is rank 0's own load and
// setup; an error on any rank comes back naming it, after which the
// followers wait for the next engine.
Status open_followers(const EngineRanks& r, const EngineConfig& c, const Expected<KvSetup>& local,
                      int64_t* pool_tokens);
// Rank 0, after open_followers: whether rank 0's cache was made (the
// followers make theirs); an error on any rank comes back naming it.
Status confirm_followers(const EngineRanks& r, const Status& local);
// Rank 0: the engine is gone; the followers drop theirs.
Status close_followers(const EngineRanks& r);

// Rank 0, before each forward: the batch, each sequence's page table, and
// the page copies and recurrent-state changes the cache made since the last
// step. Returns once every rank has it. `hidden`: rank 0 wants every
// token's hidden state (--spec mtp), which under a layer split the last
// rank sends after the logits.
Status send_step(const EngineRanks& r, const Batch& b, const std::vector<kv::PageCopy>& copies,
                 const std::vector<kv::StateOp>& state_ops, int64_t n_embd, bool hidden = false);
// Rank 0, after its forward under a layer split: the logits rows the last
// rank computed (nothing to do under a tensor split).
Status recv_logits(const EngineRanks& r, float* logits, int64_t n);
// Rank 0, after recv_logits under a layer split, for a step sent with
// `hidden`: every token's normed final hidden state [n_tokens × n_embd].
Status recv_hidden(const EngineRanks& r, float* hidden, int64_t n);

}  // namespace sustain::engine::relay

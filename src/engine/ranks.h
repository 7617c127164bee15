// An engine over the ranks of an mpirun job (docs/split.md, "serve and bench
// over ranks"). Rank 0 runs the Engine as usual — scheduler, tokenizer,
// sampling, HTTP — with EngineConfig::ranks set; every other rank calls
// follow_engines(), which builds the same engine's compute part (its blocks
// or its heads, a KV pool with the same page ids) whenever rank 0 creates
// one, and runs each step rank 0 sends: the batch, the page tables and the
// copy-on-write copies the step's reservations made. The followers allocate
// nothing on their own, so their pools cannot drift from rank 0's.
#pragma once

#include <string>

#include "base/status.h"
#include "model/shard.h"
#include "model/stage.h"

namespace sustain::dist {
class Comm;
}

namespace sustain::engine {

struct EngineRanks {
  dist::Comm* comm = nullptr;          // the job (more than one rank)
  PipelineStage* stage = nullptr;      // this rank's blocks and its hand-offs / collectives
  const TensorShard* shard = nullptr;  // --split tensor: this rank's share; null: layer split
  // The same ranks cut the other way (bench --ablate split=layer|tensor),
  // where the model can be: an engine made with EngineConfig::ranks = other
  // runs over it, and the followers build theirs the same way (the open
  // message says which). Null where it cannot be cut so; other_error says
  // why. The other's own `other` is null.
  const EngineRanks* other = nullptr;
  std::string other_error;
  bool tensor() const { return shard != nullptr; }
  // This layout or the other, by split kind; null with `why` set where the
  // job cannot run it.
  const EngineRanks* layout(bool tensor_split, std::string* why) const;
};

// A rank other than 0: serves every engine rank 0 creates, one after
// another, until rank 0 calls end_followers(). Returns an error only for a
// broken message or transport (the job cannot go on); an engine that fails
// to build here is reported to rank 0, whose Engine::create fails naming
// this rank, and the follower waits for the next.
Status follow_engines(const EngineRanks& r);

// Rank 0, once no engine is left: ends follow_engines() on the other ranks.
Status end_followers(const EngineRanks& r);

}  // namespace sustain::engine

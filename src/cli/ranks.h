// `--split` for the model-running commands (docs/split.md): the flags, and
// the ranks of an mpirun job with this process's pipeline stage. Rank 0 owns
// the tokenizer, sampling and output and drives every step; the other ranks
// follow (follow_steps) until rank 0 says stop.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dist/comm.h"
#include "engine/ranks.h"
#include "model/shard.h"
#include "model/stage.h"

namespace sustain::cli {

struct SplitArgs {
  std::string split = "none";  // --split / --split-mode (-sm): none, layer, tensor (row)
  std::string ratio;           // --ratio / --tensor-split (-ts): shares, one per rank
  std::string output = "split";  // --split-output: split (by vocabulary rows) or rank0
  int micro_batches = 0;         // --micro-batches: layer split, chunks per forward call (0: auto)
};

// --split, --ratio and their llama.cpp spellings.
void add_split_flags(CLI::App* sub, SplitArgs& a);

struct Ranks {
  std::unique_ptr<dist::Comm> comm;
  bool tensor = false;          // --split tensor (else layer, when split)
  std::vector<int64_t> bounds;  // rank r computes blocks [bounds[r], bounds[r + 1])
  // --split tensor: every rank's share; the model is loaded with shards[rank].
  std::vector<TensorShard> shards;
  PipelineStage stage;          // this rank's (hand-off / collectives wired to comm)
  // The model cut the other way over the same ranks (bench --ablate
  // split=layer|tensor); empty where it cannot be, alt_error saying why.
  struct Alt {
    bool tensor = false;
    std::vector<int64_t> bounds;
    std::vector<TensorShard> shards;
    PipelineStage stage;
  };
  std::optional<Alt> alt;
  std::string alt_error;
  engine::EngineRanks alt_engine;  // engine_ranks()' `other`, over alt
  bool stopped = false;         // rank 0 has told the others to stop
  bool in_step = false;         // a step was broadcast and has not finished here
  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
  bool split() const { return !bounds.empty(); }
  bool follower() const { return comm->rank() > 0; }
  const TensorShard* shard() const {
    return tensor ? &shards[static_cast<size_t>(comm->rank())] : nullptr;
  }
};

// Checks the flags against the launch (mpirun's rank count, read from the
// environment) and the model's block count (read from its metadata), all
// before loading; then starts MPI when there is more than one rank. Errors
// name the flag.
Expected<std::unique_ptr<Ranks>> open_ranks(const SplitArgs& a, const std::string& model_path);

// Prints an error of open_ranks and returns the exit code. Every rank
// prints (a rank other than 0 with its number): the launcher may end the job
// as soon as the first rank exits, before rank 0's line is out.
int fail_launch(const Status& st);

// The end of a command on every rank. Rank 0 between steps tells the
// followers to stop (they exit 0, rank 0 with `rc`); a failure on a follower
// or in the middle of a step ends the whole job (MPI_Abort), so no rank
// waits for a message that will not come. Returns the exit code.
int finish_ranks(Ranks& r, int rc);

// The commands that run an Engine (serve, bench) over ranks: rank 0 sets
// EngineConfig::ranks to engine_ranks(r) (null for one rank), the others
// call follow_engines with it; finish_engine_ranks ends the job as
// finish_ranks does, with the engine's end message.
engine::EngineRanks engine_ranks(Ranks& r);
int finish_engine_ranks(Ranks& r, int rc);

// serve and bench: opens the ranks for `model_path`, runs `main` on rank 0
// (with the engine ranks, or null for one process) while the others follow
// its engines, and ends the job. Returns the exit code.
int run_engine_command(const SplitArgs& a, const std::string& model_path,
                       const std::function<int(const engine::EngineRanks*)>& main);

// The message rank 0 broadcasts before each forward step: what to feed.
struct Step {
  bool stop = false;
  bool all_logits = false;
  int64_t batch = 0;
  std::vector<int32_t> tokens;
};
Status broadcast_step(Ranks& r, Step& s);

// After the follower has loaded its stage: copies logits rows that the last
// rank computed to rank 0 (nothing in a one-rank job or a tensor split,
// where rank 0 computes them).
Status gather_logits(Ranks& r, std::vector<float>* logits);

}  // namespace sustain::cli

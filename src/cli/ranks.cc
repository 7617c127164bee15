#include "cli/ranks.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "plan/parse.h"
#include "plan/plan.h"

namespace sustain::cli {

void add_split_flags(CLI::App* sub, SplitArgs& a) {
  sub->add_option("--split,--split-mode", a.split,
                  "run one model over the ranks of an mpirun job (alias -sm): none, layer "
                  "(contiguous blocks per rank), tensor (alias row: every block's heads, DeltaNet "
                  "heads, FFN columns or experts shared out)")
      ->capture_default_str();
  sub->add_option("--ratio,--tensor-split", a.ratio,
                  "share of each rank, comma-separated (alias -ts; 2,1.5); default: even");
  sub->add_option("--split-output", a.output,
                  "--split tensor: the output matrix split by vocabulary rows over the ranks, "
                  "rank 0 gathering the logits (split), or all on rank 0 (rank0)")
      ->capture_default_str();
  sub->add_option("--micro-batches", a.micro_batches,
                  "--split layer: cut a forward call of 64 tokens or more into this many chunks "
                  "(at least 32 tokens each) so the ranks work on different chunks at once; 1 = "
                  "off, 0 = auto (2 per rank)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
}

namespace {

// `-sm none` or no flag; otherwise the plan's split kind.
Expected<std::optional<plan::Split>> split_kind(const std::string& s) {
  if (s.empty() || s == "none") return std::optional<plan::Split>();
  SUSTAIN_ASSIGN_OR_RETURN(plan::Split k, plan::parse_split(s, "--split"));
  return std::optional<plan::Split>(k);
}

// Rows of columns split over the ranks ([rows, width[r]] on rank r) into
// every rank's [rows, Σ width]: gathered rank after rank, then put in order
// row by row.
std::function<Status(const float*, float*, int64_t)> column_gather(
    dist::Comm* comm, const std::vector<int64_t>& width) {
  auto buf = std::make_shared<std::vector<float>>();
  return [comm, width, buf](const float* own, float* all, int64_t rows) {
    std::vector<size_t> bytes;
    int64_t total = 0;
    for (int64_t w : width) {
      bytes.push_back(static_cast<size_t>(rows * w) * sizeof(float));
      total += w;
    }
    buf->resize(static_cast<size_t>(rows * total));
    SUSTAIN_TRY(comm->all_gather(own, buf->data(), bytes));
    const float* src = buf->data();
    int64_t col = 0;
    for (int64_t w : width) {
      for (int64_t t = 0; t < rows; ++t) std::copy_n(src + t * w, w, all + t * total + col);
      src += rows * w;
      col += w;
    }
    return Status::ok();
  };
}

// One way to cut the model over `n` ranks: a tensor split's shards, or the
// layer split's block ranges. Errors name the flags.
struct Cut {
  bool tensor = false;
  std::vector<int64_t> bounds;  // rank r computes blocks [bounds[r], bounds[r + 1])
  std::vector<TensorShard> shards;
};

Expected<Cut> make_cut(bool tensor, const SplitArgs& a, const ArchConfig& c, const gguf::File& f,
                       const std::vector<double>& shares, int n) {
  Cut cut;
  cut.tensor = tensor;
  const auto n_layer = static_cast<int64_t>(c.n_main_layer());
  if (tensor) {
    SUSTAIN_ASSIGN_OR_RETURN(const ShardGranules g, shard_granules(c, f));
    auto shards = tensor_shards(c, shares, g, a.output == "split");
    if (!shards)
      return shards.status().with_context(
          a.ratio.empty() ? fmt::format("--split tensor over {} ranks", n)
                          : fmt::format("--split tensor --ratio '{}'", a.ratio));
    cut.shards = std::move(*shards);
    cut.bounds = {0, n_layer};
    return cut;
  }
  if (n > n_layer)
    return error(Code::kInvalidArgument,
                 "--split layer: {} ranks for a model of {} blocks; use at most {} ranks", n,
                 n_layer, n_layer);
  cut.bounds = split_bounds(n_layer, shares);
  for (int k = 0; k < n; ++k)
    if (cut.bounds[k + 1] <= cut.bounds[k]) {
      std::string per;
      for (int j = 0; j < n; ++j)
        per += fmt::format("{}{}", j ? ", " : "", cut.bounds[j + 1] - cut.bounds[j]);
      return error(Code::kInvalidArgument,
                   "--ratio '{}' leaves rank {} without a block of the model's {} (blocks per "
                   "rank: {}); give it a larger share",
                   a.ratio, k, n_layer, per);
    }
  return cut;
}

// This rank's stage of a cut: its blocks, and its hand-offs (layer) or
// collectives (tensor) wired to `comm`.
void wire_stage(PipelineStage& st, bool tensor, const std::vector<int64_t>& bounds,
                const std::vector<TensorShard>& shards, dist::Comm* comm, const SplitArgs& a,
                const ArchConfig& c) {
  const int me = comm->rank(), n = comm->size();
  if (tensor) {
    st.layer_begin = 0;
    st.layer_end = static_cast<int>(bounds.back());
    const bool split_output = a.output == "split";
    st.head = split_output || me == 0;
    st.all_reduce = [comm](float* x, int64_t k) {
      return comm->all_reduce_sum(x, static_cast<size_t>(k));
    };
    std::vector<int64_t> heads, vocab;  // columns per row, per rank
    for (const TensorShard& sh : shards) {
      heads.push_back(int64_t{sh.n_heads()} * c.head_dim_v);
      vocab.push_back(sh.n_vocab());
    }
    st.gather_heads = column_gather(comm, heads);
    if (split_output) st.gather_vocab = column_gather(comm, vocab);
    return;
  }
  st.layer_begin = static_cast<int>(bounds[me]);
  st.layer_end = static_cast<int>(bounds[me + 1]);
  st.micro_batches = n == 1 ? 1 : a.micro_batches > 0 ? a.micro_batches : 2 * n;
  if (me > 0)
    st.recv = [comm, me](float* x, int64_t k) {
      return comm->recv(me - 1, x, static_cast<size_t>(k) * sizeof(float));
    };
  if (me + 1 < n)
    st.send = [comm, me](const float* x, int64_t k) {
      return comm->send(me + 1, x, static_cast<size_t>(k) * sizeof(float));
    };
}

}  // namespace

int fail_launch(const Status& st) {
  const int rank = dist::launch_from_env().rank;
  return fail(rank > 0 ? fmt::format("rank {}: {}", rank, st.message()) : st.message());
}

Expected<std::unique_ptr<Ranks>> open_ranks(const SplitArgs& a, const std::string& model_path) {
  const dist::Launch launch = dist::launch_from_env();
  SUSTAIN_ASSIGN_OR_RETURN(auto kind, split_kind(a.split));
  auto r = std::make_unique<Ranks>();
  if (!kind) {
    if (a.micro_batches != 0)
      return error(Code::kInvalidArgument, "--micro-batches applies to --split layer only");
    if (!a.ratio.empty())
      return error(Code::kInvalidArgument, "--ratio '{}' needs --split layer or tensor", a.ratio);
    if (a.output != "split")
      return error(Code::kInvalidArgument, "--split-output {} applies to --split tensor only",
                   a.output);
    if (launch.size > 1)
      return error(Code::kInvalidArgument,
                   "started as {} ranks by a launcher (mpirun) but without --split: give --split "
                   "layer or tensor to run one model over them, or start one process",
                   launch.size);
    r->comm = dist::local_comm();
    return r;
  }
  // A build without MPI refuses the flag even for one rank: what was asked
  // for (a model over ranks) cannot happen, and saying so beats running alone.
  if (!dist::mpi_built()) return dist::mpi_comm().status().with_context("--split " + a.split);

  std::vector<double> shares(static_cast<size_t>(launch.size), 1.0);
  if (!a.ratio.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(shares, plan::parse_number_list(a.ratio, "--ratio"));
    if (static_cast<int>(shares.size()) != launch.size)
      return error(Code::kInvalidArgument, "--ratio '{}' has {} shares for {} rank{}", a.ratio,
                   shares.size(), launch.size, launch.size == 1 ? "" : "s");
  }
  if (a.output != "split" && a.output != "rank0")
    return error(Code::kInvalidArgument, "--split-output '{}': give split or rank0", a.output);
  if (a.micro_batches != 0 && *kind != plan::Split::kLayer)
    return error(Code::kInvalidArgument, "--micro-batches applies to --split layer only");
  if (a.output != "split" && *kind != plan::Split::kTensor)
    return error(Code::kInvalidArgument, "--split-output {} applies to --split tensor only",
                 a.output);
  // Metadata only: the blocks to divide, before any weight is touched.
  SUSTAIN_ASSIGN_OR_RETURN(gguf::File f, gguf::File::open(model_path));
  SUSTAIN_ASSIGN_OR_RETURN(ArchConfig c, arch_config_from_gguf(f));
  // The main blocks: an MTP block (qwen35) is not part of the forward.
  const auto n_layer = static_cast<int64_t>(c.n_main_layer());
  SUSTAIN_ASSIGN_OR_RETURN(Cut cut,
                           make_cut(*kind == plan::Split::kTensor, a, c, f, shares, launch.size));
  r->tensor = cut.tensor;
  r->bounds = std::move(cut.bounds);
  r->shards = std::move(cut.shards);
  // The other split of the same ranks, for bench --ablate split=layer|tensor.
  Expected<Cut> alt = make_cut(!r->tensor, a, c, f, shares, launch.size);
  if (alt) {
    r->alt.emplace();
    r->alt->tensor = alt->tensor;
    r->alt->bounds = std::move(alt->bounds);
    r->alt->shards = std::move(alt->shards);
  } else {
    r->alt_error = alt.status().message();
  }

  if (launch.size > 1) {
    SUSTAIN_ASSIGN_OR_RETURN(r->comm, dist::mpi_comm());
    if (r->comm->size() != launch.size || r->comm->rank() != launch.rank)
      return error(Code::kInternal, "MPI says rank {} of {}, the launcher said {} of {}",
                   r->comm->rank(), r->comm->size(), launch.rank, launch.size);
  } else {
    r->comm = dist::local_comm();
  }
  wire_stage(r->stage, r->tensor, r->bounds, r->shards, r->comm.get(), a, c);
  if (r->alt)
    wire_stage(r->alt->stage, r->alt->tensor, r->alt->bounds, r->alt->shards, r->comm.get(), a, c);
  return r;
}

int finish_ranks(Ranks& r, int rc) {
  if (r.size() <= 1) return rc;
  if (rc != 0 && (r.follower() || r.in_step)) r.comm->abort(rc);
  if (!r.follower() && !r.stopped) {
    Step stop;
    stop.stop = true;
    if (Status st = broadcast_step(r, stop); !st) r.comm->abort(1);
  }
  return rc;
}

engine::EngineRanks engine_ranks(Ranks& r) {
  engine::EngineRanks e;
  e.comm = r.comm.get();
  e.stage = &r.stage;
  e.shard = r.shard();
  if (r.alt) {
    r.alt_engine = {};
    r.alt_engine.comm = r.comm.get();
    r.alt_engine.stage = &r.alt->stage;
    r.alt_engine.shard =
        r.alt->tensor ? &r.alt->shards[static_cast<size_t>(r.comm->rank())] : nullptr;
    e.other = &r.alt_engine;
  }
  e.other_error = r.alt_error;
  return e;
}

int finish_engine_ranks(Ranks& r, int rc) {
  if (r.size() <= 1) return rc;
  if (r.follower()) {
    if (rc != 0) r.comm->abort(rc);
    return rc;
  }
  if (Status st = engine::end_followers(engine_ranks(r)); !st) r.comm->abort(1);
  return rc;
}

int run_engine_command(const SplitArgs& a, const std::string& model_path,
                       const std::function<int(const engine::EngineRanks*)>& main) {
  auto r = open_ranks(a, model_path);
  if (!r) return fail_launch(r.status());
  Ranks& ranks = **r;
  if (ranks.size() <= 1) return main(nullptr);
  const engine::EngineRanks er = engine_ranks(ranks);
  if (ranks.follower()) {
    Status st = engine::follow_engines(er);
    if (!st)
      std::fprintf(stderr, "sustain: error: rank %d: %s\n", ranks.rank(), st.message().c_str());
    return finish_engine_ranks(ranks, st ? 0 : 1);
  }
  return finish_engine_ranks(ranks, main(&er));
}

Status broadcast_step(Ranks& r, Step& s) {
  if (r.size() <= 1) return Status::ok();
  // [stop, all_logits, batch, tokens...]: int32 is enough, -b is at most 65536.
  std::vector<int32_t> msg;
  if (!r.follower()) {
    msg = {s.stop, s.all_logits, static_cast<int32_t>(s.batch)};
    msg.insert(msg.end(), s.tokens.begin(), s.tokens.end());
  }
  SUSTAIN_TRY(dist::broadcast_vector(*r.comm, msg, 0));
  if (msg.size() < 3) return error(Code::kInternal, "a step message of {} words", msg.size());
  s.stop = msg[0] != 0;
  s.all_logits = msg[1] != 0;
  s.batch = msg[2];
  s.tokens.assign(msg.begin() + 3, msg.end());
  if (s.stop) r.stopped = true;
  return Status::ok();
}

Status gather_logits(Ranks& r, std::vector<float>* logits) {
  const int last = r.size() - 1;
  if (last == 0 || !logits || r.tensor) return Status::ok();
  const size_t bytes = logits->size() * sizeof(float);
  if (r.rank() == last) return r.comm->send(0, logits->data(), bytes);
  if (r.rank() == 0) return r.comm->recv(last, logits->data(), bytes);
  return Status::ok();
}

}  // namespace sustain::cli

// Private to engine/: the step loop (continuous batching with chunked
// prefill, admission by free KV pages, preemption by recompute) and the
// sequences it runs. Engine::Impl is this class. Its members are defined in
// scheduler.cc (creation, submission, the step loop, sampling and emission),
// scheduler_admit.cc (intake, admission, cancellation, preemption) and
// scheduler_spec.cc (drafting, the gate, verification and rollback).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/thread_pool.h"
#include "dist/comm.h"
#include "engine/request_state.h"
#include "engine/step_cost.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "spec/draft_model.h"
#include "spec/gate.h"
#include "spec/mtp.h"
#include "spec/proposer.h"

namespace sustain::engine {

// One request while the engine holds it.
struct Seq {
  std::shared_ptr<detail::RequestState> st;
  std::vector<int32_t> tokens;  // prompt + generated; the last generated one is not computed yet
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // tokens whose K/V are in the cache
  int32_t n_generated = 0;      // tokens emitted to the client
  int32_t max_new = 0;          // max_tokens clipped to the context
  kv::PageTable table;
  std::optional<sampling::Sampler> sampler;
  uint64_t admit_order = 0;     // larger = admitted later (the youngest is preempted first)
  bool admitted_once = false;
  int64_t cached_prompt = 0;
  // Hybrid models: the next page boundary where the recurrent state is saved
  // for prefix reuse, 0 for none. Prefill chunks stop there so that the
  // state passes through it.
  int64_t snapshot_at = 0;
  // Speculative decoding: this step's draft (verified after the forward),
  // and the request's counts.
  spec::Draft draft;
  std::vector<const float*> media_rows;  // a prompt with images: MediaPrompt::position_rows()
  int64_t spec_drafted = 0, spec_accepted = 0, spec_steps = 0;
  // The speculation gate: this sequence's acceptance, and when to probe it
  // while the gate keeps it from drafting (so that a low estimate is tested
  // again, less often the more probes fail).
  spec::AcceptanceEstimate acceptance;
  spec::ProbeSchedule probe;
  // This step's draft is one the gate let through to learn its price
  // (counted in EngineStats::spec_gate_learning_tokens once drafted).
  bool learning_draft = false;
  int32_t preemptions = 0;
  Clock::time_point t_start, t_first_token;
  int64_t step_tokens = 0;      // tokens planned for the current step
  bool done = false;            // finished; its final event waits in `finished`
};

struct Engine::Impl {
  static Expected<std::unique_ptr<Impl>> create(Engine& e, const kv::KvGeometry& g,
                                                int64_t pool_tokens);
  ~Impl();
  void start();
  void shutdown();

  Expected<Stream> submit(Request r);
  void cancel(uint64_t id);
  EngineStats stats() const;
  int64_t kv_bytes() const { return static_cast<int64_t>(cache->bytes_allocated()); }
  const kv::KvGeometry& kv_geometry() const { return cache->geometry(); }
  int64_t kv_capacity_tokens() const {
    return int64_t(cache->n_pages()) * cache->geometry().page_tokens;
  }

 private:
  explicit Impl(Engine& e) : engine(e) {}
  void loop();
  void drain_inbox();
  void drop_cancelled();
  void admit();
  // Which waiting request admit() takes next (an index into waiting).
  size_t admit_pick() const;
  bool step();
  Status reserve_or_preempt(Seq& s, int64_t n, bool* self_preempted);
  void preempt(size_t running_index);
  // Samples a token from `row` (against the drafted token `draft` drawn
  // from q when q is given: rejection sampling). Touches only s's sampler,
  // so different sequences may sample at once.
  int32_t sample(Seq& s, const float* row, int32_t draft = -1,
                 std::span<const sampling::TokenProb> q = {});
  // Samples every row of the step: each drafting sequence's verify rows
  // (`verifying`) and each plain row (`pending`), the sequences at once
  // over the pool with cfg().pool_sampling and more than one of them; then
  // applies the verified drafts and emits the plain rows, in order.
  void sample_pending();
  // Scratch of describe(), one per pool slot.
  struct LogprobScratch {
    std::vector<float> weights;
    std::vector<sampling::Candidate> cands;
  };
  // The event of token `id` drawn from `row`: with the logprob and top
  // logprobs s's request asked for. Touches only sc, so rows of different
  // sequences may be described at once.
  TokenEvent describe(const Seq& s, const float* row, int32_t id, LogprobScratch& sc) const;
  // Emits a sampled token (an end of generation or the length limit
  // finishes the sequence, whose usage is final then).
  void emit(Seq& s, TokenEvent ev);
  int64_t next_snapshot(const Seq& s) const;
  int64_t image_cut(const Seq& s, int64_t n) const;
  // The TPOT target of a step whose decoding rows have `decode_shape`
  // (seconds, 0 = none); *explore when the cost model cannot size chunks yet.
  double step_target(const std::vector<Seq*>& decoding, const StepShape& decode_shape,
                     bool* explore) const;
  // The most prefill tokens (≤ n_max, from position `from`) that keep the
  // step's predicted cost within `target`.
  int64_t prefill_fit(const StepShape& shape, int64_t from, int64_t n_max, double target) const;
  // Sequences with prompt left to compute, in the order they get the budget.
  std::vector<Seq*> prefill_order();
  // Drafts for the sequences about to decode; returns the tokens they take.
  int64_t propose(const std::vector<Seq*>& decoding, int64_t budget);
  // Cuts each job's k to what the speculation gate finds worth verifying.
  void gate(const std::vector<Seq*>& decoding, std::vector<spec::Job>& jobs,
            const std::vector<Seq*>& job_seq);
  void forget_drafts(const Seq& s);
  // A drafting sequence's verify step: its logits rows (one per drafted
  // token plus the bonus), the state backup and DeltaNet record of a
  // hybrid, and (after draw_verify) the tokens drawn, described.
  struct PendingVerify {
    Seq* s;
    const float* rows;
    int32_t backup;
    const RecurrentRecord* rec;
    std::vector<TokenEvent> evs;
  };
  // Samples v's rows in order while each equals its drafted token, up to
  // and including the first that does not, the bonus row, or a token that
  // ends the request as emit() would. Touches only v.s's sampler and sc.
  void draw_verify(PendingVerify& v, LogprobScratch& sc);
  // Emits what draw_verify drew, counts acceptance, and takes the rejected
  // positions out of the page table (a hybrid's state rebuilt).
  void apply_verify(PendingVerify& v);
  // One forward of batch `b` (logits and the target's hidden rows where
  // not null), on every rank when the engine runs over ranks: the step, the
  // page copies and state changes since the last one go to the followers
  // first. A failure over ranks ends the job (a follower would wait).
  Status forward(Batch& b, float* logits, float* hidden);
  void finish(Seq& s, Finish f, Status err = Status::ok());
  void publish_stats();
  void flush_finished();

  Engine& engine;
  const EngineConfig& cfg() const { return engine.config_; }

  std::unique_ptr<ThreadPool> pool;
  std::optional<kv::KvCache> cache;
  std::unique_ptr<kv::PrefixCache> prefix;
  std::vector<std::shared_ptr<spec::Proposer>> proposers;
  spec::DraftModelProposer* draft_model = nullptr;  // among proposers, when --spec draft
  spec::MtpProposer* mtp = nullptr;                  // among proposers, when --spec mtp
  std::vector<spec::Proposer*> hidden_users;         // proposers that want hidden states
  std::vector<float> hidden_rows;                    // every batch token's hidden state
  // A hybrid's verify steps: each drafting sequence's DeltaNet inputs
  // (record_of[i] indexes records for the step's i-th sequence, -1: none),
  // so a rejected draft's state is rebuilt without a forward.
  std::vector<RecurrentRecord> records;
  std::vector<int> record_of;
  Workspace ws;
  Batch batch;
  std::vector<float> logits;
  std::vector<LogprobScratch> lp_slots;  // pool->size() of them
  // A step's rows that end in a plain sample: which sequence, its logits,
  // and (after sample_pending) the token drawn, described.
  struct PendingSample {
    Seq* s;
    const float* row;
    TokenEvent ev;
  };
  std::vector<PendingSample> pending;
  std::vector<PendingVerify> verifying;

  std::shared_ptr<detail::Waker> waker = std::make_shared<detail::Waker>();
  std::thread thread;
  std::atomic<bool> stopping{false};

  // Shared with client threads.
  std::mutex inbox_mu;
  std::deque<std::shared_ptr<detail::RequestState>> inbox;
  std::unordered_map<uint64_t, std::weak_ptr<detail::RequestState>> live;  // by id, under inbox_mu
  std::atomic<int> queued{0};  // in the inbox or waiting (not yet running)
  // running.size() as of the last publish_stats(), for submit()'s admission
  // check (published before any finished request's client hears of it).
  std::atomic<int> n_running{0};
  std::atomic<uint64_t> next_id{1};
  mutable std::mutex stats_mu;
  EngineStats shared_stats;

  // Loop-thread only.
  std::deque<std::unique_ptr<Seq>> waiting;
  std::vector<std::unique_ptr<Seq>> running;
  uint64_t admit_counter = 0;
  StepCostModel cost;
  // Decode-only steps (no prefill rows), which price drafted tokens for the
  // speculation gate, and the acceptance over every sequence (the prior of
  // a new one). Ready once the steps span 2 rows, or 1 where no step can
  // carry more than one draft (mtp at depth 1): Scheduler::create.
  StepCostModel decode_cost{2};
  // What single-sequence decode and verify steps cost against decode_cost's
  // prediction, per row count and depth (the gate's per-k price).
  spec::MeasuredVerifyCost verify_cost;
  spec::AcceptanceEstimate acceptance_all;
  uint64_t gate_explore_steps = 0;
  spec::PriceRecheck gate_recheck;
  EngineStats st;  // published to shared_stats after each step
  dist::Traffic comm_at_start;  // over ranks: the transport's counts when the engine started
  std::vector<std::pair<std::shared_ptr<detail::RequestState>, Event>> finished;
};

using Scheduler = Engine::Impl;

}  // namespace sustain::engine

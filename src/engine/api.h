// The engine's public API (DESIGN.md §3): the one interface server/, bench/
// and eval/ are written against. An Engine owns the model, the paged KV pool,
// the prefix cache, the thread pool and the scheduler, and runs its step loop
// on its own thread — the only thread that touches model state. Clients
// submit() token-id requests from any thread and read each request's events
// (tokens with timestamps, then one final event) from its Stream.
//
// Scheduling is continuous batching: every step packs one decode token per
// running sequence plus chunks of pending prompts up to `batch_tokens`, so a
// long prompt is prefilled in chunks while the other streams keep decoding.
// Admission is by free KV pages; when pages run out mid-generation the
// youngest running sequence is preempted (its pages freed, its prompt plus
// the tokens it already emitted recomputed later — nothing is emitted twice).
#pragma once

#include <atomic>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/media_prompt.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "spec/proposer.h"
#include "tensor/qtype.h"
#include "tokenizer/tokenizer.h"

namespace sustain::engine {

struct EngineRanks;  // engine/ranks.h

using Clock = std::chrono::steady_clock;

// EngineConfig::tpot_target_ms: the target follows the step's own cost.
constexpr double kTpotAuto = -1;
constexpr double kAutoTpotMultiple = 4.0;
// While a target holds, a prefill chunk is never cut below this many tokens
// (the prompt's progress when the decoding streams alone exceed the target).
constexpr int64_t kMinPrefillChunk = 16;

// The speculation settings an engine takes (spec/proposer.h), for modules
// above the engine that configure one.
using SpecConfig = spec::Config;

struct EngineConfig {
  std::string model_path;
  int n_threads = 0;            // 0 = every core this process may use
  int64_t n_ctx = 4096;         // most tokens (prompt + output) one sequence may hold
  int n_parallel = 1;           // sequences decoding at once
  // KV pool size in tokens over all sequences; 0 = n_ctx × n_parallel.
  int64_t kv_tokens = 0;
  // KV pool size in bytes; when > 0 it overrides kv_tokens (the pool holds
  // floor(budget / page_bytes) pages).
  int64_t kv_budget_bytes = 0;
  QType k_type = QType::F16;
  QType v_type = QType::F16;
  int page_tokens = 32;
  // Store the 32-element block formats (q8_0, q4_0, q4_1, q5_0, q5_1) in the
  // tiled page layout (kv/tiled.h) that attention reads 16 keys per vector.
  bool kv_tiled = true;
  int64_t batch_tokens = 512;   // tokens per step (decode + prefill chunks), llama.cpp's -b
  int64_t ubatch_tokens = 512;  // tokens computed at once (workspace size), llama.cpp's -ub
  bool prefix_cache = true;     // share page-aligned prompt prefixes between requests
  // Sliding-window models: keep the window layers' K/V for the whole
  // context in the main pool (llama.cpp's --swa-full) instead of a pool of
  // their own that holds only the windows.
  bool swa_full = false;
  // Hybrid models: recurrent-state snapshots the prefix cache keeps (one
  // state each; least recently used replaced), taken during prefill every
  // state_snapshot_interval tokens and at the prompt's last page boundary.
  // -1 = 4 × n_parallel. A cached prefix resumes from its deepest snapshot.
  int32_t state_snapshots = -1;  // also the sliding-window snapshots (prefix_snapshots)
  int32_t state_snapshot_interval = 1024;  // tokens, rounded up to whole pages
  // Requests waiting for a sequence slot beyond this are rejected
  // (kUnavailable); one that finds a free slot never is, so 0 admits only
  // what can start at once.
  int max_queue = 256;
  // The latency target the scheduler keeps for running streams (time per
  // output token, ms; docs/engine.md): while sequences decode, each step's
  // prefill chunk is cut to what a cost model of the step (step_cost.h,
  // learned online) says fits in the target. 0 = off (prefill takes the
  // whole batch_tokens budget); kTpotAuto = kAutoTpotMultiple × the predicted
  // cost of the step without prefill. A request may tighten it
  // (Request::tpot_target_ms). The deterministic mode ignores it.
  double tpot_target_ms = -1;
  // Prefill order: shortest remaining prompt first, except that a prompt
  // admitted this many seconds ago or more goes first (oldest first), so a
  // long prompt is never starved by a stream of short ones.
  double prefill_age_bound_s = 5.0;
  // Every sequence runs in a batch of its own composition-independent shape:
  // at temperature 0 a request's output does not depend on what else runs.
  bool deterministic = false;
  // A step's rows that end in a sample (one per decoding stream) are
  // sampled over the thread pool, each stream's sampler on its own row, and
  // emitted in order afterwards; false samples them one after another on
  // the engine thread (`bench --ablate sampling=serial`). The tokens are
  // the same either way.
  bool pool_sampling = true;
  // Every token computed as it would be alone (base/batch_invariant.h): a
  // verify step's rows equal decode steps, a prefill chunk's rows equal
  // decoding them, bit for bit, at the multi-row kernels' cost. Process-wide:
  // set when the engine is created.
  bool batch_invariant = false;
  // --repack: Q4_0 / Q5_0 / Q8_0 weights repacked at load into 16-row tiles
  // (model/repack.h). Process-wide: set when the engine is created, before
  // any model (target, draft) is loaded.
  bool repack = false;
  // Speculative decoding (spec/proposer.h): proposers, draft lengths. Off
  // when spec.types is empty and no extra proposer is given.
  SpecConfig spec;
  // A proposer of the caller's, asked before the configured ones (tests and
  // measurements: an oracle of known continuations). Shared by all sequences.
  std::shared_ptr<spec::Proposer> extra_proposer;
  // One model over the ranks of an mpirun job (engine/ranks.h; null: this
  // process alone). Set on rank 0, whose engine then drives the followers;
  // the caller keeps it alive as long as the engine. Not with speculation,
  // nor for hybrid (recurrent) models yet.
  const EngineRanks* ranks = nullptr;
};

// Snapshots the prefix cache keeps, of a hybrid model's recurrent state or
// of a sliding-window model's window (its pages): state_snapshots, or 4 per
// sequence.
inline int32_t prefix_snapshots(const EngineConfig& c) {
  return c.state_snapshots >= 0 ? c.state_snapshots : 4 * c.n_parallel;
}

// Why a request ended.
enum class Finish {
  kNone,       // still running
  kLength,     // max_tokens emitted, or the sequence reached n_ctx
  kStop,       // an end-of-generation token (not emitted to the client)
  kCancelled,  // cancel() or the Stream was dropped
  kError,      // see Event::error
};
const char* finish_name(Finish f);  // "length", "stop", "cancelled", "error"

struct Request {
  std::vector<int32_t> prompt;     // token ids, non-empty, each < n_vocab
  // A prompt with images (media_prompt.h): `prompt` is then media->ids,
  // whose image positions hold negative keys derived from the image (what
  // prefix reuse matches on), and the image rows are placed at them. Each
  // image must fit one forward chunk (ubatch_tokens).
  std::shared_ptr<const MediaPrompt> media;
  int32_t max_tokens = 128;        // > 0; clipped to what n_ctx leaves
  sampling::SamplerConfig sampling;
  bool ignore_eos = false;         // keep generating past end-of-generation tokens
  int32_t top_logprobs = 0;        // alternatives per token to report (0..kMaxTopLogprobs)
  bool logprobs = false;           // report the chosen token's logprob
  bool speculative = true;         // may use the engine's proposers (when it has any)
  // > 0: this request's own TPOT target (ms); it can only tighten the
  // engine's (EngineConfig::tpot_target_ms).
  double tpot_target_ms = 0;
  // For measurement only (`bench --fill random`; the server never sets it):
  // the K/V of every prompt token but the last are random values written
  // straight into the sequence's pages (kv/random_fill.h) instead of
  // computed, so decode at a depth is timed without its prefill (a 32K
  // prefill of a 1B model takes many minutes on 2 cores). Attention's cost
  // does not depend on the values it reads; what such a request generates
  // means nothing. Its pages never enter the prefix cache. Refused over
  // ranks, with sliding-window layers, with images, and with the draft and
  // MTP proposers (their own KV would need the prefill skipped here).
  bool synthetic_prefix = false;
};
constexpr int32_t kMaxTopLogprobs = 20;
constexpr int kMaxParallel = 256;

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // ln p under the model's distribution (softmax of the raw logits)
};

// One generated token, as the client sees it.
struct TokenEvent {
  int32_t id = 0;
  Clock::time_point t;                // when the engine emitted it
  uint64_t step = 0;                  // the engine step that emitted it (EngineStats::steps
                                      // then): the tokens of one verified draft share it
  float logprob = 0.0f;               // if Request::logprobs
  std::vector<TokenLogprob> top;      // if Request::top_logprobs > 0
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;   // prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;      // tokens emitted to the client
  int32_t preemptions = 0;            // times this request was preempted and recomputed
  int32_t kv_pages = 0;               // KV pages its sequence held at the end (shared ones too)
  // Speculative decoding: tokens drafted and accepted, verify steps.
  int64_t spec_drafted = 0, spec_accepted = 0, spec_steps = 0;
};

struct Event {
  std::vector<TokenEvent> tokens;  // zero or more tokens, in order
  bool done = false;               // the last event of the request
  Finish finish = Finish::kNone;   // set when done
  Status error;                    // set when finish == kError
  Usage usage;                     // final counts, when done
  // Timestamps (set when done): submit, first scheduled, first token, end.
  Clock::time_point t_submit, t_start, t_first_token, t_end;
};

namespace detail {
struct RequestState;
}

// A request's token stream. Thread-safe; read it from one thread. Dropping
// the Stream (or calling Engine::cancel) cancels the request.
class Stream {
 public:
  explicit Stream(std::shared_ptr<detail::RequestState> s) : s_(std::move(s)) {}
  ~Stream();
  Stream(Stream&&) = default;
  Stream& operator=(Stream&&) = default;

  // Blocks until something happened (tokens, or the end) or `timeout`
  // passed; returns std::nullopt on timeout. After the done event, every call
  // returns an empty done event again.
  std::optional<Event> next(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  // Reads to the end: every token and the final event merged into one.
  Event wait();
  uint64_t id() const;

 private:
  std::shared_ptr<detail::RequestState> s_;
};

struct Histogram {
  std::vector<double> bounds;       // upper bounds (seconds), ascending; +Inf implied
  std::vector<uint64_t> counts;     // per bucket (bounds.size() + 1), not cumulative
  double sum = 0.0;
  uint64_t count = 0;
};

struct EngineStats {
  int running = 0, waiting = 0;
  // used: held by requests; cached: held only by the prefix cache (free to
  // evict); the rest are free.
  int32_t kv_pages_total = 0, kv_pages_used = 0, kv_pages_cached = 0;
  // Sliding-window models: the window layers' own pool (0 otherwise); in
  // use counts pages running sequences and prefix snapshots hold.
  int32_t kv_window_pages_total = 0, kv_window_pages_used = 0;
  int page_tokens = 0;
  uint64_t requests_submitted = 0, requests_finished = 0, requests_rejected = 0, requests_cancelled = 0;
  uint64_t prompt_tokens = 0;         // prompt tokens admitted
  uint64_t prompt_tokens_computed = 0;  // of those, computed (the rest came from the prefix cache)
  uint64_t prefix_cache_hits = 0;     // requests that reused at least one cached page
  uint64_t state_snapshots_saved = 0;  // hybrid models: recurrent states saved for reuse
  uint64_t spec_draft_tokens = 0;      // speculative decoding: tokens drafted and verified
  uint64_t spec_accepted_tokens = 0;   // of those, accepted
  uint64_t spec_steps = 0;             // verify steps (decode steps that carried a draft)
  // By draft position r (0 = the first drafted token): drafts that reached
  // position r, and of those, accepted.
  std::array<uint64_t, 16> spec_drafted_at{}, spec_accepted_at{};
  // The speculation gate (spec::Config::gate): sequence-steps it kept from
  // drafting because a draft would not pay, the one-token probes it let
  // through meanwhile, and the steps it ran without the drafts it chose, to
  // measure again what a step without drafts costs (spec::PriceRecheck).
  uint64_t spec_gate_skipped = 0, spec_gate_probes = 0, spec_gate_rechecks = 0;
  // Draft tokens drafted on the steps that teach the gate its price (until
  // it has seen decode steps of two sizes; each sequence's length from its
  // acceptance estimate, spec::exploration_draft_length).
  uint64_t spec_gate_learning_tokens = 0;
  // The draft model's own KV (spec draft, mtp): pages held now, bytes
  // allocated. mtp: pages only its prefix cache holds, and the entries
  // sequences took from that cache (positions after a prefix the target's
  // cache served, which the block would otherwise compute blind).
  int32_t draft_kv_pages_used = 0;
  int64_t draft_kv_bytes = 0;
  int32_t draft_kv_pages_cached = 0;
  uint64_t draft_prefix_tokens_reused = 0;
  uint64_t generated_tokens = 0;      // tokens emitted to clients
  // Tokens sampled over the thread pool, several streams' at once
  // (EngineConfig::pool_sampling); the rest one after another.
  uint64_t pool_sampled_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  // The TPOT target (EngineConfig::tpot_target_ms): steps that ran under one
  // (sequences decoding beside a target), the target of the last such step,
  // and the steps that took longer than their target, by why: the decoding
  // streams alone were predicted over it (decode_alone), the minimum prefill
  // chunk put it over (min_chunk), or the cost model predicted the step
  // within it and the step still ran long (estimate: noise, a model still
  // learning). Prefill tokens held back by the target, summed over steps.
  uint64_t target_steps = 0;
  double target_s = 0;
  uint64_t target_missed_decode_alone = 0, target_missed_min_chunk = 0,
           target_missed_estimate = 0;
  uint64_t prefill_tokens_deferred = 0;
  // The step cost model (step_cost.h): seconds per step, per row and per
  // attended (query, key) pair; the last step's wall time and prediction.
  double cost_per_step_s = 0, cost_per_row_s = 0, cost_per_attended_s = 0;
  double last_step_s = 0, last_step_predicted_s = 0;
  // Over ranks (EngineConfig::ranks): how many, the split, and what rank
  // 0's transport did since the engine started — payload bytes sent or
  // received, calls, and seconds inside them (waiting for the other ranks
  // included). 0 / false for one process.
  int split_ranks = 0;
  bool split_tensor = false;
  uint64_t comm_calls = 0, comm_bytes = 0;
  double comm_seconds = 0;
  Histogram ttft, tpot, e2e;          // seconds
  Histogram step;                     // wall time of each step that decoded (seconds)
};

class Engine {
 public:
  // Loads the model and tokenizer, allocates the KV pool and starts the loop.
  // Errors name the file or the setting (e.g. a KV pool that does not fit:
  // the bytes needed and the largest context that would fit).
  static Expected<std::unique_ptr<Engine>> create(const EngineConfig& config);
  ~Engine();  // stops the loop; pending requests end with kCancelled

  // Validates and queues a request. Errors: kInvalidArgument naming the
  // field (empty prompt, token id out of range, prompt + 1 > n_ctx with both
  // numbers, sampler values); kUnavailable when the queue is full.
  Expected<Stream> submit(Request r);
  // Cancels a request by id; its pages are freed within one engine step.
  void cancel(uint64_t id);

  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  const Model& model() const { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  int64_t kv_bytes() const;            // bytes of the KV pool, as allocated
  const kv::KvGeometry& kv_geometry() const;  // the pool's, as allocated (--swa-full applied)
  int64_t kv_capacity_tokens() const;  // pages × page_tokens

 public:
  struct Impl;  // the step loop, private to engine/ (scheduler.h)

 private:
  explicit Engine(const EngineConfig& c);
  EngineConfig config_;
  std::unique_ptr<Model> model_;
  // --spec mtp over a tensor split, rank 0: the whole model, whose MTP
  // block drafts from the whole hidden state rank 0 holds after each
  // all-reduce (model_ is rank 0's cut). Views into the same file: the
  // block's and the head's pages are all it adds.
  std::unique_ptr<Model> mtp_model_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sustain::engine

#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "dist/comm.h"
#include "engine/ranks.h"
#include "engine/relay.h"

namespace sustain::engine {
namespace {

using detail::RequestState;

// Prometheus-style buckets (seconds) for TTFT, TPOT and E2E.
Histogram make_histogram(std::vector<double> bounds) {
  Histogram h;
  h.bounds = std::move(bounds);
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

void observe(Histogram& h, double v) {
  size_t i = 0;
  while (i < h.bounds.size() && v > h.bounds[i]) ++i;
  ++h.counts[i];
  h.sum += v;
  ++h.count;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// While the step cost model is still learning, prefill chunks beside
// decoding streams are at most this long (and teach it what tokens cost).
constexpr int64_t kExploreChunk = 64;
// Steps are planned to this share of the target: the cost model predicts a
// step's mean, and a step longer than the target is what a stream sees.
constexpr double kTargetMargin = 0.9;

// --spec draft: the second GGUF, checked against the target's vocabulary,
// with a KV pool that mirrors the target's (its pool tokens plus one
// draft's worth per sequence), so it never runs out where the target does not.
Expected<std::unique_ptr<spec::DraftModelProposer>> load_draft_model(Engine& e,
                                                                     const kv::KvGeometry& g,
                                                                     int64_t pool_tokens,
                                                                     ThreadPool& pool) {
  const EngineConfig& c = e.config();
  const std::string& path = c.spec.draft_model;
  auto m = Model::load(path);
  if (!m) return error(m.status().code(), "--draft-model {}: {}", path, m.status().message());
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file());
  if (!tok) return error(tok.status().code(), "--draft-model {}: {}", path, tok.status().message());
  const tokenizer::Tokenizer& target = e.tokenizer();
  const int64_t nt = e.model().config().n_vocab, nd = (*m)->config().n_vocab;
  if (nt != nd || target.n_vocab() != tok->n_vocab())
    return error(Code::kInvalidArgument,
                 "--draft-model {}: its vocabulary has {} tokens ({} embedding rows), the "
                 "target's {} ({}); speculative decoding needs the same vocabulary",
                 path, tok->n_vocab(), nd, target.n_vocab(), nt);
  for (int32_t i = 0; i < target.n_vocab(); ++i)
    if (target.token_to_piece(i) != tok->token_to_piece(i))
      return error(Code::kInvalidArgument,
                   "--draft-model {}: its vocabulary differs from the target's at token id {} "
                   "('{}' vs the target's '{}'); speculative decoding needs the same vocabulary",
                   path, i, tok->token_to_piece(i), target.token_to_piece(i));
  spec::DraftModelOptions o;
  o.k_type = c.spec.draft_k_type;
  o.v_type = c.spec.draft_v_type;
  o.page_tokens = g.page_tokens;
  o.pool_tokens = pool_tokens + int64_t{c.n_parallel} * (c.spec.draft_max + g.page_tokens);
  o.n_seqs = c.n_parallel;
  o.ubatch_tokens = std::min(c.batch_tokens, c.ubatch_tokens);
  o.p_min = c.spec.draft_p_min;
  o.pool_sampling = c.pool_sampling;
  auto d = spec::DraftModelProposer::create(std::move(*m), o, pool);
  if (!d) return error(d.status().code(), "--draft-model {}: {}", path, d.status().message());
  return d;
}

}  // namespace

Expected<std::unique_ptr<Scheduler>> Scheduler::create(Engine& e, const kv::KvGeometry& g,
                                                       int64_t pool_tokens) {
  std::unique_ptr<Scheduler> s(new Scheduler(e));
  const EngineConfig& c = e.config_;
  SUSTAIN_ASSIGN_OR_RETURN(auto cache, kv::KvCache::create(g, pool_tokens));
  s->cache.emplace(std::move(cache));
  // Over ranks the followers mirror this cache's copies (relay.h).
  if (c.ranks != nullptr) {
    s->cache->log_copies(true);
    s->comm_at_start = c.ranks->comm->traffic();
  }
  if (c.prefix_cache) {
    // Hybrid models resume a cached prefix from a recurrent-state snapshot.
    s->prefix = std::make_unique<kv::PrefixCache>(*s->cache, prefix_snapshots(c));
  }
  s->pool = std::make_unique<ThreadPool>(c.n_threads > 0 ? c.n_threads
                                                         : ThreadPool::hardware_threads());
  s->ws = e.model_->make_workspace(std::min(c.batch_tokens, c.ubatch_tokens), s->pool->size());
  s->lp_slots.resize(static_cast<size_t>(s->pool->size()));
  // The gate learns a draft's price from decode steps of different sizes;
  // where a step drafts one token at most (the MTP block alone, one token
  // a step) they differ by one row, and waiting for two would keep the
  // gate exploring — drafting every other step — forever.
  const bool mtp_only = c.spec.types.size() == 1 && c.spec.uses("mtp") && !c.extra_proposer;
  const int64_t most_drafted =
      mtp_only ? std::min(c.spec.draft_max, c.spec.mtp_depth) : int64_t{c.spec.draft_max};
  s->decode_cost = StepCostModel(std::clamp<int64_t>(most_drafted, 1, 2));
  if (c.extra_proposer) s->proposers.push_back(c.extra_proposer);
  for (const std::string& t : c.spec.types) {
    if (t == "draft") {
      SUSTAIN_ASSIGN_OR_RETURN(auto d, load_draft_model(e, g, pool_tokens, *s->pool));
      s->draft_model = d.get();
      s->proposers.push_back(std::move(d));
      continue;
    }
    if (t == "mtp") {
      // The target's own MTP block, its KV mirroring the target's pool.
      spec::MtpOptions o;
      o.k_type = c.spec.draft_k_type;
      o.v_type = c.spec.draft_v_type;
      o.page_tokens = g.page_tokens;
      o.pool_tokens = pool_tokens + int64_t{c.n_parallel} * g.page_tokens;
      o.ubatch_tokens = std::min(c.batch_tokens, c.ubatch_tokens);
      o.p_min = c.spec.draft_p_min;
      o.depth = c.spec.mtp_depth;
      o.prefix_cache = c.prefix_cache;
      o.pool_sampling = c.pool_sampling;
      // Over a tensor split, the whole model beside rank 0's cut (api.h).
      const Model& whole = e.mtp_model_ ? *e.mtp_model_ : *e.model_;
      SUSTAIN_ASSIGN_OR_RETURN(auto m, spec::MtpProposer::create(whole, o, *s->pool));
      s->mtp = m.get();
      s->proposers.push_back(std::move(m));
      continue;
    }
    spec::Config one = c.spec;
    one.types = {t};
    one.draft_model.clear();
    SUSTAIN_ASSIGN_OR_RETURN(auto made, spec::make_proposers(one, e.model_->config().n_vocab));
    for (auto& p : made) s->proposers.push_back(std::move(p));
  }
  for (auto& p : s->proposers)
    if (p->wants_hidden()) s->hidden_users.push_back(p.get());
  if (!s->hidden_users.empty())
    s->hidden_rows.resize(static_cast<size_t>(c.batch_tokens) * e.model_->config().n_embd);
  // A verify step wants logits for the last token and every draft.
  const int rows_per_seq = 1 + (s->proposers.empty() ? 0 : c.spec.draft_max);
  s->logits.resize(static_cast<size_t>(c.n_parallel) * rows_per_seq * e.model_->config().n_vocab);
  s->st.ttft = make_histogram({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300});
  s->st.tpot = make_histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  s->st.e2e = make_histogram({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600});
  s->st.step = make_histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  s->st.kv_pages_total = s->cache->n_pages();
  s->st.kv_window_pages_total = s->cache->n_window_pages();
  s->st.page_tokens = g.page_tokens;
  s->shared_stats = s->st;
  return s;
}

Scheduler::~Impl() { shutdown(); }

void Scheduler::start() { thread = std::thread([this] { loop(); }); }

void Scheduler::shutdown() {
  if (!thread.joinable()) return;
  stopping.store(true);
  waker->notify();
  thread.join();
  if (const EngineRanks* r = cfg().ranks; r != nullptr) {
    if (Status st = relay::close_followers(*r); !st) {
      std::fprintf(stderr, "sustain: error: engine over ranks: %s\n", st.message().c_str());
      r->comm->abort(1);
    }
  }
}

Expected<Stream> Scheduler::submit(Request r) {
  auto s = std::make_shared<RequestState>();
  s->id = next_id.fetch_add(1);
  s->req = std::move(r);
  s->t_submit = Clock::now();
  s->waker = waker;
  {
    std::lock_guard<std::mutex> l(inbox_mu);
    // The queue bounds requests that wait for a sequence slot: those that
    // the free slots will take at once do not count, so --max-queue 0
    // admits exactly what can start now.
    const int free_slots = std::max(0, cfg().n_parallel - n_running.load());
    if (queued.load() >= cfg().max_queue + free_slots) {
      std::lock_guard<std::mutex> ls(stats_mu);
      ++shared_stats.requests_rejected;
      return error(Code::kUnavailable,
                   "engine: the queue is full ({} requests waiting for the {} sequence slots, "
                   "--max-queue {})",
                   queued.load(), cfg().n_parallel, cfg().max_queue);
    }
    queued.fetch_add(1);
    inbox.push_back(s);
    live[s->id] = s;
  }
  waker->notify();
  return Stream(std::move(s));
}

void Scheduler::cancel(uint64_t id) {
  std::shared_ptr<RequestState> s;
  {
    std::lock_guard<std::mutex> l(inbox_mu);
    auto it = live.find(id);
    if (it != live.end()) s = it->second.lock();
  }
  if (s) {
    s->cancelled.store(true);
    waker->notify();
  }
}

EngineStats Scheduler::stats() const {
  std::lock_guard<std::mutex> l(stats_mu);
  return shared_stats;
}

void Scheduler::publish_stats() {
  st.running = static_cast<int>(running.size());
  n_running.store(st.running);
  st.waiting = queued.load();
  st.kv_pages_cached = prefix ? prefix->evictable() : 0;
  st.kv_pages_used = cache->n_pages() - cache->n_free_pages() - st.kv_pages_cached;
  st.kv_window_pages_used = cache->n_window_pages() - cache->n_free_window_pages();
  if (draft_model) {
    st.draft_kv_pages_used = draft_model->pages_in_use();
    st.draft_kv_bytes = draft_model->kv_bytes();
  }
  if (mtp) {
    st.draft_kv_pages_used = mtp->pages_in_use();
    st.draft_kv_bytes = mtp->kv_bytes();
    st.draft_kv_pages_cached = mtp->pages_cached();
    st.draft_prefix_tokens_reused = mtp->prefix_tokens_reused();
  }
  if (const EngineRanks* r = cfg().ranks; r != nullptr) {
    const dist::Traffic& t = r->comm->traffic();
    st.split_ranks = r->comm->size();
    st.split_tensor = r->tensor();
    st.comm_calls = t.calls - comm_at_start.calls;
    st.comm_bytes = t.bytes - comm_at_start.bytes;
    st.comm_seconds = t.seconds - comm_at_start.seconds;
  }
  std::lock_guard<std::mutex> l(stats_mu);
  const uint64_t rejected = shared_stats.requests_rejected;
  const uint64_t submitted = shared_stats.requests_submitted;
  shared_stats = st;
  shared_stats.requests_rejected = rejected;
  shared_stats.requests_submitted = submitted;
}

void Scheduler::finish(Seq& s, Finish f, Status err) {
  if (prefix && f != Finish::kError && !s.st->req.synthetic_prefix)
    prefix->insert(s.table, s.tokens, s.n_computed);
  // What proposers learn across requests: only whole answers, and only from
  // requests that may speculate (an opted-out request stays invisible).
  if ((f == Finish::kStop || f == Finish::kLength) && s.st->req.speculative &&
      s.st->req.media == nullptr)
    for (auto& p : proposers) p->completed(s.tokens, s.st->req.sampling);
  const auto pages_held = static_cast<int32_t>(s.table.pages.size());
  cache->release(s.table);
  forget_drafts(s);
  Event e;
  e.usage.kv_pages = pages_held;
  e.done = true;
  e.finish = f;
  e.error = std::move(err);
  e.usage.prompt_tokens = s.n_prompt;
  e.usage.cached_prompt_tokens = s.cached_prompt;
  e.usage.completion_tokens = s.n_generated;
  e.usage.preemptions = s.preemptions;
  e.usage.spec_drafted = s.spec_drafted;
  e.usage.spec_accepted = s.spec_accepted;
  e.usage.spec_steps = s.spec_steps;
  e.t_submit = s.st->t_submit;
  e.t_start = s.admitted_once ? s.t_start : s.st->t_submit;
  e.t_end = Clock::now();
  e.t_first_token = s.n_generated > 0 ? s.t_first_token : e.t_end;
  ++st.requests_finished;
  if (f == Finish::kCancelled) ++st.requests_cancelled;
  if (s.n_generated > 0) {
    const double ttft = seconds(e.t_first_token - e.t_submit);
    const double e2e = seconds(e.t_end - e.t_submit);
    observe(st.ttft, ttft);
    observe(st.e2e, e2e);
    if (s.n_generated > 1) observe(st.tpot, (e2e - ttft) / (s.n_generated - 1));
  }
  {
    std::lock_guard<std::mutex> l(inbox_mu);
    live.erase(s.st->id);
  }
  // Delivered after the stats are published (flush_finished), so a client
  // that sees its request end also sees it gone from the counters.
  s.done = true;
  finished.emplace_back(s.st, std::move(e));
}

void Scheduler::flush_finished() {
  for (auto& [state, event] : finished) state->finish(std::move(event));
  finished.clear();
}

Status Scheduler::forward(Batch& b, float* logits, float* hidden) {
  const EngineRanks* r = cfg().ranks;
  if (r == nullptr) return engine.model_->forward(b, *cache, ws, *pool, logits, nullptr, hidden);
  // Over ranks: every rank runs the step, and a rank 0 that fails inside
  // it would leave the others waiting for its hand-off or all-reduce, so
  // any failure ends the job (the server answers nothing more). Hidden
  // rows (--spec mtp) are rank 0's own under a tensor split (its residual
  // stream is whole after each all-reduce) and the last rank's under a
  // layer split, which sends them after the logits.
  const bool layer = !r->tensor();
  Status st = relay::send_step(*r, b, cache->take_copies(), cache->take_state_ops(),
                               engine.model_->config().n_embd, layer && hidden != nullptr);
  if (st)
    st = engine.model_->forward(b, *cache, ws, *pool, logits, nullptr, layer ? nullptr : hidden,
                                r->stage);
  if (st && logits != nullptr)
    st = relay::recv_logits(*r, logits, b.n_logits() * engine.model_->config().n_vocab);
  if (st && layer && hidden != nullptr)
    st = relay::recv_hidden(*r, hidden,
                            static_cast<int64_t>(b.tokens.size()) * engine.model_->config().n_embd);
  if (!st) {
    std::fprintf(stderr, "sustain: error: engine over ranks: %s\n", st.message().c_str());
    r->comm->abort(1);
  }
  return st;
}

void Scheduler::sample_pending() {
  // Verify chains first: they are the longer items (up to k + 1 rows).
  const size_t nv = verifying.size(), n = nv + pending.size();
  auto draw = [&](size_t i, LogprobScratch& sc) {
    if (i < nv) return draw_verify(verifying[i], sc);
    PendingSample& p = pending[i - nv];
    p.ev = describe(*p.s, p.row, sample(*p.s, p.row), sc);
  };
  if (n > 1 && cfg().pool_sampling && pool->size() > 1) {
    // Each sequence's sampler is its own (RNG, history, scratch, grammar
    // state; a grammar's shared masks lock), so sequences sample
    // independently; a sequence's verify rows stay in order on one thread.
    // With eight streams drawing from 49,152 logits at a temperature this
    // was 0.4-1 ms of serial work between steps on the engine thread, and
    // a verify row at a temperature costs about as much as a plain one.
    pool->parallel_for_dynamic(n, 1, [&](size_t b, size_t e, int slot) {
      for (size_t i = b; i < e; ++i) draw(i, lp_slots[static_cast<size_t>(slot)]);
    });
    st.pool_sampled_tokens += pending.size();
    for (const PendingVerify& v : verifying) st.pool_sampled_tokens += v.evs.size();
  } else {
    for (size_t i = 0; i < n; ++i) draw(i, lp_slots[0]);
  }
  for (PendingVerify& v : verifying) apply_verify(v);
  for (PendingSample& p : pending) emit(*p.s, std::move(p.ev));
  verifying.clear();
  pending.clear();
}

int32_t Scheduler::sample(Seq& s, const float* row, int32_t draft,
                          std::span<const sampling::TokenProb> q) {
  const auto n_vocab = static_cast<int32_t>(engine.model_->config().n_vocab);
  return draft >= 0 ? s.sampler->sample_speculative(row, n_vocab, draft, q)
                    : s.sampler->sample(row, n_vocab);
}

TokenEvent Scheduler::describe(const Seq& s, const float* row, int32_t id,
                               LogprobScratch& sc) const {
  TokenEvent ev;
  ev.id = id;
  const Request& req = s.st->req;
  if (!req.logprobs && req.top_logprobs <= 0) return ev;
  // Against the raw logits' log-softmax: a vector pass for the
  // denominator, and the best top_logprobs straight from the logits (one
  // vector compare per 16 that none beats). Scalar, with a partial sort of
  // every id, this was 0.24-0.39 ms a token of 49,152 logits, and serial
  // (bench_sampling logprobs/scalar/).
  const auto n_vocab = static_cast<int32_t>(engine.model_->config().n_vocab);
  sc.weights.resize(static_cast<size_t>(n_vocab));
  const auto lse = static_cast<float>(sampling::log_sum_exp(row, n_vocab, sc.weights.data()));
  ev.logprob = row[id] - lse;
  if (req.top_logprobs > 0) {
    const int32_t k = std::min(req.top_logprobs, n_vocab);
    sc.cands.resize(static_cast<size_t>(n_vocab));
    sampling::Candidates c;
    if (k < n_vocab) {
      sampling::top_k_logits(c, sc.cands.data(), row, n_vocab, k);
    } else {  // a vocabulary no larger than top_logprobs: all of it, ranked
      sampling::fill_candidates(c, sc.cands.data(), row, n_vocab);
      std::sort(c.data, c.data + c.size, sampling::RanksBefore{});
    }
    for (size_t i = 0; i < c.size; ++i) ev.top.push_back({c.data[i].id, c.data[i].logit - lse});
  }
  return ev;
}

void Scheduler::emit(Seq& s, TokenEvent ev) {
  const int32_t id = ev.id;
  const Request& req = s.st->req;
  if (!req.ignore_eos && engine.tok_->is_eog(id)) {
    finish(s, Finish::kStop);
    return;
  }
  s.tokens.push_back(id);
  ++s.n_generated;
  ++st.generated_tokens;
  ev.t = Clock::now();
  ev.step = st.steps;
  if (s.n_generated == 1) s.t_first_token = ev.t;
  s.st->push_token(std::move(ev));
  if (s.n_generated >= s.max_new || static_cast<int64_t>(s.tokens.size()) >= cfg().n_ctx)
    finish(s, Finish::kLength);
}

double Scheduler::step_target(const std::vector<Seq*>& decoding, const StepShape& decode_shape,
                              bool* explore) const {
  *explore = false;
  if (decoding.empty() || cfg().deterministic) return 0;
  double t = 0;
  const double engine_ms = cfg().tpot_target_ms;
  if (engine_ms > 0) {
    t = engine_ms / 1e3;
  } else if (engine_ms == kTpotAuto) {
    if (cost.ready()) {
      t = kAutoTpotMultiple * cost.predict(decode_shape);
    } else {
      *explore = true;
    }
  }
  for (const Seq* s : decoding) {
    const double r = s->st->req.tpot_target_ms / 1e3;
    if (r > 0) t = t > 0 ? std::min(t, r) : r;
  }
  if (t > 0 && !cost.ready()) *explore = true;
  return t;
}

int64_t Scheduler::prefill_fit(const StepShape& shape, int64_t from, int64_t n_max,
                               double target) const {
  auto with = [&](int64_t n) {
    StepShape s = shape;
    s.add_run(from, n);
    return cost.predict(s);
  };
  if (with(n_max) <= target) return n_max;
  int64_t lo = 0, hi = n_max;  // with(lo) fits or lo == 0; with(hi) does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (with(mid) <= target ? lo : hi) = mid;
  }
  return lo;
}

std::vector<Seq*> Scheduler::prefill_order() {
  std::vector<Seq*> out;
  for (auto& s : running)
    if (static_cast<int64_t>(s->tokens.size()) - s->n_computed > 1) out.push_back(s.get());
  if (cfg().deterministic) return out;  // oldest first (running[] is in admission order)
  // Shortest remaining prompt first (the least mean TTFT), except that a
  // sequence admitted prefill_age_bound_s ago or more goes before every
  // younger one, oldest first: no prompt waits forever behind newcomers.
  const auto now = Clock::now();
  const auto bound = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(cfg().prefill_age_bound_s));
  auto aged = [&](const Seq* s) { return now - s->t_start >= bound; };
  std::stable_sort(out.begin(), out.end(), [&](const Seq* a, const Seq* b) {
    const bool aa = aged(a), ab = aged(b);
    if (aa != ab) return aa;
    if (aa) return a->admit_order < b->admit_order;
    const int64_t ra = static_cast<int64_t>(a->tokens.size()) - a->n_computed;
    const int64_t rb = static_cast<int64_t>(b->tokens.size()) - b->n_computed;
    return ra < rb;
  });
  return out;
}

// A prefill chunk of n tokens from s->n_computed, moved so it never cuts an
// image: back to the image's start, or, when the chunk starts inside or at
// the image, on to its end (the image is computed in one piece; submit
// checked it fits a forward chunk).
int64_t Scheduler::image_cut(const Seq& s, int64_t n) const {
  const MediaPrompt* m = s.st->req.media.get();
  if (m == nullptr || n <= 0) return n;
  const int64_t end = s.n_computed + n;
  const MediaPrompt::Image* im = end < m->size() ? m->image_at(end) : nullptr;
  if (im == nullptr || im->begin == end) return n;
  return im->begin > s.n_computed ? im->begin - s.n_computed : im->end - s.n_computed;
}

bool Scheduler::step() {
  const auto t_step = Clock::now();
  // Plan: one decode token per sequence that has only its last token left
  // (plus its draft), then prefill chunks within the token budget, cut to
  // what the latency target leaves while sequences decode.
  const int64_t budget_total = cfg().batch_tokens;
  const int64_t chunk = std::min(cfg().batch_tokens, cfg().ubatch_tokens);
  int64_t budget = budget_total;
  std::vector<Seq*> plan;
  std::sort(running.begin(), running.end(),
            [](const auto& a, const auto& b) { return a->admit_order < b->admit_order; });
  std::vector<Seq*> decoding;
  for (auto& s : running) {
    s->step_tokens = 0;
    s->draft.clear();
    const int64_t tail = static_cast<int64_t>(s->tokens.size()) - s->n_computed;
    if (tail == 1 && static_cast<int64_t>(decoding.size()) < budget) decoding.push_back(s.get());
  }
  budget -= propose(decoding, budget);
  StepShape shape;
  for (Seq* s : decoding) shape.add_run(s->n_computed, s->step_tokens);
  bool explore = false;
  const double target = step_target(decoding, shape, &explore);
  const bool decode_alone_over = target > 0 && !explore && cost.predict(shape) > target;
  bool min_chunk_forced = false, prefill_given = false;
  for (Seq* s : prefill_order()) {
    const int64_t tail = static_cast<int64_t>(s->tokens.size()) - s->n_computed;
    int64_t n;
    if (cfg().deterministic) {
      // Chunk boundaries fixed by position, whatever else runs; after a
      // preemption the generated tokens are recomputed one per step, as they
      // were first computed, so the recomputed K/V are bit-identical.
      n = s->n_computed < s->n_prompt
              ? std::min({tail, chunk - s->n_computed % chunk, s->n_prompt - s->n_computed})
              : 1;
    } else {
      n = std::min(tail, budget);
    }
    // A hybrid's state is saved where the chunk ends at the snapshot point.
    if (s->snapshot_at > s->n_computed) n = std::min(n, s->snapshot_at - s->n_computed);
    n = image_cut(*s, n);
    if (n > 0 && (target > 0 || explore)) {
      // The latency target: as many tokens as the predicted step time
      // allows; the first chunk of the step never below kMinPrefillChunk.
      // While the cost model is still learning, chunks stay small.
      int64_t fit = explore ? std::min(n, kExploreChunk)
                            : prefill_fit(shape, s->n_computed, n, kTargetMargin * target);
      const int64_t floor = prefill_given ? 0 : std::min(n, kMinPrefillChunk);
      if (fit < floor) {
        fit = floor;
        min_chunk_forced = true;
      }
      st.prefill_tokens_deferred += static_cast<uint64_t>(n - fit);
      n = fit;
    }
    n = image_cut(*s, n);
    if (n <= 0) continue;
    s->step_tokens = n;
    shape.add_run(s->n_computed, n);
    prefill_given = true;
    if (!cfg().deterministic) budget -= n;
  }
  // Reserve KV room; running out of pages evicts cached prefixes, then
  // preempts the youngest sequence.
  for (size_t i = 0; i < running.size(); ++i) {
    Seq* s = running[i].get();
    if (s->step_tokens == 0) continue;
    // A draft never costs another sequence its pages: without room it is dropped.
    if (!s->draft.tokens.empty() &&
        cache->pages_needed(s->table, s->step_tokens) > cache->n_free_pages()) {
      s->draft.clear();
      s->step_tokens = 1;
    }
    bool self = false;
    Status r = reserve_or_preempt(*s, s->step_tokens, &self);
    if (!r.is_ok()) {
      finish(*s, Finish::kError, r);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      continue;
    }
    if (self) {
      --i;  // `s` left running[]; the next one moved into slot i
      continue;
    }
  }
  // Sequences preempted above already left running[]; rebuild the plan from
  // what is still there (a preempted victim that had reserved is gone).
  for (size_t i = 0; i < running.size(); ++i)
    if (running[i]->step_tokens > 0) plan.push_back(running[i].get());
  if (plan.empty()) return false;
  // What runs, after drafts dropped and sequences preempted for pages.
  StepShape ran;
  for (Seq* s : plan) ran.add_run(s->n_computed, s->step_tokens);
  const double predicted = cost.predict(ran);
  // A decode or verify step (no prefill): the gate's measured price learns
  // from it, per row count for one sequence alone (at its position before
  // the step) or for the batch (at its sequences' mean position).
  const int64_t single_pos = plan.size() == 1 && !prefill_given ? plan[0]->n_computed : -1;
  int64_t mean_pos = 0;
  for (Seq* s : plan) mean_pos += s->n_computed;
  mean_pos /= static_cast<int64_t>(plan.size());
  const double decode_predicted =
      !prefill_given && decode_cost.ready() ? decode_cost.predict(ran) : 0.0;

  const int64_t n_vocab = engine.model_->config().n_vocab;
  auto run_batch = [&](const std::vector<Seq*>& seqs) -> Status {
    batch.tokens.clear();
    batch.seqs.clear();
    for (Seq* s : seqs) {
      const int32_t si = static_cast<int32_t>(batch.seqs.size());
      batch.seqs.push_back(&s->table);
      const int64_t end = s->n_computed + s->step_tokens;
      const int64_t n_tok = static_cast<int64_t>(s->tokens.size());
      const bool completes = end >= n_tok;
      // Drafts follow the sequence's last token; every one of them and the
      // last token want logits (the verify rows).
      const MediaPrompt* media = s->st->req.media.get();
      for (int64_t p = s->n_computed; p < end; ++p) {
        const bool want = completes && p >= n_tok - 1;
        if (media != nullptr && p < media->size()) {
          batch.tokens.push_back(media->token(p, si, 0, want));
          continue;
        }
        batch.tokens.push_back({p < n_tok ? s->tokens[static_cast<size_t>(p)]
                                          : s->draft.tokens[static_cast<size_t>(p - n_tok)],
                                si, p, want});
      }
    }
    // The sequences save_states set records up for.
    bool any = false;
    for (int r : record_of) any = any || r >= 0;
    ws.record = any ? &records : nullptr;
    Status st = forward(batch, logits.data(), hidden_users.empty() ? nullptr : hidden_rows.data());
    ws.record = nullptr;
    return st;
  };
  // Proposers that draft from the target's hidden states (mtp) see what
  // each sequence still running computed: its verified positions.
  std::vector<int64_t> pos0, len;
  auto mark = [&](const std::vector<Seq*>& seqs) {
    pos0.clear();
    len.clear();
    for (Seq* s : seqs) {
      pos0.push_back(s->n_computed);
      len.push_back(s->step_tokens);
    }
  };
  auto observe_hidden = [&](const std::vector<Seq*>& seqs) {
    if (hidden_users.empty()) return;
    const int64_t d = engine.model_->config().n_embd;
    std::vector<spec::Observed> obs;
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq* s = seqs[i];
      // A request that opted out of speculation never drafts: its hidden
      // states would only cost the MTP block a forward.
      if (!s->done && s->st->req.speculative)
        obs.push_back({s->st->id, s->tokens, pos0[i], s->n_computed - pos0[i],
                       hidden_rows.data() + row * d, s->media_rows});
      row += len[i];
    }
    for (spec::Proposer* p : hidden_users) p->observe(obs);
  };
  // Hybrid models: the recurrent state before each verify step, restored
  // when a draft is rejected (a state cannot be truncated).
  std::vector<int32_t> backups;
  // In one process the verify forward also records each drafting
  // sequence's DeltaNet inputs (over ranks every rank would need its own:
  // the accepted tokens are run again instead).
  const bool record = cfg().ranks == nullptr;
  auto save_states = [&](const std::vector<Seq*>& seqs) {
    backups.assign(seqs.size(), -1);
    record_of.assign(seqs.size(), -1);
    if (!cache->has_state()) return;
    size_t n_rec = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i]->draft.tokens.empty() || seqs[i]->table.state < 0) continue;
      backups[i] = cache->states().alloc();
      if (backups[i] >= 0) {
        cache->states().copy(seqs[i]->table.state, backups[i]);
        if (record) {
          if (records.size() <= n_rec) records.emplace_back();
          RecurrentRecord& rec = records[n_rec];
          rec.slot = seqs[i]->table.state;
          rec.pos0 = seqs[i]->n_computed;
          engine.model_->size_record(rec, static_cast<int64_t>(seqs[i]->draft.tokens.size()) + 1);
          record_of[i] = static_cast<int>(n_rec++);
        }
      } else {
        // No slot (cannot happen with 2 per sequence): verify no draft.
        seqs[i]->step_tokens = 1;
        seqs[i]->draft.clear();
        cache->truncate(seqs[i]->table, seqs[i]->n_computed + 1);
      }
    }
    // Records left from earlier steps record nothing.
    for (size_t j = n_rec; j < records.size(); ++j) records[j].slot = -1;
  };
  auto after = [&](const std::vector<Seq*>& seqs) {
    size_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq* s = seqs[i];
      if (!s->draft.tokens.empty()) {
        const size_t k = s->draft.tokens.size();
        verifying.push_back(
            {s,
             logits.data() + row * static_cast<size_t>(n_vocab),
             backups[i],
             record_of[i] >= 0 ? &records[static_cast<size_t>(record_of[i])] : nullptr,
             {}});
        row += k + 1;
        s->step_tokens = 0;
        continue;
      }
      if (backups[i] >= 0) cache->states().free(backups[i]);
      s->n_computed += s->step_tokens;
      if (s->snapshot_at > 0 && s->n_computed >= s->snapshot_at) {
        // A hybrid's state stands only where the chunk ended (the snapshot
        // point, unless an image carried the chunk past it); a window's
        // pages serve the last page boundary they reach.
        const int64_t pt = cache->geometry().page_tokens;
        const int64_t at = cache->has_state() ? s->n_computed : s->n_computed / pt * pt;
        if (prefix->save_state(s->table, s->tokens, at)) ++st.state_snapshots_saved;
        s->snapshot_at = next_snapshot(*s);
      }
      const bool completes = s->n_computed == static_cast<int64_t>(s->tokens.size());
      s->step_tokens = 0;
      if (completes)
        pending.push_back({s, logits.data() + row++ * static_cast<size_t>(n_vocab), {}});
    }
    sample_pending();
  };
  auto fail = [&](const std::vector<Seq*>& seqs, const Status& err) {
    for (Seq* s : seqs) finish(*s, Finish::kError, err);
  };
  auto release_backups = [&] {
    for (int32_t b : backups)
      if (b >= 0) cache->states().free(b);
    backups.clear();
  };
  if (cfg().deterministic) {
    for (Seq* s : plan) {
      std::vector<Seq*> one{s};
      save_states(one);
      mark(one);
      Status r = run_batch(one);
      if (!r.is_ok()) {
        release_backups();
        fail(one, r);
      } else {
        after(one);
        observe_hidden(one);
      }
    }
  } else {
    save_states(plan);
    mark(plan);
    Status r = run_batch(plan);
    if (!r.is_ok()) {
      release_backups();
      fail(plan, r);
    } else {
      after(plan);
      observe_hidden(plan);
    }
  }
  ++st.steps;
  const double took = seconds(Clock::now() - t_step);
  if (!cfg().deterministic) cost.observe(ran, took);
  // Decode-only steps price drafted tokens for the gate.
  if (!cfg().deterministic && !proposers.empty() && !prefill_given) {
    if (decode_predicted > 0 && single_pos >= 0)
      verify_cost.observe(ran.rows, single_pos, took, decode_predicted, ran.attended);
    else if (decode_predicted > 0)
      verify_cost.observe_batch(static_cast<int64_t>(plan.size()), ran.rows, mean_pos, took,
                                decode_predicted, ran.attended);
    decode_cost.observe(ran, took);
  }
  st.cost_per_step_s = cost.per_step();
  st.cost_per_row_s = cost.per_row();
  st.cost_per_attended_s = cost.per_attended();
  st.last_step_s = took;
  st.last_step_predicted_s = predicted;
  if (!decoding.empty()) observe(st.step, took);
  if (target > 0) {
    ++st.target_steps;
    st.target_s = target;
    if (took > target) {
      if (decode_alone_over) {
        ++st.target_missed_decode_alone;
      } else if (min_chunk_forced) {
        ++st.target_missed_min_chunk;
      } else {
        ++st.target_missed_estimate;
      }
    }
  }
  // Drop the sequences that finished this step.
  running.erase(std::remove_if(running.begin(), running.end(),
                               [](const auto& s) { return s->done; }),
                running.end());
  return true;
}

void Scheduler::loop() {
  while (!stopping.load()) {
    drain_inbox();
    drop_cancelled();
    admit();
    publish_stats();
    flush_finished();
    if (running.empty() || !step()) {
      std::unique_lock<std::mutex> l(waker->mu);
      waker->cv.wait_for(l, std::chrono::milliseconds(50),
                         [&] { return waker->pending || stopping.load(); });
      waker->pending = false;
      continue;
    }
    publish_stats();
    flush_finished();
  }
  // Shutdown: end every request.
  drain_inbox();
  for (auto& s : running) finish(*s, Finish::kCancelled);
  for (auto& s : waiting) finish(*s, Finish::kCancelled);
  running.clear();
  waiting.clear();
  queued.store(0);
  publish_stats();
  flush_finished();
}

}  // namespace sustain::engine

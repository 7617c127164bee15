// The engine over ranks (ranks.h): what rank 0 sends, and the followers'
// loop. Messages are int64 words broadcast from rank 0 (dist::broadcast_vector):
//
//   open   [1, config..., speculation?, tensor split?, path length, path bytes...]
//   step   [2, n_tokens, n_seqs, n_copies, n_embd_rows, n_state_ops,
//           per token: id, seq, pos, logits, n_visible, has_embd,
//           per sequence: n_tokens, state, window_from, n_pages, pages...,
//                         n_window_pages, window_pages...,
//           per copy: from, to, window,
//           per state op: kind, slot, other, pos]
//           then, under a tensor split with image rows, their floats
//   close  [3]        the engine is gone
//   end    [4]        the job is over
//
// After `open` every rank reports whether it loaded the model and how many
// KV tokens its budget holds (agree()), and after making its cache whether
// that worked, so an engine exists on all ranks or on none.
#include "engine/relay.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "base/batch_invariant.h"
#include "base/thread_pool.h"
#include "dist/comm.h"

namespace sustain::engine {
namespace relay {
namespace {

enum Kind : int64_t { kOpen = 1, kStep = 2, kClose = 3, kEnd = 4 };

// One rank's answer in agree(): its status and a number.
struct Vote {
  int64_t code = 0;
  int64_t value = 0;
  char message[240] = {};
};

// Every rank's status and value; the first failure, named by its rank, is
// every rank's result.
Expected<std::vector<int64_t>> agree(dist::Comm& comm, const Status& local, int64_t value) {
  Vote mine;
  mine.code = static_cast<int64_t>(local.code());
  mine.value = value;
  if (!local.is_ok()) {
    const std::string& m = local.message();
    std::memcpy(mine.message, m.data(), std::min(m.size(), sizeof mine.message - 1));
  }
  const auto n = static_cast<size_t>(comm.size());
  std::vector<Vote> all(n);
  SUSTAIN_TRY(comm.all_gather(&mine, all.data(), std::vector<size_t>(n, sizeof(Vote))));
  std::vector<int64_t> values;
  for (size_t r = 0; r < n; ++r) {
    if (all[r].code != static_cast<int64_t>(Code::kOk)) {
      all[r].message[sizeof all[r].message - 1] = 0;
      return error(static_cast<Code>(all[r].code), "rank {}: {}", r, all[r].message);
    }
    values.push_back(all[r].value);
  }
  return values;
}

std::vector<int64_t> encode_config(const EngineConfig& c) {
  std::vector<int64_t> m = {kOpen,
                            c.n_threads,
                            c.n_ctx,
                            c.n_parallel,
                            c.kv_tokens,
                            c.kv_budget_bytes,
                            static_cast<int64_t>(c.k_type),
                            static_cast<int64_t>(c.v_type),
                            c.page_tokens,
                            c.kv_tiled,
                            c.batch_tokens,
                            c.ubatch_tokens,
                            c.prefix_cache,
                            c.swa_full,
                            c.state_snapshots,
                            c.spec.draft_max,
                            c.spec.enabled() || c.extra_proposer,
                            c.ranks != nullptr && c.ranks->tensor(),
                            c.repack,
                            c.batch_invariant,
                            static_cast<int64_t>(c.model_path.size())};
  for (char ch : c.model_path) m.push_back(static_cast<unsigned char>(ch));
  return m;
}

constexpr size_t kConfigWords = 21;

// The config rank 0 sent, and whether its engine runs over the tensor split.
Expected<EngineConfig> decode_config(const std::vector<int64_t>& m, bool* tensor) {
  if (m.size() < kConfigWords || m[0] != kOpen ||
      m.size() != kConfigWords + static_cast<size_t>(std::max<int64_t>(m[20], 0)))
    return error(Code::kInternal, "engine over ranks: an open message of {} words", m.size());
  EngineConfig c;
  c.n_threads = static_cast<int>(m[1]);
  c.n_ctx = m[2];
  c.n_parallel = static_cast<int>(m[3]);
  c.kv_tokens = m[4];
  c.kv_budget_bytes = m[5];
  c.k_type = static_cast<QType>(m[6]);
  c.v_type = static_cast<QType>(m[7]);
  c.page_tokens = static_cast<int>(m[8]);
  c.kv_tiled = m[9] != 0;
  c.batch_tokens = m[10];
  c.ubatch_tokens = m[11];
  c.prefix_cache = m[12] != 0;
  c.swa_full = m[13] != 0;
  c.state_snapshots = static_cast<int32_t>(m[14]);
  c.spec.draft_max = static_cast<int>(m[15]);
  // Rank 0 speculates: the follower's cache needs the same state slots
  // (one more per sequence) and window room; its proposer runs on rank 0.
  // (The type only marks speculation on; the follower builds no proposer.)
  if (m[16] != 0) c.spec.types = {"ngram"};
  *tensor = m[17] != 0;
  // How rank 0 computes: every rank must load and multiply its weights the
  // same way, or the ranks' blocks add up to other floats than one
  // process's (a follower of `serve --repack` kept its weights in rows).
  c.repack = m[18] != 0;
  c.batch_invariant = m[19] != 0;
  for (size_t i = kConfigWords; i < m.size(); ++i) c.model_path.push_back(static_cast<char>(m[i]));
  return c;
}

// A follower's engine: the model's part on this rank and a cache with rank
// 0's page ids.
struct Follower {
  const EngineRanks* ranks = nullptr;  // the layout rank 0 chose for this engine
  std::unique_ptr<Model> model;
  std::optional<kv::KvCache> cache;
  std::unique_ptr<ThreadPool> pool;
  Workspace ws;
  std::optional<kv::StatePool> snaps;  // hybrid models: rank 0's prefix-cache snapshots, mirrored
  std::vector<kv::PageTable> tables;
  Batch batch;
  std::vector<float> logits, embd, hidden;
};

// Reads word i of a step message, failing on a short one.
struct Reader {
  const std::vector<int64_t>& m;
  size_t i = 1;
  bool ok = true;
  int64_t next() {
    if (i >= m.size()) {
      ok = false;
      return 0;
    }
    return m[i++];
  }
};

Status run_step(const EngineRanks& r, Follower& f, const std::vector<int64_t>& m) {
  Reader in{m};
  const int64_t n_tokens = in.next(), n_seqs = in.next(), n_copies = in.next(),
                n_embd_rows = in.next(), n_state_ops = in.next();
  const bool want_hidden = in.next() != 0;
  if (n_tokens < 0 || n_seqs < 0 || n_copies < 0 || n_embd_rows < 0 || n_state_ops < 0 ||
      static_cast<size_t>(n_state_ops) * 4 > m.size() ||
      static_cast<size_t>(n_tokens) * 6 > m.size() || static_cast<size_t>(n_seqs) > m.size() ||
      static_cast<size_t>(n_copies) * 3 > m.size())
    return error(Code::kInternal, "engine over ranks: a step message with bad counts");
  const int64_t d = f.model->config().n_embd;
  if (n_embd_rows > 0 && r.tensor()) {
    SUSTAIN_TRY(dist::broadcast_vector(*r.comm, f.embd, 0));
    if (f.embd.size() != static_cast<size_t>(n_embd_rows * d))
      return error(Code::kInternal, "engine over ranks: {} image floats for {} rows", f.embd.size(),
                   n_embd_rows);
  }
  Batch& b = f.batch;
  b.tokens.resize(static_cast<size_t>(n_tokens));
  int64_t embd_row = 0;
  for (BatchToken& t : b.tokens) {
    t.id = static_cast<int32_t>(in.next());
    t.seq = static_cast<int32_t>(in.next());
    t.pos = in.next();
    t.logits = in.next() != 0;
    t.n_visible = in.next();
    const bool has_embd = in.next() != 0;
    // Only the first stage embeds: a layer split's later ranks receive the
    // residual stream, so only a tensor split needs the rows themselves.
    t.embd = has_embd && r.tensor() ? f.embd.data() + (embd_row++) * d : nullptr;
    if (t.seq < 0 || t.seq >= n_seqs) in.ok = false;
  }
  f.tables.resize(static_cast<size_t>(n_seqs));
  b.seqs.clear();
  auto read_ids = [&](std::vector<int32_t>& ids) {
    const int64_t n = in.next();
    if (n < 0 || static_cast<size_t>(n) > m.size()) {
      in.ok = false;
      return;
    }
    ids.resize(static_cast<size_t>(n));
    for (int32_t& id : ids) id = static_cast<int32_t>(in.next());
  };
  for (kv::PageTable& t : f.tables) {
    t.n_tokens = in.next();
    t.state = static_cast<int32_t>(in.next());
    t.window_from = in.next();
    read_ids(t.pages);
    read_ids(t.window_pages);
    b.seqs.push_back(&t);
  }
  for (int64_t i = 0; i < n_copies && in.ok; ++i) {
    kv::PageCopy c;
    c.from = static_cast<int32_t>(in.next());
    c.to = static_cast<int32_t>(in.next());
    c.window = in.next() != 0;
    SUSTAIN_TRY(f.cache->apply_copy(c));
  }
  for (int64_t i = 0; i < n_state_ops && in.ok; ++i) {
    kv::StateOp op;
    op.kind = static_cast<int32_t>(in.next());
    op.slot = static_cast<int32_t>(in.next());
    op.other = static_cast<int32_t>(in.next());
    op.pos = in.next();
    // A stage without recurrent blocks keeps no state: nothing to mirror.
    if (f.cache->has_state())
      SUSTAIN_TRY(f.cache->states().apply(op, f.snaps ? &*f.snaps : nullptr));
  }
  if (!in.ok || in.i != m.size())
    return error(Code::kInternal, "engine over ranks: a step message of {} words does not parse",
                 m.size());
  // Page ids rank 0 hands out must lie in this rank's pools too.
  for (const kv::PageTable& t : f.tables) {
    for (int32_t p : t.pages)
      if (p < 0 || p >= f.cache->n_pages())
        return error(Code::kInternal, "engine over ranks: page {} outside a pool of {}", p,
                     f.cache->n_pages());
    for (int32_t p : t.window_pages)
      if (p < -1 || p >= f.cache->n_window_pages())
        return error(Code::kInternal, "engine over ranks: window page {} outside a pool of {}", p,
                     f.cache->n_window_pages());
  }
  const int64_t n_logits = b.n_logits();
  const int64_t n_vocab = f.model->config().n_vocab;
  f.logits.resize(static_cast<size_t>(std::max<int64_t>(n_logits, 1) * n_vocab));
  // Layer split: the last rank computed the logits, which rank 0 samples,
  // and, where rank 0's MTP block drafts, every token's hidden state.
  const int last = r.comm->size() - 1;
  const bool send_hidden = want_hidden && !r.tensor() && r.comm->rank() == last;
  if (send_hidden) f.hidden.resize(static_cast<size_t>(std::max<int64_t>(n_tokens, 1) * d));
  SUSTAIN_TRY(f.model->forward(b, *f.cache, f.ws, *f.pool, f.logits.data(), nullptr,
                               send_hidden ? f.hidden.data() : nullptr, r.stage));
  if (!r.tensor() && r.comm->rank() == last && n_logits > 0)
    SUSTAIN_TRY(
        r.comm->send(0, f.logits.data(), static_cast<size_t>(n_logits * n_vocab) * sizeof(float)));
  if (send_hidden && n_tokens > 0)
    SUSTAIN_TRY(
        r.comm->send(0, f.hidden.data(), static_cast<size_t>(n_tokens * d) * sizeof(float)));
  return Status::ok();
}

// Builds a follower's engine for rank 0's config, in step with
// open_followers / confirm_followers on rank 0.
Status open_follower(const EngineRanks& job, const std::vector<int64_t>& m,
                     std::optional<Follower>& out) {
  out.reset();
  auto f = std::make_optional<Follower>();
  bool tensor = false;
  Expected<EngineConfig> c = decode_config(m, &tensor);
  Expected<KvSetup> setup = c.status();
  std::string why;
  f->ranks = job.layout(tensor, &why);
  if (c && f->ranks == nullptr) setup = error(Code::kInvalidArgument, "{}", why);
  if (c && f->ranks != nullptr) {
    // Process-wide, as Engine::create sets them on rank 0.
    set_batch_invariant(c->batch_invariant);
    set_weight_repack(c->repack);
    auto model = Model::load(c->model_path, f->ranks->shard);
    if (model) {
      f->model = std::move(*model);
      setup = kv_setup(*f->model, *c, f->ranks);
    } else {
      setup = model.status();
    }
  }
  const EngineRanks& r = job;
  auto pools = agree(*r.comm, setup.status(), setup ? setup->pool_tokens : 0);
  if (!pools) return Status::ok();  // rank 0 reports it; wait for the next engine
  const int64_t pool_tokens = *std::min_element(pools->begin(), pools->end());
  Status made = Status::ok();
  auto cache = kv::KvCache::create(setup->g, pool_tokens);
  if (cache && cache->has_state() && c->prefix_cache) {
    auto snaps = kv::StatePool::create(cache->states().geometry(), prefix_snapshots(*c));
    if (snaps) {
      f->snaps.emplace(std::move(*snaps));
    } else {
      cache = snaps.status();
    }
  }
  if (cache) {
    f->cache.emplace(std::move(*cache));
    f->pool = std::make_unique<ThreadPool>(c->n_threads > 0 ? c->n_threads
                                                            : ThreadPool::hardware_threads());
    f->ws = f->model->make_workspace(std::min(c->batch_tokens, c->ubatch_tokens), f->pool->size());
  } else {
    made = cache.status();
  }
  if (auto ok = agree(*r.comm, made, 0); !ok) return Status::ok();
  out = std::move(f);
  return Status::ok();
}

}  // namespace

Expected<KvSetup> kv_setup(const Model& m, const EngineConfig& c, const EngineRanks* r) {
  // Hybrid models: one recurrent-state slot per running sequence, and with
  // speculation one more each for the state before a verify step.
  const bool spec_on = c.spec.enabled() || c.extra_proposer;
  const int slots = c.n_parallel * (spec_on ? 2 : 1);
  KvSetup s;
  kv::KvGeometry& g = s.g;
  if (r != nullptr && !r->tensor()) {
    g = m.stage_kv_geometry(*r->stage, c.k_type, c.v_type, c.page_tokens);
    g.state_slots = slots;
    // Layer split: rank 0 hands out every page id, and a stage without
    // window layers has no window pool to hand them from, so the window
    // layers keep the whole context (as --swa-full) on every stage.
    g.window_layers.clear();
    // Rank 0 hands out the recurrent-state slots the same way: it needs a
    // state pool, so its blocks must include a recurrent one.
    if (r->comm->rank() == 0 && g.state.empty() && m.config().n_recurrent_layer() > 0)
      return error(Code::kInvalidArgument,
                   "--split layer: rank 0's blocks [{}, {}) hold no recurrent (DeltaNet) block, "
                   "and rank 0 must keep the recurrent-state slots for every rank; give rank 0 "
                   "a larger share (--ratio)",
                   r->stage->layer_begin, r->stage->layer_end);
  } else {
    g = m.kv_geometry(c.k_type, c.v_type, c.page_tokens, slots);
  }
  g.tiled = c.kv_tiled;
  // Sliding-window layers: each sequence reserves at most a step's tokens
  // at a time (a prefill chunk of -b, an image of up to -ub run whole, or a
  // verify block); the prefix cache keeps its window snapshots beside them
  // (PrefixCache::save_state).
  if (c.swa_full) g.window_layers.clear();
  g.window_seqs = c.n_parallel;
  g.window_step = static_cast<int32_t>(std::min<int64_t>(
      std::max<int64_t>({c.batch_tokens, c.ubatch_tokens, int64_t{c.spec.draft_max} + 1}),
      c.n_ctx));
  g.window_snapshots = c.prefix_cache ? prefix_snapshots(c) : 0;
  int64_t pool_tokens = c.kv_tokens > 0 ? c.kv_tokens : c.n_ctx * c.n_parallel;
  if (c.kv_budget_bytes > 0) {
    const int64_t pages =
        c.kv_budget_bytes / static_cast<int64_t>(std::max<size_t>(g.page_bytes(), 1));
    pool_tokens = pages * g.page_tokens;
    if (pool_tokens < c.n_ctx)
      return error(Code::kOutOfMemory,
                   "--kv-budget {} bytes holds {} tokens of KV ({} bytes per token with K {} and V "
                   "{}, pages of {} tokens), fewer than the context of {} tokens, which needs {} "
                   "bytes; the largest context that fits is {} tokens",
                   c.kv_budget_bytes, pool_tokens, g.bytes_per_token(), qtype_name(c.k_type),
                   qtype_name(c.v_type), g.page_tokens, c.n_ctx, g.pool_bytes(c.n_ctx),
                   pool_tokens);
  } else if (pool_tokens < c.n_ctx) {
    return error(Code::kInvalidArgument,
                 "engine: a KV pool of {} tokens cannot hold one sequence of the context ({} "
                 "tokens)",
                 pool_tokens, c.n_ctx);
  }
  s.pool_tokens = pool_tokens;
  return s;
}

Status open_followers(const EngineRanks& r, const EngineConfig& c, const Expected<KvSetup>& local,
                      int64_t* pool_tokens) {
  std::vector<int64_t> m = encode_config(c);
  SUSTAIN_TRY(dist::broadcast_vector(*r.comm, m, 0));
  SUSTAIN_ASSIGN_OR_RETURN(auto pools,
                           agree(*r.comm, local.status(), local ? local->pool_tokens : 0));
  *pool_tokens = *std::min_element(pools.begin(), pools.end());
  return Status::ok();
}

Status confirm_followers(const EngineRanks& r, const Status& local) {
  return agree(*r.comm, local, 0).status();
}

Status close_followers(const EngineRanks& r) {
  std::vector<int64_t> m = {kClose};
  return dist::broadcast_vector(*r.comm, m, 0);
}

Status send_step(const EngineRanks& r, const Batch& b, const std::vector<kv::PageCopy>& copies,
                 const std::vector<kv::StateOp>& state_ops, int64_t n_embd, bool hidden) {
  std::vector<int64_t> m = {kStep,
                            static_cast<int64_t>(b.tokens.size()),
                            static_cast<int64_t>(b.seqs.size()),
                            static_cast<int64_t>(copies.size()),
                            0,
                            static_cast<int64_t>(state_ops.size()),
                            hidden};
  std::vector<float> embd;
  for (const BatchToken& t : b.tokens) {
    m.insert(m.end(), {t.id, t.seq, t.pos, t.logits, t.n_visible, t.embd != nullptr});
    if (t.embd != nullptr) {
      ++m[4];
      if (r.tensor()) embd.insert(embd.end(), t.embd, t.embd + n_embd);
    }
  }
  for (const kv::PageTable* t : b.seqs) {
    m.insert(m.end(), {t->n_tokens, t->state, t->window_from});
    m.push_back(static_cast<int64_t>(t->pages.size()));
    m.insert(m.end(), t->pages.begin(), t->pages.end());
    m.push_back(static_cast<int64_t>(t->window_pages.size()));
    m.insert(m.end(), t->window_pages.begin(), t->window_pages.end());
  }
  for (const kv::PageCopy& c : copies) m.insert(m.end(), {c.from, c.to, c.window});
  for (const kv::StateOp& op : state_ops) m.insert(m.end(), {op.kind, op.slot, op.other, op.pos});
  SUSTAIN_TRY(dist::broadcast_vector(*r.comm, m, 0));
  if (m[4] > 0 && r.tensor()) SUSTAIN_TRY(dist::broadcast_vector(*r.comm, embd, 0));
  return Status::ok();
}

Status recv_logits(const EngineRanks& r, float* logits, int64_t n) {
  const int last = r.comm->size() - 1;
  if (r.tensor() || last == 0 || n == 0) return Status::ok();
  return r.comm->recv(last, logits, static_cast<size_t>(n) * sizeof(float));
}

Status recv_hidden(const EngineRanks& r, float* hidden, int64_t n) {
  return recv_logits(r, hidden, n);  // the same wire, after the logits
}

}  // namespace relay

Status follow_engines(const EngineRanks& r) {
  std::optional<relay::Follower> f;
  std::vector<int64_t> m;
  while (true) {
    m.clear();
    SUSTAIN_TRY(dist::broadcast_vector(*r.comm, m, 0));
    if (m.empty()) return error(Code::kInternal, "engine over ranks: an empty message");
    switch (m[0]) {
      case relay::kOpen:
        SUSTAIN_TRY(relay::open_follower(r, m, f));
        break;
      case relay::kStep:
        if (!f) return error(Code::kInternal, "engine over ranks: a step without an engine");
        SUSTAIN_TRY(relay::run_step(*f->ranks, *f, m));
        break;
      case relay::kClose:
        f.reset();
        break;
      case relay::kEnd:
        return Status::ok();
      default:
        return error(Code::kInternal, "engine over ranks: a message of kind {}", m[0]);
    }
  }
}

const EngineRanks* EngineRanks::layout(bool tensor_split, std::string* why) const {
  if (tensor_split == tensor()) return this;
  if (other != nullptr && other->tensor() == tensor_split) return other;
  if (why != nullptr)
    *why = other_error.empty() ? fmt::format("the job's ranks are not cut for the {} split",
                                             tensor_split ? "tensor" : "layer")
                               : other_error;
  return nullptr;
}

Status end_followers(const EngineRanks& r) {
  std::vector<int64_t> m = {relay::kEnd};
  return dist::broadcast_vector(*r.comm, m, 0);
}

}  // namespace sustain::engine

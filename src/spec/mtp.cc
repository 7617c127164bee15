#include "spec/mtp.h"

#include <algorithm>

#include "base/fnv1a.h"
#include "spec/draw.h"

namespace sustain::spec {

Expected<std::unique_ptr<MtpProposer>> MtpProposer::create(const Model& target, const MtpOptions& o,
                                                           ThreadPool& pool) {
  const ArchConfig& c = target.config();
  if (c.n_nextn == 0)
    return error(Code::kUnsupported,
                 "--spec mtp: {} has no MTP/NextN block ({}.nextn_predict_layers is 0); use "
                 "--spec ngram or --spec draft",
                 target.file().path(), arch_name(c.arch));
  if (o.pool_tokens <= 0 || o.ubatch_tokens <= 0)
    return error(Code::kInvalidArgument, "mtp: pool and ubatch tokens must be > 0");
  std::unique_ptr<MtpProposer> p(new MtpProposer(target, o, pool));
  const kv::KvGeometry g = target.mtp_kv_geometry(o.k_type, o.v_type, o.page_tokens);
  if (Status v = kv::validate(g); !v.is_ok())
    return error(v.code(), "--spec mtp KV (-ctkd {} / -ctvd {}): {}", qtype_name(o.k_type),
                 qtype_name(o.v_type), v.message());
  auto cache = kv::KvCache::create(g, o.pool_tokens);
  if (!cache) return error(cache.status().code(), "mtp KV: {}", cache.status().message());
  p->cache_.emplace(std::move(*cache));
  if (o.prefix_cache) p->prefix_ = std::make_unique<kv::PrefixCache>(*p->cache_);
  p->ws_ = target.make_workspace(o.ubatch_tokens, pool.size());
  return p;
}

uint64_t MtpProposer::page_key(uint64_t parent, std::span<const int32_t> page) {
  const uint64_t h = fnv1a_ids(page, parent ^ 0x9e3779b97f4a7c15ull);
  return h == 0 ? 1 : h;
}

void MtpProposer::forget(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& s = it->second;
  // Entries computed from real hidden states are what a later prompt with
  // the same prefix would compute: keep their whole pages.
  if (prefix_) prefix_->insert(s.table, s.tokens, s.inexact < 0 ? s.done : s.inexact);
  cache_->release(s.table);
  seqs_.erase(it);
}

void MtpProposer::keep_boundary(SeqState& s, std::span<const int32_t> tokens, int64_t p,
                                const float* h) {
  const int pt = opt_.page_tokens;
  if (!prefix_ || p <= 0 || p % pt != 0 || p > static_cast<int64_t>(tokens.size())) return;
  if (s.chain_end > p) s.chain = 0, s.chain_end = 0;
  for (; s.chain_end < p; s.chain_end += pt)
    s.chain = page_key(s.chain, tokens.subspan(static_cast<size_t>(s.chain_end), pt));
  auto [it, added] = bounds_.try_emplace(s.chain);
  if (!added) return;
  it->second.assign(h, h + model_.config().n_embd);
  bound_order_.push_back(s.chain);
  while (bound_order_.size() > static_cast<size_t>(cache_->n_pages())) {
    bounds_.erase(bound_order_.front());
    bound_order_.pop_front();
  }
}

void MtpProposer::attach_cached(SeqState& s, std::span<const int32_t> tokens, int64_t limit) {
  if (!prefix_) return;
  const int pt = opt_.page_tokens;
  while (limit >= pt) {
    const int64_t m = prefix_->attach(s.table, tokens, limit);
    if (m <= 0) return;
    uint64_t key = 0;
    for (int64_t p = 0; p < m; p += pt)
      key = page_key(key, tokens.subspan(static_cast<size_t>(p), pt));
    if (auto b = bounds_.find(key); b != bounds_.end()) {
      s.done = m;
      s.h_next = b->second;
      s.has_h_next = true;
      s.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(m));
      s.chain = key;
      s.chain_end = m;
      reused_tokens_ += static_cast<uint64_t>(m);
      return;
    }
    // The pages without the state entry m reads: a shorter prefix.
    cache_->release(s.table);
    limit = m - 1;
  }
}

bool MtpProposer::reserve(SeqState& s, int64_t n) {
  if (cache_->reserve(s.table, n).is_ok()) return true;
  if (!prefix_) return false;
  prefix_->evict(static_cast<int32_t>(cache_->pages_needed(s.table, n)));
  return cache_->reserve(s.table, n).is_ok();
}

const float* MtpProposer::next_logits(uint64_t seq, int64_t* pos) {
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) {
    SeqState* s = &it->second;
    ensure_logits(std::span<SeqState* const>(&s, 1));
  }
  const bool has = it != seqs_.end() && it->second.logits_pos >= 0;
  if (pos != nullptr) *pos = has ? it->second.logits_pos : -1;
  return has ? it->second.logits.data() : nullptr;
}

bool MtpProposer::run(const std::vector<std::pair<SeqState*, int64_t>>& last_seqs) {
  const auto d = static_cast<size_t>(model_.config().n_embd);
  x_rows_.resize(std::max<size_t>(1, last_seqs.size()) * d);
  if (!model_.forward_mtp(batch_, h_prev_.data(), *cache_, ws_, pool_, nullptr, x_rows_.data())
           .is_ok())
    return false;
  for (size_t r = 0; r < last_seqs.size(); ++r) {
    SeqState* s = last_seqs[r].first;
    s->x.assign(x_rows_.begin() + static_cast<std::ptrdiff_t>(r * d),
                x_rows_.begin() + static_cast<std::ptrdiff_t>((r + 1) * d));
    s->x_pos = last_seqs[r].second;
  }
  return true;
}

void MtpProposer::ensure_logits(std::span<SeqState* const> seqs) {
  const auto d = static_cast<size_t>(model_.config().n_embd);
  const auto n_vocab = static_cast<size_t>(model_.config().n_vocab);
  std::vector<SeqState*> need;
  for (SeqState* s : seqs)
    if (s->x_pos >= 0 && s->logits_pos != s->x_pos && s->x.size() == d) need.push_back(s);
  if (need.empty()) return;
  x_rows_.resize(need.size() * d);
  for (size_t r = 0; r < need.size(); ++r)
    std::copy(need[r]->x.begin(), need[r]->x.end(),
              x_rows_.begin() + static_cast<std::ptrdiff_t>(r * d));
  logits_.resize(need.size() * n_vocab);
  normed_.resize(need.size() * d);
  if (!model_
           .mtp_head(x_rows_.data(), static_cast<int64_t>(need.size()), ws_, pool_, logits_.data(),
                     normed_.data())
           .is_ok())
    return;  // no logits: no draft
  for (size_t r = 0; r < need.size(); ++r) {
    SeqState* s = need[r];
    s->logits.assign(logits_.begin() + static_cast<std::ptrdiff_t>(r * n_vocab),
                     logits_.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_vocab));
    s->logits_pos = s->x_pos;
    if (opt_.depth > 1)
      s->h_out.assign(normed_.begin() + static_cast<std::ptrdiff_t>(r * d),
                      normed_.begin() + static_cast<std::ptrdiff_t>((r + 1) * d));
  }
}

void MtpProposer::observe(std::span<const Observed> steps) {
  const int64_t d = model_.config().n_embd;
  std::vector<std::pair<SeqState*, int64_t>> last_seqs;
  std::vector<uint64_t> touched;
  bool failed = false;
  auto flush = [&] {
    if (!batch_.tokens.empty() && !run(last_seqs)) failed = true;
    batch_.tokens.clear();
    batch_.seqs.clear();
    h_prev_.clear();
    last_seqs.clear();
  };
  flush();
  for (const Observed& o : steps) {
    if (o.tokens.empty() || o.n < 0 || failed) continue;
    auto [sit, is_new] = seqs_.try_emplace(o.seq);
    SeqState& s = sit->second;
    const int64_t last = static_cast<int64_t>(o.tokens.size()) - 1;  // not computed by the target
    // The target's prefix cache served [0, o.pos): the block's may too.
    if (is_new && o.pos > 0) attach_cached(s, o.tokens, o.pos);
    // Recomputed from an earlier position: later entries rest on other states.
    if (o.pos + 1 < s.done) {
      cache_->truncate(s.table, o.pos + 1);
      s.done = o.pos + 1;
      s.has_h_next = false;
      s.tokens.resize(static_cast<size_t>(s.done));
      if (s.inexact >= s.done) s.inexact = -1;
    }
    s.logits_pos = -1;
    s.x_pos = -1;
    const int64_t done_before = s.done;
    // Entry i needs token i and the hidden state at i − 1: computable up to
    // the last hidden state observed, and up to the last known token.
    const int64_t end = std::min(o.pos + o.n, last);
    auto hidden_at = [&](int64_t p) -> const float* {
      if (p >= o.pos && p < o.pos + o.n) return o.hidden + (p - o.pos) * d;
      return nullptr;
    };
    if (end >= s.done) {
      if (!reserve(s, end + 1 - s.done)) {
        forget(o.seq);  // out of pages: no drafts for it
        continue;
      }
      touched.push_back(o.seq);
      auto si = static_cast<int32_t>(batch_.seqs.size());
      batch_.seqs.push_back(&s.table);
      for (int64_t i = s.done; i <= end; ++i) {
        if (static_cast<int64_t>(batch_.tokens.size()) >= opt_.ubatch_tokens) {
          flush();  // bounded memory for a long catch-up; the rest goes on in a new batch
          si = static_cast<int32_t>(batch_.seqs.size());
          batch_.seqs.push_back(&s.table);
        }
        const float* h = i == 0 ? nullptr : hidden_at(i - 1);
        if (h == nullptr && i == s.done && s.has_h_next) h = s.h_next.data();
        // A position whose hidden state the target never computed (a prefix
        // served from the cache) gets zeros, as position 0 does.
        if (h != nullptr) {
          h_prev_.insert(h_prev_.end(), h, h + d);
          if (s.inexact < 0) keep_boundary(s, o.tokens, i, h);
        } else {
          h_prev_.resize(h_prev_.size() + static_cast<size_t>(d), 0.0f);
          if (i > 0 && s.inexact < 0) s.inexact = i;
        }
        BatchToken t{o.tokens[static_cast<size_t>(i)], si, i, i == last};
        // An image position enters the block as its image row, as it
        // entered the target.
        if (i < static_cast<int64_t>(o.rows.size())) t.embd = o.rows[static_cast<size_t>(i)];
        batch_.tokens.push_back(t);
        if (i == last) last_seqs.emplace_back(&s, i);
      }
      s.done = end + 1;
      s.tokens.insert(s.tokens.end(),
                      o.tokens.begin() + static_cast<std::ptrdiff_t>(s.tokens.size()),
                      o.tokens.begin() + static_cast<std::ptrdiff_t>(s.done));
    }
    // Keep the hidden state the next entry needs (position done − 1).
    if (const float* h = hidden_at(s.done - 1)) {
      s.h_next.assign(h, h + d);
      s.has_h_next = true;
    } else if (s.done != done_before) {
      s.has_h_next = false;
    }
  }
  flush();
  if (failed)
    for (uint64_t id : touched) {
      seqs_[id].inexact = 0;  // entries never written: none of them is kept
      forget(id);
    }
}

void MtpProposer::propose_batch(std::span<Job> jobs) {
  const int64_t n_vocab = model_.config().n_vocab;
  const auto d = static_cast<size_t>(model_.config().n_embd);
  // The head for every sequence that drafts, in one batch.
  std::vector<SeqState*> drafting;
  for (Job& j : jobs) {
    auto it = seqs_.find(j.seq);
    if (it != seqs_.end() && j.k >= 1 && !j.tokens.empty() &&
        it->second.x_pos == static_cast<int64_t>(j.tokens.size()) - 1)
      drafting.push_back(&it->second);
  }
  ensure_logits(drafting);
  // The first token of every job whose head ran, drawn at once.
  std::vector<std::pair<Job*, SeqState*>> first;
  draws_.clear();
  for (Job& j : jobs) {
    auto it = seqs_.find(j.seq);
    if (it == seqs_.end() || j.k < 1 || j.tokens.empty()) continue;
    SeqState& s = it->second;
    if (s.logits_pos != static_cast<int64_t>(j.tokens.size()) - 1) continue;
    if (!s.sampler) s.sampler.emplace(draft_sampling(*j.sampling));
    first.emplace_back(&j, &s);
    draws_.push_back({&*s.sampler, s.logits.data(), j.out});
  }
  draw_tokens(draws_, n_vocab, opt_.p_min, pool_, opt_.pool_sampling, probs_);
  // The jobs whose draft goes on past the first token.
  std::vector<std::pair<Job*, SeqState*>> chain;
  for (size_t i = 0; i < first.size(); ++i) {
    auto [j, s] = first[i];
    if (draws_[i].drafted && std::min(j->k, opt_.depth) > 1 && s->h_out.size() == d)
      chain.push_back(first[i]);
  }
  if (chain.empty()) return;
  // Chained passes: entry i + 1 of each sequence takes its last draft and
  // the block's own output at i; one pass per drafted token, batched over
  // the sequences still drafting. The entries go into the block's KV after
  // its verified ones and leave it at the end.
  std::vector<float> h_next(chain.size() * d);
  for (size_t c = 0; c < chain.size(); ++c)
    std::copy(chain[c].second->h_out.begin(), chain[c].second->h_out.end(),
              h_next.begin() + static_cast<std::ptrdiff_t>(c * d));
  std::vector<size_t> live;
  for (size_t c = 0; c < chain.size(); ++c) live.push_back(c);
  for (int t = 1; !live.empty(); ++t) {
    batch_.tokens.clear();
    batch_.seqs.clear();
    h_prev_.clear();
    std::vector<size_t> ran;
    for (size_t c : live) {
      Job& j = *chain[c].first;
      SeqState& s = *chain[c].second;
      if (static_cast<int64_t>(ran.size()) >= ws_.max_tokens) break;  // the rest stop here
      if (!reserve(s, 1)) continue;  // out of pages: its draft ends
      const int64_t pos = s.done + t - 1;
      batch_.seqs.push_back(&s.table);
      batch_.tokens.push_back(
          {j.out->tokens.back(), static_cast<int32_t>(batch_.seqs.size() - 1), pos, true});
      h_prev_.insert(h_prev_.end(), h_next.begin() + static_cast<std::ptrdiff_t>(c * d),
                     h_next.begin() + static_cast<std::ptrdiff_t>((c + 1) * d));
      ran.push_back(c);
    }
    live.clear();
    if (ran.empty()) break;
    logits_.resize(ran.size() * static_cast<size_t>(n_vocab));
    if (!model_.forward_mtp(batch_, h_prev_.data(), *cache_, ws_, pool_, logits_.data()).is_ok())
      break;  // the drafts made so far stand
    draws_.clear();
    for (size_t r = 0; r < ran.size(); ++r) {
      const size_t c = ran[r];
      std::copy_n(ws_.logits_in.begin() + static_cast<std::ptrdiff_t>(r * d), d,
                  h_next.begin() + static_cast<std::ptrdiff_t>(c * d));
      draws_.push_back({&*chain[c].second->sampler,
                        logits_.data() + r * static_cast<size_t>(n_vocab), chain[c].first->out});
    }
    draw_tokens(draws_, n_vocab, opt_.p_min, pool_, opt_.pool_sampling, probs_);
    for (size_t r = 0; r < ran.size(); ++r) {
      const Job& j = *chain[ran[r]].first;
      if (draws_[r].drafted && static_cast<int>(j.out->tokens.size()) < std::min(j.k, opt_.depth))
        live.push_back(ran[r]);
    }
  }
  // Only verified tokens stay in the block's KV.
  for (auto& [j, s] : chain) cache_->truncate(s->table, s->done);
  batch_.tokens.clear();
  batch_.seqs.clear();
  h_prev_.clear();
}

}  // namespace sustain::spec

#include "spec/mtp.h"

#include <algorithm>

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
  const kv::KvGeometry g = target.mtp_kv_geometry(QType::F16, QType::F16, o.page_tokens);
  SUSTAIN_TRY(kv::validate(g));
  auto cache = kv::KvCache::create(g, o.pool_tokens);
  if (!cache) return error(cache.status().code(), "mtp KV: {}", cache.status().message());
  p->cache_.emplace(std::move(*cache));
  p->ws_ = target.make_workspace(o.ubatch_tokens, pool.size());
  return p;
}

void MtpProposer::forget(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  cache_->release(it->second.table);
  seqs_.erase(it);
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
    SeqState& s = seqs_[o.seq];
    const int64_t last = static_cast<int64_t>(o.tokens.size()) - 1;  // not computed by the target
    // Recomputed from an earlier position: later entries rest on other states.
    if (o.pos + 1 < s.done) {
      cache_->truncate(s.table, o.pos + 1);
      s.done = o.pos + 1;
      s.has_h_next = false;
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
      if (!cache_->reserve(s.table, end + 1 - s.done).is_ok()) {
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
        } else {
          h_prev_.resize(h_prev_.size() + static_cast<size_t>(d), 0.0f);
        }
        BatchToken t{o.tokens[static_cast<size_t>(i)], si, i, i == last};
        // An image position enters the block as its image row, as it
        // entered the target.
        if (i < static_cast<int64_t>(o.rows.size())) t.embd = o.rows[static_cast<size_t>(i)];
        batch_.tokens.push_back(t);
        if (i == last) last_seqs.emplace_back(&s, i);
      }
      s.done = end + 1;
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
    for (uint64_t id : touched) forget(id);
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
  // The jobs whose draft goes on past the first token.
  std::vector<std::pair<Job*, SeqState*>> chain;
  for (Job& j : jobs) {
    auto it = seqs_.find(j.seq);
    if (it == seqs_.end() || j.k < 1 || j.tokens.empty()) continue;
    SeqState& s = it->second;
    if (s.logits_pos != static_cast<int64_t>(j.tokens.size()) - 1) continue;
    if (!s.sampler) s.sampler.emplace(draft_sampling(*j.sampling));
    if (draw_token(*s.sampler, s.logits.data(), n_vocab, opt_.p_min, *j.out, probs_) &&
        std::min(j.k, opt_.depth) > 1 && s.h_out.size() == d)
      chain.emplace_back(&j, &s);
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
      if (!cache_->reserve(s.table, 1).is_ok()) continue;  // out of pages: its draft ends
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
    for (size_t r = 0; r < ran.size(); ++r) {
      const size_t c = ran[r];
      Job& j = *chain[c].first;
      SeqState& s = *chain[c].second;
      std::copy_n(ws_.logits_in.begin() + static_cast<std::ptrdiff_t>(r * d), d,
                  h_next.begin() + static_cast<std::ptrdiff_t>(c * d));
      if (draw_token(*s.sampler, logits_.data() + r * static_cast<size_t>(n_vocab), n_vocab,
                     opt_.p_min, *j.out, probs_) &&
          static_cast<int>(j.out->tokens.size()) < std::min(j.k, opt_.depth))
        live.push_back(c);
    }
  }
  // Only verified tokens stay in the block's KV.
  for (auto& [j, s] : chain) cache_->truncate(s->table, s->done);
  batch_.tokens.clear();
  batch_.seqs.clear();
  h_prev_.clear();
}

}  // namespace sustain::spec

#include "spec/draft_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spec/draw.h"

namespace sustain::spec {

Expected<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(
    std::unique_ptr<Model> model, const DraftModelOptions& o, ThreadPool& pool) {
  if (model->config().is_hybrid())
    return error(Code::kUnsupported,
                 "--draft-model: a {} model keeps a recurrent state that cannot be rolled back "
                 "after a rejected draft; use a transformer draft model",
                 arch_name(model->config().arch));
  if (o.pool_tokens <= 0 || o.ubatch_tokens <= 0)
    return error(Code::kInvalidArgument, "draft model: pool and ubatch tokens must be > 0");
  std::unique_ptr<DraftModelProposer> p(new DraftModelProposer(std::move(model), o, pool));
  kv::KvGeometry g = p->model_->kv_geometry(o.k_type, o.v_type, o.page_tokens, 1);
  // A sequence's first draft reserves its whole text at once: a window
  // pool as large as the main one.
  g.window_seqs = std::max(1, o.n_seqs);
  g.window_step = static_cast<int32_t>(std::min<int64_t>(o.pool_tokens, INT32_MAX / 2));
  SUSTAIN_TRY(kv::validate(g));
  auto cache = kv::KvCache::create(g, o.pool_tokens);
  if (!cache)
    return error(cache.status().code(), "draft model KV (-ctkd {} -ctvd {}): {}",
                 qtype_name(o.k_type), qtype_name(o.v_type), cache.status().message());
  p->cache_.emplace(std::move(*cache));
  p->ws_ = p->model_->make_workspace(o.ubatch_tokens, pool.size());
  return p;
}

void DraftModelProposer::forget(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  cache_->release(it->second.table);
  seqs_.erase(it);
}

void DraftModelProposer::draw_rows(std::span<Job> live, std::span<SeqState*> st,
                                   const std::vector<size_t>& idx, std::vector<char>& keep) {
  const int64_t n_vocab = model_->config().n_vocab;
  draws_.clear();
  for (size_t r = 0; r < idx.size(); ++r)
    draws_.push_back({&*st[idx[r]]->sampler, logits_.data() + r * n_vocab, live[idx[r]].out});
  draw_tokens(draws_, n_vocab, opt_.p_min, pool_, opt_.pool_sampling, probs_);
  keep.resize(idx.size());
  for (size_t r = 0; r < idx.size(); ++r) keep[r] = draws_[r].drafted;
}

bool DraftModelProposer::catch_up(std::span<Job> jobs, std::span<SeqState*> st) {
  batch_.tokens.clear();
  batch_.seqs.clear();
  for (size_t i = 0; i < jobs.size(); ++i) {
    SeqState& s = *st[i];
    const auto seq = static_cast<int32_t>(batch_.seqs.size());
    batch_.seqs.push_back(&s.table);
    const int64_t n = static_cast<int64_t>(jobs[i].tokens.size());
    for (int64_t p = static_cast<int64_t>(s.computed.size()); p < n; ++p)
      batch_.tokens.push_back({jobs[i].tokens[static_cast<size_t>(p)], seq, p, p == n - 1});
  }
  // Larger batches than the workspace run in workspace-sized chunks.
  logits_.resize(jobs.size() * static_cast<size_t>(model_->config().n_vocab));
  if (!model_->forward(batch_, *cache_, ws_, pool_, logits_.data()).is_ok()) return false;
  for (size_t i = 0; i < jobs.size(); ++i)
    st[i]->computed.assign(jobs[i].tokens.begin(), jobs[i].tokens.end());
  return true;
}

std::span<const int32_t> DraftModelProposer::text_view(SeqState& s,
                                                      std::span<const int32_t> tokens) {
  if (tokens.size() < s.seen) {  // not the tokens seen so far: start over
    s.text.clear();
    s.seen = 0;
    s.has_image = false;
  }
  if (!s.has_image) {
    auto it = std::find_if(tokens.begin() + static_cast<std::ptrdiff_t>(s.seen), tokens.end(),
                           [](int32_t t) { return t < 0; });
    if (it == tokens.end()) {
      s.seen = tokens.size();
      return tokens;
    }
    s.has_image = true;
    s.text.assign(tokens.begin(), it);
    s.seen = static_cast<size_t>(it - tokens.begin());
  }
  for (size_t i = s.seen; i < tokens.size(); ++i)
    if (tokens[i] >= 0) s.text.push_back(tokens[i]);
  s.seen = tokens.size();
  return s.text;
}

void DraftModelProposer::propose_batch(std::span<Job> jobs) {
  std::vector<Job> live;
  std::vector<SeqState*> st;
  live.reserve(jobs.size());
  for (Job& j : jobs) {
    if (j.k < 1 || j.tokens.empty()) continue;
    SeqState& s = seqs_[j.seq];
    if (!s.sampler) s.sampler.emplace(draft_sampling(*j.sampling));
    Job v = j;
    v.tokens = text_view(s, j.tokens);
    if (v.tokens.empty()) continue;
    // Keep the longest prefix still valid (a rejected draft is cut off);
    // the last token is always fed again, for its logits.
    const auto n = static_cast<int64_t>(v.tokens.size());
    int64_t c = std::mismatch(s.computed.begin(), s.computed.end(), v.tokens.begin(),
                              v.tokens.end())
                    .first -
                s.computed.begin();
    c = std::min(c, n - 1);
    // A sliding-window model cannot go back past the window it still holds:
    // start over.
    if (!cache_->can_truncate(s.table, c)) c = 0;
    cache_->truncate(s.table, c);
    s.computed.resize(static_cast<size_t>(c));
    // Room for the tail and k - 1 drafted tokens fed back.
    if (!cache_->reserve(s.table, n - c + j.k - 1).is_ok()) {
      forget(j.seq);  // out of pages: no draft for it this step
      continue;
    }
    live.push_back(v);
    st.push_back(&s);
  }
  if (live.empty()) return;
  auto finish = [&] {
    for (SeqState* s : st) cache_->truncate(s->table, static_cast<int64_t>(s->computed.size()));
  };
  if (!catch_up(live, st)) {
    for (const Job& j : live) forget(j.seq);
    return;
  }
  std::vector<size_t> active(live.size());
  std::iota(active.begin(), active.end(), size_t{0});
  std::vector<char> keep;
  draw_rows(live, st, active, keep);
  active.clear();
  for (size_t i = 0; i < live.size(); ++i)
    if (keep[i] && live[i].k > 1) active.push_back(i);
  // One forward per further position over the sequences still drafting.
  while (!active.empty()) {
    batch_.tokens.clear();
    batch_.seqs.clear();
    for (size_t i : active) {
      const auto seq = static_cast<int32_t>(batch_.seqs.size());
      batch_.seqs.push_back(&st[i]->table);
      const int32_t last = live[i].out->tokens.back();
      batch_.tokens.push_back({last, seq, static_cast<int64_t>(st[i]->computed.size()), true});
    }
    if (!model_->forward(batch_, *cache_, ws_, pool_, logits_.data()).is_ok()) {
      for (const Job& j : live) {
        j.out->clear();
        forget(j.seq);
      }
      return;
    }
    for (size_t i : active) st[i]->computed.push_back(live[i].out->tokens.back());
    draw_rows(live, st, active, keep);
    std::vector<size_t> next;
    for (size_t r = 0; r < active.size(); ++r) {
      const size_t i = active[r];
      if (keep[r] && static_cast<int>(live[i].out->tokens.size()) < live[i].k) next.push_back(i);
    }
    active.swap(next);
  }
  finish();
}

}  // namespace sustain::spec

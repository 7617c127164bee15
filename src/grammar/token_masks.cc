#include "grammar/token_masks.h"

#include <algorithm>
#include <numeric>

#include "base/fnv1a.h"
#include "tokenizer/tokenizer.h"

namespace sustain::grammar {

TokenVocab::TokenVocab(std::vector<std::string> pieces, std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)) {
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  // An end-of-generation token is allowed by the grammar's end, never by
  // its text.
  for (int32_t id : eog_)
    if (id >= 0 && id < n_vocab()) pieces_[static_cast<size_t>(id)].clear();
  for (int32_t id = 0; id < n_vocab(); ++id)
    if (!pieces_[static_cast<size_t>(id)].empty()) order_.push_back(id);
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    const auto& pa = pieces_[static_cast<size_t>(a)];
    const auto& pb = pieces_[static_cast<size_t>(b)];
    return pa != pb ? pa < pb : a < b;
  });
  lcp_.assign(order_.size(), 0);
  for (size_t i = 0; i < order_.size(); ++i) {
    const auto& cur = pieces_[static_cast<size_t>(order_[i])];
    max_len_ = std::max(max_len_, cur.size());
    if (i == 0) continue;
    const auto& prev = pieces_[static_cast<size_t>(order_[i - 1])];
    const size_t n = std::min(prev.size(), cur.size());
    size_t k = 0;
    while (k < n && prev[k] == cur[k]) ++k;
    lcp_[i] = static_cast<uint32_t>(k);
  }
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const tokenizer::Tokenizer& t) {
  std::vector<std::string> pieces(static_cast<size_t>(t.n_vocab()));
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    if (t.is_eog(id)) {
      eog.push_back(id);
    } else {
      pieces[static_cast<size_t>(id)] = t.token_to_piece(id, false);
    }
  }
  return std::make_shared<const TokenVocab>(std::move(pieces), std::move(eog));
}

bool TokenVocab::is_eog(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

size_t VecHash::operator()(const std::vector<uint32_t>& k) const {
  return static_cast<size_t>(fnv1a_ids(std::span<const uint32_t>(k)));
}

std::shared_ptr<const TokenMask> SharedMasks::find(const std::vector<uint32_t>& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

void SharedMasks::insert(const std::vector<uint32_t>& key, std::shared_ptr<const TokenMask> mask) {
  std::lock_guard<std::mutex> l(mu_);
  if (map_.size() >= kMax) map_.clear();
  map_.emplace(key, std::move(mask));
}

size_t SharedMasks::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return map_.size();
}

const TokenMask& TokenMasker::mask(Matcher& m) {
  const MatchState& s = m.state();
  key_.assign(s.tops.begin(), s.tops.end());
  key_.push_back(s.can_end ? 1 : 0);  // keys of different states differ in length or content
  if (auto it = cache_.find(key_); it != cache_.end()) {
    ++stats_.cache_hits;
    return *it->second;
  }
  if (cache_.size() >= kMaxCached) cache_.clear();
  std::shared_ptr<const TokenMask> found;
  if (shared_) {
    m.content_key(s, content_key_);
    found = shared_->find(content_key_);
    if (found) ++stats_.shared_hits;
  }
  if (!found) {
    ++stats_.computed;
    auto out = std::make_shared<TokenMask>();
    compute(m, *out);
    found = std::move(out);
    if (shared_) shared_->insert(content_key_, found);
  }
  return *cache_.emplace(key_, std::move(found)).first->second;
}

uint32_t TokenMasker::intern(const MatchState& s) {
  walk_key_.assign(s.tops.begin(), s.tops.end());
  walk_key_.push_back(s.can_end ? 1 : 0);
  auto [it, inserted] =
      walk_index_.try_emplace(walk_key_, static_cast<uint32_t>(walk_states_.size()));
  if (inserted) {
    walk_states_.push_back(s);
    walk_dead_.push_back(s.dead() ? 1 : 0);
    trans_.resize(trans_.size() + 256, kUnknown);
  }
  return it->second;
}

void TokenMasker::compute(Matcher& m, TokenMask& out) {
  const TokenVocab& v = *vocab_;
  out.assign((static_cast<size_t>(v.n_vocab()) + 31) / 32, 0);
  auto set = [&](int32_t id) { out[static_cast<size_t>(id) / 32] |= 1u << (id % 32); };
  const size_t checkpoint = m.checkpoint();
  walk_states_.clear();
  walk_dead_.clear();
  walk_index_.clear();
  trans_.clear();
  levels_.assign(v.max_len_ + 1, 0);
  levels_[0] = intern(m.state());
  // levels_[0..valid] are the states after the first bytes of the last
  // token walked; a token reuses those of the prefix it shares with it.
  size_t valid = 0;
  bool any = false;
  const size_t n = v.order_.size();
  for (size_t i = 0; i < n;) {
    const int32_t id = v.order_[i];
    const std::string& piece = v.pieces_[static_cast<size_t>(id)];
    size_t k = std::min<size_t>(valid, v.lcp_[i]);
    bool ok = true;
    while (k < piece.size()) {
      const uint32_t from = levels_[k];
      const size_t slot = static_cast<size_t>(from) * 256 + static_cast<uint8_t>(piece[k]);
      uint32_t to = trans_[slot];
      ++stats_.transitions;
      if (to == kUnknown) {
        ++stats_.steps;
        m.step(walk_states_[from], static_cast<uint8_t>(piece[k]), scratch_);
        to = intern(scratch_);
        trans_[slot] = to;
      }
      levels_[++k] = to;
      if (walk_dead_[to] != 0) {
        ok = false;
        break;
      }
    }
    valid = k;
    ++i;
    if (ok) {
      set(id);
      any = true;
    } else {
      // Every following token that starts with the same k bytes dies too.
      while (i < n && v.lcp_[i] >= k) ++i;
    }
  }
  m.rollback(checkpoint);
  // At the grammar's end — or stuck, where no token fits (a grammar whose
  // next byte no token starts with) — generation may only stop.
  if (m.state().can_end || !any)
    for (int32_t id : v.eog_) set(id);
}

}  // namespace sustain::grammar

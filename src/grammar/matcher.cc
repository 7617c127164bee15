#include "grammar/matcher.h"

#include <algorithm>

namespace sustain::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  seen_.clear();
  for (uint32_t alt : g_->alts[g_->root]) reach(alt, kNone, state_);
  finish_state(state_);
}

uint32_t Matcher::intern(uint32_t pos, uint32_t parent) {
  auto [it, inserted] = index_.try_emplace(key(pos, parent), static_cast<uint32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(Node{pos, parent});
  return it->second;
}

void Matcher::reach(uint32_t pos, uint32_t parent, MatchState& out) {
  const Grammar& g = *g_;
  work_.clear();
  work_.push_back({pos, parent});
  while (!work_.empty()) {
    const auto [p, par] = work_.back();
    work_.pop_back();
    // The same (position, stack) reached twice in one step adds nothing new;
    // remembering it keeps ambiguous grammars from multiplying work.
    const uint64_t k = key(p, par);
    if (!seen_.insert(k)) continue;
    const Sym s = g.code[p];
    switch (s.kind) {
      case Sym::kBytes:
        out.tops.push_back(intern(p, par));
        break;
      case Sym::kEnd:
        if (par == kNone) {
          out.can_end = true;
        } else {
          const Node n = nodes_[par];
          work_.push_back({n.pos, n.parent});
        }
        break;
      case Sym::kRule: {
        const uint32_t cont = g.code[p + 1].kind == Sym::kEnd ? par : intern(p + 1, par);
        const auto& alts = g.alts[s.arg];
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back({*it, cont});
        break;
      }
    }
  }
}

void Matcher::finish_state(MatchState& s) {
  std::sort(s.tops.begin(), s.tops.end());
  s.tops.erase(std::unique(s.tops.begin(), s.tops.end()), s.tops.end());
}

void Matcher::step(const MatchState& from, uint8_t b, MatchState& to) {
  to.tops.clear();
  to.can_end = false;
  seen_.clear();
  const Grammar& g = *g_;
  for (uint32_t t : from.tops) {
    const Node n = nodes_[t];
    if (g.sets[g.code[n.pos].arg].has(b)) reach(n.pos + 1, n.parent, to);
    if (to.tops.size() > 2 * kMaxStacks) break;  // duplicates are removed below
  }
  finish_state(to);
  if (to.tops.size() > kMaxStacks) {
    to.tops.clear();
    to.can_end = false;
  }
}

bool Matcher::advance(std::string_view bytes) {
  MatchState cur = state_;
  for (char c : bytes) {
    step(cur, static_cast<uint8_t>(c), scratch_);
    if (scratch_.dead()) return false;
    std::swap(cur, scratch_);
  }
  state_ = std::move(cur);
  return true;
}

void Matcher::SeenSet::clear() {
  size_ = 0;
  if (++epoch_ == 0) {  // wrapped: old stamps could alias the new epoch
    std::fill(epoch_of_.begin(), epoch_of_.end(), 0);
    epoch_ = 1;
  }
}

bool Matcher::SeenSet::insert(uint64_t k) {
  if (2 * (size_ + 1) > keys_.size()) {
    std::vector<uint64_t> old_keys;
    std::vector<uint32_t> old_epoch;
    old_keys.swap(keys_);
    old_epoch.swap(epoch_of_);
    const size_t cap = std::max<size_t>(64, old_keys.size() * 2);
    keys_.assign(cap, 0);
    epoch_of_.assign(cap, 0);
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_epoch[i] == epoch_) insert(old_keys[i]);
  }
  const size_t mask = keys_.size() - 1;
  size_t h = static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  while (epoch_of_[h] == epoch_) {
    if (keys_[h] == k) return false;
    h = (h + 1) & mask;
  }
  keys_[h] = k;
  epoch_of_[h] = epoch_;
  ++size_;
  return true;
}

void Matcher::content_key(const MatchState& s, std::vector<uint32_t>& out) const {
  std::vector<std::vector<uint32_t>> stacks;
  stacks.reserve(s.tops.size());
  for (uint32_t t : s.tops) {
    std::vector<uint32_t> st;
    for (uint32_t n = t; n != kNone; n = nodes_[n].parent) st.push_back(nodes_[n].pos);
    stacks.push_back(std::move(st));
  }
  std::sort(stacks.begin(), stacks.end());
  out.clear();
  for (const auto& st : stacks) {
    out.insert(out.end(), st.begin(), st.end());
    out.push_back(UINT32_MAX);
  }
  out.push_back(s.can_end ? 1 : 0);
}

void Matcher::rollback(size_t checkpoint) {
  for (size_t i = checkpoint; i < nodes_.size(); ++i)
    index_.erase(key(nodes_[i].pos, nodes_[i].parent));
  nodes_.resize(checkpoint);
}

}  // namespace sustain::grammar

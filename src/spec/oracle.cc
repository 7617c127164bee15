#include "spec/oracle.h"

#include <algorithm>
#include <cstdlib>

#include "base/fnv1a.h"
#include "base/splitmix.h"

namespace sustain::spec {

OracleProposer::OracleProposer(double alpha, int64_t n_vocab, uint64_t seed)
    : alpha_(alpha), n_vocab_(n_vocab), seed_(seed) {}

uint64_t OracleProposer::key(std::span<const int32_t> tokens, size_t n) {
  return fnv1a_ids(tokens.first(n), kFnv1aBasis ^ n);
}

void OracleProposer::completed(std::span<const int32_t> tokens, const sampling::SamplerConfig& s) {
  // Only a greedy path is the target's own continuation.
  if (s.temperature > 0.0f && s.top_k != 1) return;
  if (tokens.size() < 2 || tokens.size() > kMaxTokens) return;
  Recording r{next_id_++, std::vector<int32_t>(tokens.begin(), tokens.end())};
  const size_t n = std::min(kKeyTokens, r.tokens.size());
  for (size_t i = 1; i <= n; ++i) index_.emplace(key(r.tokens, i), r.id);
  total_tokens_ += r.tokens.size();
  book_.push_back(std::move(r));
  while (total_tokens_ > kMaxTokens && !book_.empty()) {
    const Recording& old = book_.front();
    const size_t m = std::min(kKeyTokens, old.tokens.size());
    for (size_t i = 1; i <= m; ++i) {
      auto [lo, hi] = index_.equal_range(key(old.tokens, i));
      for (auto it = lo; it != hi; ++it)
        if (it->second == old.id) {
          index_.erase(it);
          break;
        }
    }
    total_tokens_ -= old.tokens.size();
    book_.pop_front();
  }
}

const OracleProposer::Recording* OracleProposer::find(uint64_t seq,
                                                      std::span<const int32_t> tokens) {
  auto by_id = [&](uint64_t id) -> const Recording* {
    if (book_.empty() || id < book_.front().id) return nullptr;
    const uint64_t i = id - book_.front().id;
    return i < book_.size() ? &book_[i] : nullptr;
  };
  auto extends = [&](const Recording& r, size_t from) {
    return tokens.size() <= r.tokens.size() &&
           std::equal(tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.end(),
                      r.tokens.begin() + static_cast<std::ptrdiff_t>(from));
  };
  if (auto it = matched_.find(seq); it != matched_.end()) {
    const Recording* r = by_id(it->second.id);
    if (r != nullptr && it->second.checked <= tokens.size() && extends(*r, it->second.checked)) {
      it->second.checked = tokens.size();
      return r;
    }
    matched_.erase(it);
  }
  const size_t n = std::min(kKeyTokens, tokens.size());
  if (n == 0) return nullptr;
  auto [lo, hi] = index_.equal_range(key(tokens, n));
  // The newest recording that the sequence so far is a prefix of.
  const Recording* best = nullptr;
  for (auto it = lo; it != hi; ++it) {
    const Recording* r = by_id(it->second);
    if (r != nullptr && (best == nullptr || r->id > best->id) && extends(*r, 0)) best = r;
  }
  if (best != nullptr) matched_[seq] = {best->id, tokens.size()};
  return best;
}

void OracleProposer::propose_batch(std::span<Job> jobs) {
  for (Job& j : jobs) {
    const Recording* r = find(j.seq, j.tokens);
    if (r == nullptr) continue;
    const size_t from = j.tokens.size();
    const size_t take = std::min(static_cast<size_t>(j.k), r->tokens.size() - from);
    for (size_t i = 0; i < take; ++i) {
      const int32_t right = r->tokens[from + i];
      SplitMix64 g{seed_ ^ (j.seq * 0x9e3779b97f4a7c15ull) ^ ((from + i) * 0xd1b54a32d192ed03ull)};
      int32_t t = right;
      if (g.uniform() >= alpha_ && n_vocab_ > 1) {
        const auto w = static_cast<int32_t>(g.below(static_cast<uint64_t>(n_vocab_ - 1)));
        t = w >= right ? w + 1 : w;
      }
      j.out->tokens.push_back(t);
    }
  }
}

Expected<double> parse_oracle_alpha(const std::string& type) {
  const std::string pre = "oracle:";
  if (type.rfind(pre, 0) != 0 || type.size() == pre.size())
    return error(Code::kInvalidArgument,
                 "--spec {}: the oracle needs its acceptance, e.g. oracle:0.8 (0..1)", type);
  const std::string v = type.substr(pre.size());
  char* end = nullptr;
  const double a = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || !(a >= 0.0 && a <= 1.0))
    return error(Code::kInvalidArgument, "--spec {}: ALPHA '{}' is not a number in 0..1", type, v);
  return a;
}

}  // namespace sustain::spec

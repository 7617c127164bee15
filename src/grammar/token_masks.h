// Which tokens may come next in a matcher state: a bit per vocabulary entry.
//
// The vocabulary's token bytes are sorted once (TokenVocab); in sorted order
// a token shares a prefix with the one before it, so the walk keeps the
// matcher state after each prefix byte and only steps through the bytes a
// token does not share — the same work as walking a byte trie of the
// vocabulary — and skips every token below a prefix the grammar rejects.
// Within one walk the states met are numbered and their transitions kept in
// a table (a DFA built as the walk needs it), so a byte that leads back to a
// state seen before — every character inside a JSON string, say — costs one
// table read instead of a matcher step. Masks are cached per state (the
// top-node ids are the key), and a JSON generation revisits the same few
// states again and again.
//
// Token bytes are what the server sends for a token (token_to_piece without
// control text), so byte-fallback tokens are single bytes and a character
// split across tokens is matched as its bytes arrive. End-of-generation
// tokens are allowed exactly where the grammar can end.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace sustain::tokenizer {
class Tokenizer;
}

namespace sustain::grammar {

class TokenVocab {
 public:
  // pieces[id]: the token's bytes; "" = never produced under a grammar
  // (control tokens). eog: the end-of-generation ids.
  TokenVocab(std::vector<std::string> pieces, std::vector<int32_t> eog);
  static std::shared_ptr<const TokenVocab> from_tokenizer(const tokenizer::Tokenizer& t);

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eog() const { return eog_; }
  bool is_eog(int32_t id) const;

 private:
  friend class TokenMasker;
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<int32_t> order_;  // ids with a non-empty piece, sorted by piece
  std::vector<uint32_t> lcp_;   // lcp_[i]: bytes order_[i] shares with order_[i-1]
  size_t max_len_ = 0;
};

// Bit (id % 32) of word id / 32: token id may come next.
using TokenMask = std::vector<uint32_t>;
inline bool mask_has(const TokenMask& m, int32_t id) {
  const auto i = static_cast<size_t>(id);
  return i / 32 < m.size() && ((m[i / 32] >> (i % 32)) & 1) != 0;
}

struct VecHash {
  size_t operator()(const std::vector<uint32_t>& k) const;
};

// Masks shared by every matcher of one grammar — the choices of a request,
// and requests that send the same grammar — keyed by the stacks' content
// (Matcher::content_key). Thread-safe; emptied when it holds kMax masks.
class SharedMasks {
 public:
  std::shared_ptr<const TokenMask> find(const std::vector<uint32_t>& key) const;
  void insert(const std::vector<uint32_t>& key, std::shared_ptr<const TokenMask> mask);
  size_t size() const;

 private:
  static constexpr size_t kMax = 256;
  mutable std::mutex mu_;
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const TokenMask>, VecHash> map_;
};

struct MaskStats {
  uint64_t computed = 0, cache_hits = 0;
  uint64_t shared_hits = 0;  // masks found in the SharedMasks (a miss of the own cache)
  uint64_t steps = 0;        // matcher steps taken by walks (new transitions)
  uint64_t transitions = 0;  // bytes walked, steps plus table reads
};

class TokenMasker {
 public:
  explicit TokenMasker(std::shared_ptr<const TokenVocab> vocab,
                       std::shared_ptr<SharedMasks> shared = nullptr)
      : vocab_(std::move(vocab)), shared_(std::move(shared)) {}

  // The tokens allowed in m's current state. The reference stays valid until
  // the next call.
  const TokenMask& mask(Matcher& m);
  const MaskStats& stats() const { return stats_; }
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  void compute(Matcher& m, TokenMask& out);
  uint32_t intern(const MatchState& s);  // a walk state's number

  // Masks are a few KB each (n_vocab / 8 bytes); the cache is emptied when
  // it holds this many, which bounds a request's memory.
  static constexpr size_t kMaxCached = 256;
  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<SharedMasks> shared_;
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const TokenMask>, VecHash> cache_;
  std::vector<uint32_t> key_, content_key_;
  // The walk: state numbers after each byte of the current token, the
  // states met (with whether each is dead) and their transitions.
  static constexpr uint32_t kUnknown = UINT32_MAX;
  std::vector<uint32_t> levels_;
  std::vector<MatchState> walk_states_;
  std::vector<uint8_t> walk_dead_;
  std::unordered_map<std::vector<uint32_t>, uint32_t, VecHash> walk_index_;
  std::vector<uint32_t> trans_;  // [state * 256 + byte] → state, or kUnknown
  std::vector<uint32_t> walk_key_;
  MatchState scratch_;
  MaskStats stats_;
};

}  // namespace sustain::grammar

// The two merge algorithms: SentencePiece's score-ordered pair merging with
// byte fallback, and byte-level BPE's rank-ordered merges. Both keep the
// symbols as a linked list over the text and a priority queue of candidate
// pairs, as llama.cpp does, so results match it pair for pair.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace sustain::tokenizer {
namespace {

struct Symbol {
  int prev, next;
  size_t offset, n;  // bytes of the text this symbol covers; n == 0: merged away
};

std::vector<Symbol> split_chars(std::string_view text) {
  std::vector<Symbol> syms;
  for (size_t off = 0; off < text.size();) {
    const size_t n =
        std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int i = static_cast<int>(syms.size());
    syms.push_back({i - 1, off + n == text.size() ? -1 : i + 1, off, n});
    off += n;
  }
  return syms;
}

// Merges `right` into `left` and unlinks it.
void merge(std::vector<Symbol>& syms, int left, int right) {
  syms[left].n += syms[right].n;
  syms[right].n = 0;
  syms[left].next = syms[right].next;
  if (syms[right].next >= 0) syms[syms[right].next].prev = left;
}

struct SpmPair {
  int left, right;
  float score;
  size_t size;
  // Highest score first; among equal scores the leftmost.
  bool operator<(const SpmPair& o) const {
    return score < o.score || (score == o.score && left > o.left);
  }
};

struct BpePair {
  int left, right;
  int rank;
  size_t size;
  // Lowest rank first; among equal ranks the leftmost.
  bool operator<(const BpePair& o) const {
    return rank > o.rank || (rank == o.rank && left > o.left);
  }
};

}  // namespace

void Tokenizer::Impl::spm_tokenize(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<Symbol> syms = split_chars(text);
  std::priority_queue<SpmPair> queue;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const size_t size = syms[l].n + syms[r].n;
    const int32_t id = find(std::string_view(text).substr(syms[l].offset, size));
    if (id >= 0) queue.push({l, r, score[id], size});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_pair(i - 1, i);

  while (!queue.empty()) {
    const SpmPair p = queue.top();
    queue.pop();
    Symbol& l = syms[p.left];
    Symbol& r = syms[p.right];
    // Stale: one side was merged into something else since the pair was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != p.size) continue;
    merge(syms, p.left, p.right);
    try_pair(syms[p.left].prev, p.left);
    try_pair(p.left, syms[p.left].next);
  }

  for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    const std::string_view s = std::string_view(text).substr(syms[i].offset, syms[i].n);
    if (const int32_t id = find(s); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Byte fallback: a character the vocabulary lacks becomes its UTF-8 bytes.
    for (unsigned char b : s) {
      const int32_t id = byte_token[b];
      if (id >= 0) {
        out.push_back(id);
      } else if (unk >= 0) {
        out.push_back(unk);
      }
    }
  }
}

void Tokenizer::Impl::bpe_tokenize(std::string_view text, std::vector<int32_t>& out) const {
  std::string encoded;
  std::string key;
  for (const std::string& word : pre_tokenize(pre_cfg.type, text)) {
    encoded.clear();
    for (unsigned char b : word) encoded += unicode::byte_to_unicode(b);

    if (pre_cfg.ignore_merges) {
      if (const int32_t id = find(encoded); id >= 0) {
        out.push_back(id);
        continue;
      }
    }

    std::vector<Symbol> syms = split_chars(encoded);
    std::priority_queue<BpePair> queue;
    auto try_pair = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      key.assign(encoded, syms[l].offset, syms[l].n);
      key += ' ';
      key.append(encoded, syms[r].offset, syms[r].n);
      auto it = merge_rank.find(key);
      if (it != merge_rank.end()) queue.push({l, r, it->second, syms[l].n + syms[r].n});
    };
    for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_pair(i - 1, i);

    while (!queue.empty()) {
      const BpePair p = queue.top();
      queue.pop();
      const Symbol& l = syms[p.left];
      const Symbol& r = syms[p.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != p.size) continue;
      merge(syms, p.left, p.right);
      try_pair(syms[p.left].prev, p.left);
      try_pair(p.left, syms[p.left].next);
    }

    for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
      const std::string_view s = std::string_view(encoded).substr(syms[i].offset, syms[i].n);
      if (const int32_t id = find(s); id >= 0) {
        out.push_back(id);
        continue;
      }
      // A symbol outside the vocabulary (a vocabulary without all 256 byte
      // characters): llama.cpp looks up each of its bytes alone and drops
      // those it cannot find.
      for (char b : s) {
        if (const int32_t id = find(std::string_view(&b, 1)); id >= 0) out.push_back(id);
      }
    }
  }
}

}  // namespace sustain::tokenizer

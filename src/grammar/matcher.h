// Runs a Grammar over bytes: the set of parse stacks after every byte so far
// (a pushdown recognizer over all alternatives at once, as llama.cpp's
// grammar sampler keeps them).
//
// Stacks share their tails: a stack is a chain of nodes (position, parent),
// each node interned, so two stacks with the same contents are the same node
// id and a matcher state is just the sorted ids of its top nodes — cheap to
// compare and to use as a cache key (token_masks.h). A top node always sits
// on a terminal; the nodes below it are the positions to continue at when the
// rule above finishes. A rule reference at the end of an alternative pushes
// nothing (a tail call), so right recursion — how repetition is compiled —
// runs in constant stack depth.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace sustain::grammar {

struct MatchState {
  std::vector<uint32_t> tops;  // sorted node ids, each on a terminal
  bool can_end = false;        // the bytes so far are a complete sentence
  // Nothing can follow and the input so far is not complete either.
  bool dead() const { return tops.empty() && !can_end; }
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  const MatchState& state() const { return state_; }
  const Grammar& grammar() const { return *g_; }

  // Consumes bytes; all or nothing: false leaves the state as it was.
  bool advance(std::string_view bytes);

  // A state may hold at most this many stacks. Ambiguous grammars can make
  // their number grow exponentially with the input (s ::= "a" s "b" | "a" s
  // "c" | ""), and the grammar is client input: a byte that would exceed the
  // bound is refused like a byte the grammar does not allow, so the output
  // stays a valid prefix and generation ends early instead of stalling the
  // engine.
  static constexpr size_t kMaxStacks = 4096;

  // The state after `from` and byte b (into `to`, reusing its storage).
  // Nodes made here stay until rollback(); the mask walk rolls back what it
  // explored, so only states the matcher really passed through keep ids.
  void step(const MatchState& from, uint8_t b, MatchState& to);
  size_t checkpoint() const { return nodes_.size(); }
  void rollback(size_t checkpoint);

  size_t n_nodes() const { return nodes_.size(); }

  // The state's stacks by content — each the positions from top to bottom,
  // ended by UINT32_MAX, the stacks sorted — then can_end. Equal for equal
  // states of any two matchers of one grammar, whose node ids differ.
  void content_key(const MatchState& s, std::vector<uint32_t>& out) const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint32_t pos;
    uint32_t parent;  // kNone at the bottom
  };
  static uint64_t key(uint32_t pos, uint32_t parent) {
    return (static_cast<uint64_t>(pos) << 32) | parent;
  }
  uint32_t intern(uint32_t pos, uint32_t parent);
  // Adds to `out` the tops reached by continuing at `pos` with `parent`
  // below: expands rule references, pops finished alternatives.
  void reach(uint32_t pos, uint32_t parent, MatchState& out);
  void finish_state(MatchState& s);

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> index_;
  MatchState state_;
  MatchState scratch_;
  // A set of (pos, parent) keys cleared in O(1) per step by bumping an
  // epoch: a step may visit thousands of pairs and the mask walk runs
  // millions of steps.
  class SeenSet {
   public:
    void clear();
    bool insert(uint64_t k);  // false if already present

   private:
    std::vector<uint64_t> keys_;
    std::vector<uint32_t> epoch_of_;
    uint32_t epoch_ = 1;  // stamps start at 0, so no slot is live at first
    size_t size_ = 0;
  };

  // reach()'s worklist and the (pos, parent) pairs one step has seen.
  std::vector<std::pair<uint32_t, uint32_t>> work_;
  SeenSet seen_;
};

}  // namespace sustain::grammar

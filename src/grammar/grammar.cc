#include "grammar/grammar.h"

#include <unordered_map>

#include <fmt/format.h>

namespace sustain::grammar {
namespace {

// Fixed point over "some alternative is all nullable symbols".
template <typename AltsOf>
std::vector<bool> nullable_of(size_t n_rules, AltsOf alts_of) {
  std::vector<bool> nullable(n_rules, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (nullable[r]) continue;
      alts_of(r, [&](const Sym* s, size_t n) {
        bool all = true;
        for (size_t i = 0; i < n && all; ++i) all = s[i].kind == Sym::kRule && nullable[s[i].arg];
        if (all && !nullable[r]) {
          nullable[r] = true;
          changed = true;
        }
      });
    }
  }
  return nullable;
}

}  // namespace

uint32_t GrammarBuilder::rule(const std::string& name) {
  if (auto it = index_.find(name); it != index_.end()) return it->second;
  index_.emplace(name, static_cast<uint32_t>(names_.size()));
  names_.push_back(name);
  alts_.emplace_back();
  defined_.push_back(false);
  first_use_.emplace_back();
  return static_cast<uint32_t>(names_.size() - 1);
}

uint32_t GrammarBuilder::fresh_rule(const std::string& base) {
  for (size_t k = names_.size() + 1;; ++k) {
    std::string name = fmt::format("{}-{}", base, k);
    if (index_.count(name) != 0) continue;
    index_.emplace(name, static_cast<uint32_t>(names_.size()));
    names_.push_back(std::move(name));
    alts_.emplace_back();
    defined_.push_back(true);
    first_use_.emplace_back();
    return static_cast<uint32_t>(names_.size() - 1);
  }
}

uint32_t GrammarBuilder::bytes(const ByteSet& s) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == s) return static_cast<uint32_t>(i);
  sets_.push_back(s);
  return static_cast<uint32_t>(sets_.size() - 1);
}

void GrammarBuilder::add_alt(uint32_t r, Alt alt) {
  n_symbols_ += alt.size() + 1;
  alts_[r].push_back(std::move(alt));
}

void GrammarBuilder::note_use(uint32_t r, std::string where) {
  if (first_use_[r].empty()) first_use_[r] = std::move(where);
}

Expected<Grammar> GrammarBuilder::finish(const std::string& root_name) {
  uint32_t root = UINT32_MAX;
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == root_name) root = static_cast<uint32_t>(i);
  if (root == UINT32_MAX || !defined_[root])
    return error(Code::kInvalidArgument, "grammar: there is no rule '{}' to start from", root_name);
  for (size_t r = 0; r < names_.size(); ++r)
    if (!defined_[r])
      return error(Code::kInvalidArgument, "grammar: rule '{}' is used{} but never defined",
                   names_[r], first_use_[r].empty() ? "" : " at " + first_use_[r]);
  if (n_symbols_ > kMaxGrammarSymbols)
    return error(Code::kInvalidArgument,
                 "grammar: it expands to {} symbols, more than the limit of {} (a repetition "
                 "count too large?)",
                 n_symbols_, kMaxGrammarSymbols);

  const size_t n = names_.size();
  const auto nullable = nullable_of(n, [&](size_t r, auto&& f) {
    for (const Alt& a : alts_[r]) f(a.data(), a.size());
  });
  // Left recursion: r → s when s can be the first thing r expands to.
  std::vector<std::vector<uint32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    for (const Alt& a : alts_[r])
      for (const Sym& s : a) {
        if (s.kind != Sym::kRule) break;
        first[r].push_back(s.arg);
        if (!nullable[s.arg]) break;
      }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != 0) continue;
    path.push_back({static_cast<uint32_t>(start), 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == first[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t s = first[r][next++];
      if (color[s] == 1) {
        std::string cycle;
        bool on = false;
        for (const auto& [p, unused] : path) {
          on = on || p == s;
          if (on) cycle += names_[p] + " -> ";
        }
        return error(Code::kInvalidArgument,
                     "grammar: rule '{}' is left-recursive ({}{}); rewrite it with repetition",
                     names_[s], cycle, names_[s]);
      }
      if (color[s] == 0) {
        color[s] = 1;
        path.push_back({s, 0});
      }
    }
  }

  Grammar g;
  g.sets = sets_;
  g.names = names_;
  g.root = root;
  g.alts.resize(n);
  g.code.reserve(n_symbols_);
  for (size_t r = 0; r < n; ++r)
    for (const Alt& a : alts_[r]) {
      g.alts[r].push_back(static_cast<uint32_t>(g.code.size()));
      g.code.insert(g.code.end(), a.begin(), a.end());
      g.code.push_back(Sym{Sym::kEnd, 0});
    }
  return g;
}

std::vector<bool> nullable_rules(const Grammar& g) {
  return nullable_of(g.n_rules(), [&](size_t r, auto&& f) {
    for (uint32_t start : g.alts[r]) {
      size_t len = 0;
      while (g.code[start + len].kind != Sym::kEnd) ++len;
      f(&g.code[start], len);
    }
  });
}

}  // namespace sustain::grammar

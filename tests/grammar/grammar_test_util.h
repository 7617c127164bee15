// Helpers for the grammar tests: does a grammar accept a text in full?
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"

namespace sustain::grammar::test {

inline std::shared_ptr<const Grammar> gbnf(std::string_view text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g.has_value()) << g.status().message() << "\n" << text;
  if (!g) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

// The whole text is a sentence of the grammar.
inline bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  if (!g) return false;
  Matcher m(g);
  return m.advance(text) && m.state().can_end;
}

// The text can be continued to a sentence (it is a prefix of one).
inline bool prefix_ok(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  if (!g) return false;
  Matcher m(g);
  return m.advance(text);
}

}  // namespace sustain::grammar::test

// JSON Schema `pattern` (an ECMA-262 regular expression) → a GBNF expression
// for the JSON text of a string value that the pattern matches.
//
// Supported: literals and escapes (\d \w \s \D \W \S \t \n \r \. \uXXXX …),
// [classes] with ranges and negation, `.`, groups ( ) and (?: ), `|`,
// quantifiers * + ? {m} {m,} {m,n} (a lazy `?` after them changes nothing
// here), and ^ / $ at the ends. Without ^ (or $) the pattern may match
// anywhere, as JSON Schema says, so any text may come before (or after).
// Lookarounds, backreferences, named groups and the like are errors naming
// the construct.
//
// The expression produces the *JSON-escaped* text: a " or \ the pattern
// allows is written \" or \\, and \n, \r, \t as their escapes; other control
// characters are left out (the grammar is then a subset of the pattern).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace sustain::grammar {

// `char_rule` names a GBNF rule matching one JSON string character in
// escaped form; unanchored ends repeat it.
Expected<std::string> regex_to_gbnf(std::string_view pattern, const std::string& char_rule);

// GBNF text helpers shared with the schema compiler.
std::string gbnf_literal(std::string_view bytes);  // "…" with escapes
std::string gbnf_class_char(uint32_t cp);          // one character inside [ ]

}  // namespace sustain::grammar

// GBNF, llama.cpp's grammar text format, parsed into a Grammar:
//
//   root  ::= "{" ws pair ("," ws pair)* "}"   # comment
//   pair  ::= [a-z]+ ":" ws ( num | "null" )
//   num   ::= "-"? [0-9]{1,16}
//
// Rules are `name ::= alternatives`; names are [A-Za-z0-9_-]+. Alternatives
// are separated by `|`; a rule ends at a newline unless it is inside
// parentheses or the next line starts with `|`. Items: "string literals"
// (escapes \n \r \t \\ \" \' \[ \] \- \xHH \uHHHH \UHHHHHHHH; \x names a code
// point, as in llama.cpp), [character classes] with ranges and [^negation],
// `.` (any character), rule names and ( groups ); postfix * + ? {m} {m,}
// {m,n}. Errors name the line and column.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace sustain::grammar {

// kInvalidArgument "grammar: line L, column C: <problem>" on a syntax
// error; the checks of GrammarBuilder::finish (undefined rules, left
// recursion, no root) after that.
Expected<Grammar> parse_gbnf(std::string_view text, const std::string& root = "root");

}  // namespace sustain::grammar

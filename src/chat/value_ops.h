// Python semantics of template values shared by the renderer's files:
// truthiness, equality, numbers, and the string operations behind the
// methods and filters (code points, not bytes, as Python counts them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/jinja.h"

namespace sustain::chat::jinja {

bool truthy(const Value& v);

bool is_number(const Value& v);
bool is_intlike(const Value& v);
int64_t as_int(const Value& v);
double as_float(const Value& v);

bool equal(const Value& a, const Value& b);

bool contains_namespace(const Value& v);

// Unicode-aware where text:: maps the script (see jinja.h).
std::string lower_text(const std::string& s);
std::string upper_text(const std::string& s);
bool is_alpha(uint32_t c);

// Python's str.capitalize: the first character upper-cased, the rest lower.
std::string capitalize(const std::string& s);

// Python's str.islower / str.isupper: some cased letter, none of the other case.
bool is_lower_text(const std::string& s);
bool is_upper_text(const std::string& s);

// Jinja's `title` filter (not str.title): words start after whitespace or
// one of - ( { [ <; each word's first character upper-cased, the rest lower.
std::string title_filter(const std::string& s);

// Python's str.title: a cased letter after an uncased character starts a word.
std::string title_case(const std::string& s);

// Python's str.strip family; chars == nullptr strips whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right);

std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit);

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit);

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count);

// Python slice indices for a sequence of length n.
std::vector<size_t> slice_indices(int64_t n, const Value* start, const Value* stop, int64_t step);

}  // namespace sustain::chat::jinja

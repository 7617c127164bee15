// Helpers shared by the GGUF reader and writer (private to src/gguf).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gguf/gguf.h"

namespace sustain::gguf::detail {

// The type for a raw id read from a file, or nullopt for an id GGUF does not define.
std::optional<ValueType> value_type_from_id(uint32_t id);

// Encoded size of one scalar of type t; 0 for string and array (variable length).
uint32_t scalar_size(ValueType t);

// The fewest bytes one encoded value of type t can take (used to bound counts
// read from a file against the bytes that remain before allocating anything).
uint64_t min_encoded_size(ValueType t);

// "a string", "an int32", "an array of float32": for error messages.
std::string describe(const Value& v);

// A key or tensor name from the file, made safe to put in a message: control
// bytes become \xNN (a hostile name cannot drive the user's terminal) and
// names over 200 bytes are cut short.
std::string printable(std::string_view s);

// Whether v holds the variant alternative its `type` calls for, with a value
// that fits that type (a kUint8 holding 300 does not).
bool value_consistent(const Value& v);

}  // namespace sustain::gguf::detail

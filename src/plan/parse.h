// Parsers for `sustain plan`'s flag values (sizes, lists, percentages).
// Every error names the flag and the value it could not read.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sustain::plan {

// A byte count: plain bytes ("17179869184") or a number with a unit, case
// insensitive — K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024 (what
// device memory is quoted in); KB, MB, GB, TB are powers of 1000; B is bytes.
// Fractions are allowed with a unit ("11.47GiB") and rounded down to a byte.
Expected<uint64_t> parse_bytes(std::string_view s, std::string_view flag);

// Comma-separated byte counts ("16G,12G"); none may be empty or zero.
Expected<std::vector<uint64_t>> parse_byte_list(std::string_view s, std::string_view flag);

// Comma-separated positive numbers ("2,1.5").
Expected<std::vector<double>> parse_number_list(std::string_view s, std::string_view flag);

// A percentage, "15%" or "15", as a fraction in [0, 1): 0.15.
Expected<double> parse_percent(std::string_view s, std::string_view flag);

// "layer" or "tensor" ("row", llama.cpp's name, is accepted for tensor).
Expected<Split> parse_split(std::string_view s, std::string_view flag);

}  // namespace sustain::plan

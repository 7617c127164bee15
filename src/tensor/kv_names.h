// KV-cache formats by the names users type (-ctk / -ctv): llama.cpp's
// spellings f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, and sustain's fp8
// (E4M3). One table for every command that takes a cache format.
#pragma once

#include <string_view>

#include "base/status.h"
#include "tensor/qtype.h"

namespace sustain {

// kInvalidArgument naming `flag`, the value and the supported names.
Expected<QType> kv_cache_type(std::string_view name, std::string_view flag);
// "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, fp8"
const char* kv_cache_type_names();

}  // namespace sustain

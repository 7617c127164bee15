#include "tensor/kv_names.h"

#include <utility>

namespace sustain {

const char* kv_cache_type_names() { return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, fp8"; }

Expected<QType> kv_cache_type(std::string_view name, std::string_view flag) {
  static constexpr std::pair<std::string_view, QType> kTypes[] = {
      {"f32", QType::F32},   {"f16", QType::F16},   {"bf16", QType::BF16},
      {"q8_0", QType::Q8_0}, {"q4_0", QType::Q4_0}, {"q4_1", QType::Q4_1},
      {"q5_0", QType::Q5_0}, {"q5_1", QType::Q5_1}, {"fp8", QType::FP8_E4M3}};
  for (const auto& [n, t] : kTypes)
    if (name == n) return t;
  return error(Code::kInvalidArgument, "{} '{}' is not a KV cache format (supported: {})", flag,
               name, kv_cache_type_names());
}

}  // namespace sustain

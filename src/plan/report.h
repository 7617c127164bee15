// A plan as text (for people) and as JSON (the object docs/plan.md
// documents; every size in bytes).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan/plan.h"

namespace sustain::plan {

// `source` says where the tensors came from ("model.gguf", "preset qwen3-4b as Q4_K_M").
nlohmann::ordered_json to_json(const PlanInput& in, const Plan& p, const std::string& source);
std::string to_text(const PlanInput& in, const Plan& p, const std::string& source);

}  // namespace sustain::plan

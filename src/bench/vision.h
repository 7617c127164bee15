// Bench: what an image costs (issue 19): the time to encode it (decode,
// preprocess, ViT, projector) and the prefill time of a prompt holding it,
// beside a text prompt of as many positions (image tokens attend
// non-causally, and are not looked up: the two need not cost the same).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/api.h"

namespace sustain::bench {

struct VisionOptions {
  std::string mmproj;
  std::vector<std::string> images;
  int reps = 3;
  int threads = 1;
  uint64_t seed = 1234;
};

// The report's "vision" section (docs/bench.md).
Expected<nlohmann::json> run_vision(engine::Engine& e, const VisionOptions& o);

}  // namespace sustain::bench

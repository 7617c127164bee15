// The model a bench runs when it is given no file: a synthetic model of a
// preset's real shapes with random weights (tools/synth.h), made once and
// cached under $XDG_CACHE_HOME/sustain (or ~/.cache/sustain).
#pragma once

#include <string>

#include "base/status.h"
#include "bench/observer.h"

namespace sustain::bench {

constexpr const char* kDefaultPreset = "smollm2-135m";
constexpr const char* kDefaultType = "Q4_K_M";

// The path of the synthetic `preset` with weights in `type` (a tools file
// type name), made with `threads` threads if it is not cached yet. It is
// written under a temporary name first, so an interrupted run never leaves
// a truncated file behind.
Expected<std::string> cached_synth_model(const std::string& preset, const std::string& type,
                                         int threads, Observer& obs);

}  // namespace sustain::bench

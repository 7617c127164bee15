// `sustain synth`: writes a random-weight GGUF with a real architecture's
// exact shapes, metadata and tokenizer, so speed and memory can be measured
// without downloading weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "tools/presets.h"
#include "tools/quant_mix.h"

namespace sustain::tools {

struct SynthOptions {
  FileType type = FileType::kQ4_K_M;
  uint64_t seed = 42;
  // A Hugging Face tokenizer.json to use instead of the synthetic vocabulary
  // (padded to the preset's vocabulary size; more tokens than that is an error).
  std::string tokenizer_json;
  // Main blocks to write, counted from the first (0 = all of the preset's).
  // Every block keeps the preset's shape and kind (a hybrid's DeltaNet /
  // full-attention pattern, a sliding-window period, the experts); the MTP
  // blocks stay. A cut model costs what the whole one costs per block, so it
  // stands in for a model too large to fill a long context on the machine at
  // hand; the file says it is a cut (general.description).
  uint32_t n_layer = 0;
  // Called after each tensor: (tensors done, total, bytes done, total bytes).
  std::function<void(size_t, size_t, uint64_t, uint64_t)> progress;
};

struct SynthResult {
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;
  size_t n_tensors = 0;
};

// Weights are drawn from a fixed-seed generator per (seed, tensor, row chunk),
// so the output is identical for a seed whatever the thread count. Values are
// scaled like a trained model's at initialisation (std 1/sqrt(fan_in) for
// matrices, 1 for norms, small biases), which keeps every activation finite
// through any number of layers (RMSNorm before each block bounds its input).
// Memory: one tensor's quantized bytes plus a bounded f32 chunk per thread —
// never the whole model.
Expected<SynthResult> synth_model(const Preset& preset, const std::string& out_path,
                                  const SynthOptions& opt, ThreadPool& pool);

}  // namespace sustain::tools

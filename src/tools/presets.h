// Synth presets: the exact shapes, hyperparameters and tokenizer layout of
// real model families, so `sustain synth` can write a random-weight file that
// is byte-for-byte the size of the real one and runs at the real one's speed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/arch_config.h"
#include "tools/synth_vocab.h"

namespace sustain::tools {

struct Preset {
  std::string name;        // "llama-3.2-1b"
  std::string hf_name;     // the model it copies, e.g. "meta-llama/Llama-3.2-1B-Instruct"
  ArchConfig arch;
  SynthVocabSpec vocab;
  // Llama 3.1+ "llama3" RoPE scaling, stored as a rope_freqs.weight tensor.
  bool llama3_rope = false;
  float llama3_factor = 1.0f, llama3_low_freq = 1.0f, llama3_high_freq = 4.0f;
  uint32_t llama3_orig_ctx = 8192;
  bool for_tests = false;  // tiny presets used by the test suite; hidden from --list by default
};

const std::vector<Preset>& presets();
const Preset* find_preset(std::string_view name);
std::string preset_names();  // comma-separated, for help and errors

// The Llama 3 per-frequency RoPE factors (what convert_hf_to_gguf.py stores
// as rope_freqs.weight): 1 for high frequencies, `factor` for low ones, and a
// smooth ramp between.
std::vector<float> llama3_rope_factors(const Preset& p);

}  // namespace sustain::tools

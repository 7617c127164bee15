// The speculative-decoding flags that serve, run and bench share (--spec,
// --draft-model, --draft-max, ...), llama.cpp's spellings where they exist
// (-md, -ctkd, -ctvd, --draft-p-min), and the spec::Config they make.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "spec/proposer.h"

namespace sustain::cli {

struct SpecArgs {
  std::string spec;  // "ngram,draft"
  std::string draft_model;
  std::string cache_type_k_draft = "f16", cache_type_v_draft = "f16";
  int draft_max = 8, draft_min = 1, ngram_max = 4, ngram_pool_mb = 16;
  std::string gate = "on";
  float draft_p_min = 0.0f;
  int mtp_depth = 1;
};

void add_spec_flags(CLI::App* sub, SpecArgs& a);

// Errors name the flag (an unknown proposer, draft without --draft-model, ...).
Expected<spec::Config> spec_config(const SpecArgs& a);

}  // namespace sustain::cli

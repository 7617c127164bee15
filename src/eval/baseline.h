// A saved KL baseline: for every position of one token sequence, the top-k
// logits and the log-sum-exp of the baseline's full row (kl.h says why that
// bounds the KL error), plus the baseline logit of the token that came next.
// `sustain eval kl --save-base FILE` writes it; `--base-file FILE` compares a
// test configuration against it without running the baseline again.
//
// File: "SKLBASE2", u32 header length, a JSON header (model, cache types,
// n_vocab, n_tokens, top_k, source text), int32 token ids [n_tokens], then per
// position: f64 lse, f32 next-token logit, int32 ids[top_k], f32 logits[top_k]
// (all little-endian). The reader checks every size against the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "eval/kl.h"

namespace sustain::eval {

struct SavedBaseline {
  std::string model, cache_k, cache_v, source;
  int64_t n_vocab = 0;
  int top_k = 0;
  std::vector<int32_t> tokens;
  std::vector<SavedRow> rows;      // one per token; row i = after tokens[i]
  std::vector<float> next_logit;   // baseline logit of tokens[i + 1] (0 for the last row)
};

Status write_baseline(const std::string& path, const SavedBaseline& b);
Expected<SavedBaseline> read_baseline(const std::string& path);

}  // namespace sustain::eval

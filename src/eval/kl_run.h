// One KL pass: a baseline and any number of test configurations fed the same
// token ids in lockstep, compared position by position (kl.h) and aggregated
// per context bucket. `sustain eval kl` and the quality column of
// `sustain bench --ablate` both run it, so the two can never disagree.
//
// Lockstep, one chunk at a time, so memory holds two chunks of logits
// (chunk × n_vocab floats each), never a whole 32K × vocabulary matrix. The
// baseline is a model run (then it is run once for every test), or a saved
// baseline (baseline.h: top-k + log-sum-exp per position, KL bounded).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "eval/baseline.h"
#include "eval/kl.h"
#include "eval/report.h"
#include "eval/runner.h"

namespace sustain::eval {

struct KlProgress {
  int64_t done = 0, total = 0;  // tokens fed to every runner so far, of the input
  double elapsed_s = 0.0;       // since the runners were opened
  // Seconds each chunk took (all runners together), in order, and the
  // position its first token had: what a projection of the rest needs.
  std::vector<double> chunk_s;
  std::vector<int64_t> chunk_start;
};

struct KlRunSpec {
  // The baseline, run alongside the tests. Ignored when `saved` is set. The
  // runners' ctx is set to the number of tokens.
  RunnerOptions base;
  // A saved baseline to compare against instead (its tokens must equal `tokens`).
  const SavedBaseline* saved = nullptr;
  std::vector<RunnerOptions> tests;
  std::vector<int32_t> tokens;  // at least 2
  std::vector<int64_t> edges;   // bucket edges (KlAccumulator)
  int64_t chunk = 512;          // tokens per lockstep step
  // Labels copied into the results (default: model K/V).
  std::string base_label;
  std::vector<std::string> test_labels;
  // With save_to: the baseline's rows are kept (top `save_top_k` logits and
  // the log-sum-exp) and written into *save_to with n_vocab, top_k and tokens;
  // the caller names the model, formats and source.
  SavedBaseline* save_to = nullptr;
  int save_top_k = 256;
  // Called after every chunk; returning false ends the pass there (a time
  // budget): the results then cover the positions fed so far.
  std::function<bool(const KlProgress&)> progress;
};

// One result per test configuration, in order. Errors name the side
// ("baseline", "test q4_0/f16") and what went wrong.
Expected<std::vector<KlRun>> run_kl(const KlRunSpec& spec);

// Uniform random ids in [3, n_vocab) after BOS = 1 (0–2 are the unknown,
// BOS and EOS tokens in the vocabularies sustain writes), deterministic in
// `seed`: the input of `--synthetic random` and of bench's quality pass.
std::vector<int32_t> random_tokens(int64_t n, int64_t n_vocab, uint64_t seed);

}  // namespace sustain::eval

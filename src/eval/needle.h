// Needle-in-a-haystack with token-id cases (the format of
// ../shared/ref/needle): a prompt of `ctx` ids that hides one key K followed
// by its value V at a given depth, among filler tokens, distractor value
// tokens and distractor K′ V′ pairs, and ends with K; the answer is V.
//
// Case file: one case per line, `answer tag id id …` with tag
// `ctx:depth:needle_position` (the ids are the whole prompt, BOS first,
// query key last). Blank lines and lines starting with '#' are skipped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sustain::eval {

struct NeedleCase {
  int32_t answer = 0;
  int64_t ctx = 0;        // prompt length in tokens
  double depth = 0.0;     // where the needle sits, 0..1
  int64_t needle_pos = 0; // position of the needle key K (V is at needle_pos + 1)
  std::string tag;        // "ctx:depth:needle_pos" as written
  std::vector<int32_t> ids;
};

// Parses a case file's text; `source` names it in errors (with the line).
// Every field is checked: ids are integers ≥ 0, the tag's length equals the
// number of ids, and the needle position is inside the prompt.
Expected<std::vector<NeedleCase>> parse_needle_cases(const std::string& text,
                                                     const std::string& source);
std::string format_needle_case(const NeedleCase& c);

// The token layout of the reference cases (a 512-token vocabulary): keys
// 300–363, values 400–463, fillers every other id from 3 (0–2 are
// unk/BOS/EOS), BOS = 1.
struct NeedleVocab {
  int32_t bos = 1;
  int32_t first_filler = 3;
  int32_t key0 = 300, n_keys = 64;
  int32_t value0 = 400, n_values = 64;
  int32_t n_vocab = 512;
  bool is_key(int32_t t) const { return t >= key0 && t < key0 + n_keys; }
  bool is_value(int32_t t) const { return t >= value0 && t < value0 + n_values; }
};

struct NeedleGenSpec {
  std::vector<int64_t> ctx;      // prompt lengths, each ≥ 32
  std::vector<double> depths;    // each in [0, 1]
  int trials = 4;                // cases per (ctx, depth)
  uint64_t seed = 1;
  double distractor_value_share = 0.3;  // each haystack token is a random value with this probability
  int distractor_pairs = 8;             // K′ V′ pairs, K′ ≠ K, placed anywhere else
  NeedleVocab vocab;
};

// The needle key sits at 1 + round(depth·(ctx − 6)), as in the reference
// cases (BOS at 0, the query key at ctx − 1). Deterministic in `seed`.
Expected<std::vector<NeedleCase>> generate_needle_cases(const NeedleGenSpec& spec);

// One scored case.
struct NeedleResult {
  int32_t predicted = 0;
  bool correct = false;
  double p_answer = 0.0;       // softmax probability of the answer
  double logit_margin = 0.0;   // answer logit − best other logit (> 0 iff correct, ties aside)
  double seconds = 0.0;
};
NeedleResult score_needle(const NeedleCase& c, const float* logits, int64_t n_vocab);

// Correct / total per (ctx, depth), for one configuration.
struct NeedleTable {
  std::map<std::pair<int64_t, double>, std::pair<int, int>> cells;  // (ctx, depth) → (correct, total)
  int correct = 0, total = 0;
  void add(const NeedleCase& c, bool ok);
};

}  // namespace sustain::eval

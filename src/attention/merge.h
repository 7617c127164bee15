// Internal: the unnormalized online-softmax state of a work item's rows, as
// laid out in attend()'s workspace, and the split-KV (flash-decoding) merge
// of two such states over disjoint key ranges. The scalar reference is
// merge_ref (ref.h).
#pragma once

#include <cstddef>

#include "attention/kernel.h"

namespace sustain::attention::detail {

// A softmax state for `rows` rows (kernel.h Item): o[rows * dv] the sums
// exp(s - m) v, m[rows] the running maxima, l[rows] the sums exp(s - m).
struct State {
  float* o;
  float* m;
  float* l;
};

// Floats of one state: o, then m, then l, each 64-byte aligned.
inline size_t state_floats(int rows, int dv) {
  return round_up_floats(size_t(rows) * dv) + 2 * round_up_floats(size_t(rows));
}
inline State state_at(float* base, int rows, int dv) {
  float* m = base + round_up_floats(size_t(rows) * dv);
  return {base, m, m + round_up_floats(size_t(rows))};
}

// Folds s (another chunk of keys of the same rows) into acc, rows [0, rows):
// M = max(m_a, m_s), l = l_a e^(m_a - M) + l_s e^(m_s - M), o likewise. A row
// with s.l == 0 (the chunk saw none of its keys) is left as it is.
void merge_state(const State& acc, const State& s, int rows, int dv);

}  // namespace sustain::attention::detail

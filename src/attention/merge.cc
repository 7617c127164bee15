// The split-KV merge of partial softmax states (merge.h). attend() runs it
// once per split block after all items are done, on the calling thread.
#include "attention/merge.h"

#include <algorithm>
#include <cmath>

namespace sustain::attention::detail {

void merge_state(const State& acc, const State& s, int rows, int dv) {
  for (int r = 0; r < rows; ++r) {
    if (s.l[r] == 0.0f) continue;  // the chunk saw no key of this row
    const float m = std::max(acc.m[r], s.m[r]);
    const float fa = std::exp(acc.m[r] - m), fs = std::exp(s.m[r] - m);
    float* oa = acc.o + size_t(r) * dv;
    const float* os = s.o + size_t(r) * dv;
    for (int k = 0; k < dv; ++k) oa[k] = oa[k] * fa + os[k] * fs;
    acc.l[r] = acc.l[r] * fa + s.l[r] * fs;
    acc.m[r] = m;
  }
}

}  // namespace sustain::attention::detail

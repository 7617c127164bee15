// Scalar reference attention: plain softmax over K/V rows dequantized with
// the tensor/ reference dequantizers, in double, and the split-KV merge of
// partial softmax states. The oracles attend() and its merge (merge.h) are
// tested against; slow, for tests and tools only.
#pragma once

#include <vector>

#include "attention/attention.h"
#include "kv/kv_cache.h"

namespace sustain::attention {

// Same contract as attend(), out in double: [n_q, n_head, head_dim_v].
void attend_ref(const kv::KvCache& cache, int layer, const AttnParams& p,
                const std::vector<QueryInfo>& queries, const float* q, double* out);

// One row's partial softmax state over a chunk of its keys, as a split work
// item leaves it: m the chunk's largest score, l = sum exp(s - m) and o[dv]
// = sum exp(s - m) v over the chunk. l == 0: the chunk saw none of the row's
// keys (m and o are then unused).
struct PartialState {
  double m = 0.0;
  double l = 0.0;
  std::vector<double> o;
};

// The split-KV merge in double: a row's attention output from its chunks'
// states, sum_c o_c e^(m_c - M) / sum_c l_c e^(m_c - M) with M the largest
// m_c of the chunks that saw a key; dv zeros where none did.
std::vector<double> merge_ref(const std::vector<PartialState>& chunks, int dv);

}  // namespace sustain::attention

// Scalar reference attention: plain softmax over K/V rows dequantized with
// the tensor/ reference dequantizers, in double. The oracle attend() is
// tested against; slow, for tests and tools only.
#pragma once

#include <vector>

#include "attention/attention.h"
#include "kv/kv_cache.h"

namespace sustain::attention {

// Same contract as attend(), out in double: [n_q, n_head, head_dim_v].
void attend_ref(const kv::KvCache& cache, int layer, const AttnParams& p,
                const std::vector<QueryInfo>& queries, const float* q, double* out);

}  // namespace sustain::attention

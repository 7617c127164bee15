// Random K/V rows written straight into a sequence's pages, and a random
// recurrent state: what timing a step at depth needs without a prefill.
// Attention's cost does not depend on the values it reads, so a cache
// filled this way to 32K costs seconds where a real prefill of a 1B model
// takes many minutes on 2 cores (bench_depth --fill random, the verify-cost
// curve of `sustain bench`).
#pragma once

#include <cstdint>

#include "kv/kv_cache.h"

namespace sustain::kv {

// Reserves t up to `depth` tokens and stores random rows (unit normal, drawn
// from `seed`) at positions [t.n_tokens, depth) of every layer; a hybrid's
// state slot gets small random values at position `depth`. Rows repeat with
// a period of 61 positions: the values do not change the cost, and drawing
// fresh ones for every position of a deep cache costs more than storing them.
Status fill_random(KvCache& cache, PageTable& t, int64_t depth, uint64_t seed);

}  // namespace sustain::kv

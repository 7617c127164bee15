// `--repack`: the weights of the formats that have a row-tile layout
// (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K; tensor/row_tiles.h) repacked once at load into groups
// of 16 rows, which matmul then reads in place for every token count. On
// AVX-512 VNNI CPUs that makes one-token decode and small batches (batched
// decode, speculative verification) faster on those formats; the cost is
// a pass over those weights at load and their mapped pages exchanged for
// anonymous memory of the same size (docs/kernels.md "Repacked weights").
// A model's other formats (Q5_K, Q3_K, F16, ...) are left as they are.
//
// Process-wide, as batch invariance: the engine sets it from EngineConfig::
// repack before it loads anything (draft models and the ranks of a --split
// job load under the same setting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sustain {

namespace kernels {
struct WeightView;
}
struct ModelWeights;

// The mapped pages wholly inside a matrix's rows go back to the page cache
// (MADV_DONTNEED): for a copy made at load (a rank's share, a repacked
// matrix) the process then holds the copy and not the file's pages too.
void hand_back_pages(const kernels::WeightView& v);

void set_weight_repack(bool on);
bool weight_repack();

struct RepackReport {
  int64_t matrices = 0;  // repacked
  int64_t bytes = 0;     // their bytes
  int64_t kept = 0;      // matrices left in rows (a format without tiles)
  std::string skipped;   // why nothing was repacked, when that is so
};

// Repacks every matrix of `w` that the CPU can read repacked, its copy
// kept in `store`, the mapped pages of its rows handed back.
RepackReport repack_weights(ModelWeights& w, std::vector<std::unique_ptr<uint8_t[]>>& store);

}  // namespace sustain

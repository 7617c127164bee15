// The machine's roofline inputs, measured with the configured threads:
// sustained memory read bandwidth (a buffer far larger than the last-level
// cache, read by every thread with SIMD loads) and peak f32 FMA throughput.
#pragma once

#include <cstddef>
#include <vector>

#include "base/status.h"

namespace sustain::bench {

struct BandwidthResult {
  int threads = 0;
  size_t buffer_bytes = 0;
  std::vector<double> read_gbps;  // one sample per repetition (1 GB = 1e9 bytes)
  double read_gbps_best = 0.0, read_gbps_median = 0.0;
  std::vector<double> fma_gflops;  // f32, one sample per repetition
  double fma_gflops_best = 0.0, fma_gflops_median = 0.0;
};

// kInvalidArgument for threads < 1 or a buffer under 64 MiB; kOutOfMemory
// naming the bytes when the buffer cannot be allocated.
Expected<BandwidthResult> measure_bandwidth(int threads, size_t buffer_bytes = size_t(1) << 30,
                                            int reps = 5);

}  // namespace sustain::bench

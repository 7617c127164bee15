// The machine a report was measured on, and the process's memory use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sustain::bench {

struct CpuInfo {
  std::string model;                  // /proc/cpuinfo "model name" (or "unknown")
  int logical_cpus = 0;               // processors listed in /proc/cpuinfo
  int usable_threads = 0;             // what this process may run on (affinity)
  std::vector<std::string> features;  // the SIMD flags that matter here, as the kernel spells them
  std::string simd_target;            // the Highway target the kernels dispatch to
};

// Parses /proc/cpuinfo text (exposed for tests; `features` keeps only the
// flags in kSimdFlags, in that order).
CpuInfo parse_cpuinfo(const std::string& text);
CpuInfo cpu_info();
extern const char* const kSimdFlags[];

// Peak resident set size of this process in bytes (VmHWM, else getrusage).
int64_t peak_rss_bytes();
// Current resident set size in bytes (VmRSS), 0 when unknown.
int64_t current_rss_bytes();
// Resets the peak-RSS watermark where the kernel allows it (Linux ≥ 4.0:
// writing 5 to /proc/self/clear_refs); false when it could not.
bool reset_peak_rss();

// Total physical memory (bytes), 0 when unknown.
int64_t total_memory_bytes();

}  // namespace sustain::bench

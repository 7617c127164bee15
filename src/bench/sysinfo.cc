#include "bench/sysinfo.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "base/thread_pool.h"
#include "hwy/targets.h"

namespace sustain::bench {

const char* const kSimdFlags[] = {"sse4_2",      "avx",         "f16c",     "fma",
                                  "avx2",        "avx512f",     "avx512bw", "avx512vl",
                                  "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
                                  "asimd",       "asimddp",     "sve",      nullptr};

CpuInfo parse_cpuinfo(const std::string& text) {
  CpuInfo c;
  std::set<std::string> flags;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string val = line.substr(colon + 1);
    if (!val.empty() && val.front() == ' ') val.erase(0, 1);
    if (key == "processor") ++c.logical_cpus;
    if (key == "model name" && c.model.empty()) c.model = val;
    // x86 says "flags", Arm "Features".
    if ((key == "flags" || key == "Features") && flags.empty()) {
      std::istringstream fs(val);
      std::string f;
      while (fs >> f) flags.insert(f);
    }
  }
  if (c.model.empty()) c.model = "unknown";
  for (int i = 0; kSimdFlags[i]; ++i)
    if (flags.count(kSimdFlags[i])) c.features.push_back(kSimdFlags[i]);
  return c;
}

CpuInfo cpu_info() {
  std::ifstream f("/proc/cpuinfo");
  std::stringstream ss;
  ss << f.rdbuf();
  CpuInfo c = parse_cpuinfo(ss.str());
  c.usable_threads = ThreadPool::hardware_threads();
  // The best target this CPU supports among those Highway knows: what the
  // kernels' dynamic dispatch picks when it is compiled in.
  const int64_t supported = hwy::SupportedTargets();
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t t = int64_t{1} << bit;
    if (supported & t) {
      c.simd_target = hwy::TargetName(t);
      break;
    }
  }
  return c;
}

namespace {

// A "Key:   123 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(k, 0) == 0) {
      std::istringstream v(line.substr(k.size()));
      int64_t kb = -1;
      v >> kb;
      return kb < 0 ? -1 : kb * 1024;
    }
  }
  return -1;
}

}  // namespace

int64_t peak_rss_bytes() {
  const int64_t hwm = status_kb("VmHWM");
  if (hwm >= 0) return hwm;
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) return static_cast<int64_t>(ru.ru_maxrss) * 1024;
  return 0;
}

int64_t current_rss_bytes() {
  const int64_t v = status_kb("VmRSS");
  return v < 0 ? 0 : v;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

int64_t total_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace sustain::bench

#include "bench/conditions.h"

#include <sys/utsname.h>

#include <ctime>

#include <fmt/format.h>

#include "bench/report.h"
#include "bench/sysinfo.h"
#include "bench/workloads.h"

namespace sustain::bench {

using nlohmann::json;

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

json new_report(const std::string& command_line) {
  return {{"schema", kReportSchema},
          {"schema_version", kReportSchemaVersion},
          {"created_utc", utc_now("%Y-%m-%dT%H:%M:%SZ")},
          {"command_line", command_line},
          {"metrics", metric_definitions()},
          {"notes", json::array()},
          {"ladder", json::array()}};
}

json machine_conditions() {
  const CpuInfo c = cpu_info();
  utsname u{};
  std::string os = "unknown";
  if (uname(&u) == 0) os = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  return {{"cpu_model", c.model},
          {"logical_cpus", c.logical_cpus},
          {"usable_threads", c.usable_threads},
          {"features", c.features},
          {"simd_target", c.simd_target},
          {"memory_bytes", total_memory_bytes()},
          {"os", os}};
}

// SUSTAIN_VERSION and SUSTAIN_GIT_COMMIT are defined for this file alone
// (CMakeLists.txt), so a new commit recompiles only it.
json build_conditions() {
#ifdef NDEBUG
  const char* type = "release (NDEBUG)";
#else
  const char* type = "debug (assertions on)";
#endif
  return {{"version", SUSTAIN_VERSION},
          {"git_commit", SUSTAIN_GIT_COMMIT},
          {"build_type", type},
          {"compiler", __VERSION__}};
}

json sampler_conditions(uint64_t seed, const BenchChain& chain) {
  json j;
  if (chain.temperature > 0.0f) {
    j = {{"temperature", chain.temperature},
         {"top_k", chain.top_k},
         {"top_p", chain.top_p},
         {"min_p", chain.min_p},
         {"ignore_eos", true},
         {"prompt_seed", seed},
         {"sampler_seed", "per request, from the prompt seed"}};
  } else {
    j = {{"temperature", 0.0}, {"top_k", 0},         {"top_p", 1.0},
         {"min_p", 0.0},       {"ignore_eos", true}, {"prompt_seed", seed}};
  }
  // The alternatives each token's logprob came with; null: no logprobs.
  j["top_logprobs"] = chain.top_logprobs >= 0 ? json(chain.top_logprobs) : json();
  return j;
}

}  // namespace sustain::bench

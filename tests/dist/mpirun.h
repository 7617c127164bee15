// What the tests that run the real binary under mpirun share: whether this
// build can, the launcher line as CI runs it, and finding a rank's process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dist/comm.h"
#include "test_util.h"

namespace sustain::test {

inline bool have_mpirun() {
  return dist::mpi_built() && std::string(SUSTAIN_MPIEXEC).size() > 0;
}

#define SUSTAIN_REQUIRE_MPIRUN_ONLY()                                        \
  do {                                                                       \
    if (!have_mpirun()) GTEST_SKIP() << "no MPI in this build or no mpirun"; \
  } while (0)
// The tests of reference models need ../shared too.
#define SUSTAIN_REQUIRE_MPIRUN()   \
  do {                             \
    SUSTAIN_REQUIRE_REF();         \
    SUSTAIN_REQUIRE_MPIRUN_ONLY(); \
  } while (0)

// mpirun as CI runs it: as root, more ranks than cores, no core binding
// (other jobs share the cores), shared memory only (every rank is on this
// host; the TCP transport measured 2-4x slower to start here), without
// single-copy (containers often forbid the ptrace it needs); `timeout` turns
// a hang into a failure.
inline std::string mpirun(int np) {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 120 " +
         std::string(SUSTAIN_MPIEXEC) +
         " --oversubscribe --bind-to none --mca btl self,vader -np " + std::to_string(np) + " ";
}

// The parent of process `pid`, or -1.
inline pid_t parent_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string state;
  pid_t ppid = -1;
  // comm may hold spaces; it is in parentheses, and the state follows it.
  std::string line;
  if (!std::getline(stat, line)) return -1;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 1));
  return (rest >> state >> ppid) ? ppid : -1;
}

// The process that is rank `rank` of an MPI job started below `root` (the
// test's own job: other tests may run mpirun at the same time), or -1.
inline pid_t rank_below(pid_t root, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    bool below = false;
    for (pid_t p = parent_of(pid), hops = 0; p > 1 && hops < 16; p = parent_of(p), ++hops)
      if (p == root) {
        below = true;
        break;
      }
    if (!below) continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var == want) return pid;
  }
  return -1;
}

// Whether `pid` has ended (or is a zombie awaiting its reaper) within 2 s.
inline bool gone_soon(pid_t pid) {
  for (int i = 0; i < 40; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string p, comm, state;
    if (!(stat >> p >> comm >> state) || state == "Z" || state == "X") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace sustain::test

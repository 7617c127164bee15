// Ranks of one job: the processes a launcher (mpirun) started, which run one
// model together (docs/split.md). Comm is the small interface the rest of
// sustain sees — who am I, how many are we, send / receive activations,
// broadcast a step, all-reduce partial sums — so nothing outside dist/
// includes MPI, and a build without MPI still compiles and runs one rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace sustain::dist {

// How this process was started, read from the launcher's environment
// without starting any transport (OpenMPI's OMPI_COMM_WORLD_*, or the
// PMI_* / PMIX_* variables other launchers set).
struct Launch {
  int rank = 0;
  int size = 1;
  bool under_launcher = false;  // any launcher variable was found
};
Launch launch_from_env();

// True when this build has the MPI transport (CMake option SUSTAIN_MPI).
bool mpi_built();

// What a rank's transport has done: payload bytes it sent or received
// (for a collective, the bytes of its own buffer that crossed to or from
// other ranks) and the wall time spent inside transport calls (waiting for
// the other ranks included).
struct Traffic {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  double seconds = 0.0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Point to point, in order between each pair of ranks. Blocks until the
  // buffer may be reused (send) or holds the message (recv).
  virtual Status send(int to, const void* data, size_t bytes) = 0;
  virtual Status recv(int from, void* data, size_t bytes) = 0;
  // Every rank passes a buffer of the same size; afterwards each holds root's.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `n` floats replaced by their sum over all ranks.
  virtual Status all_reduce_sum(float* data, size_t n) = 0;
  // Rank r's bytes[r] bytes from its `own`, every rank's in rank order, into
  // `all` (the sum of bytes) on every rank.
  virtual Status all_gather(const void* own, void* all, const std::vector<size_t>& bytes) = 0;
  const Traffic& traffic() const { return traffic_; }
  // Ends every rank of the job at once: a rank that cannot go on must not
  // leave the others waiting for a message that will never come.
  [[noreturn]] virtual void abort(int exit_code) = 0;

 protected:
  Traffic traffic_;
};

// One rank and no transport: what a run outside a launcher gets.
std::unique_ptr<Comm> local_comm();

// Starts MPI (once per process) and returns its world; kUnsupported naming
// the CMake option when the build has no MPI. Runtime errors of MPI stay
// fatal (its default handler aborts the whole job), which is what turns a
// rank that dies into every rank exiting instead of hanging.
Expected<std::unique_ptr<Comm>> mpi_comm();

// Broadcasts a vector from root: its size first, then its elements.
template <typename T>
Status broadcast_vector(Comm& c, std::vector<T>& v, int root) {
  uint64_t n = v.size();
  SUSTAIN_TRY(c.broadcast(&n, sizeof n, root));
  if (c.rank() != root) v.resize(static_cast<size_t>(n));
  return n ? c.broadcast(v.data(), n * sizeof(T), root) : Status::ok();
}

}  // namespace sustain::dist

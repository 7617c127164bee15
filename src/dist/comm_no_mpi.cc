// A build configured with -DSUSTAIN_MPI=OFF: one rank only, and a clear
// error wherever ranks are asked for.
#include "dist/comm.h"

namespace sustain::dist {

bool mpi_built() {
  return false;
}

Expected<std::unique_ptr<Comm>> mpi_comm() {
  return error(Code::kUnsupported,
               "this build of sustain has no MPI (it was configured with -DSUSTAIN_MPI=OFF or "
               "without libopenmpi-dev); rebuild with MPI to run over several ranks");
}

}  // namespace sustain::dist

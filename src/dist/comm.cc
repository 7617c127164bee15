#include "dist/comm.h"

#include <cstdlib>
#include <cstring>

namespace sustain::dist {
namespace {

// A launcher variable as a non-negative int, or -1 when absent or malformed.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 0 && n < (1L << 24)) ? static_cast<int>(n) : -1;
}

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status send(int to, const void*, size_t) override {
    return error(Code::kInvalidArgument, "send to rank {} in a job of one rank", to);
  }
  Status recv(int from, void*, size_t) override {
    return error(Code::kInvalidArgument, "receive from rank {} in a job of one rank", from);
  }
  Status broadcast(void*, size_t, int) override { return Status::ok(); }
  Status all_reduce_sum(float*, size_t) override { return Status::ok(); }
  Status all_gather(const void* own, void* all, const std::vector<size_t>& bytes) override {
    if (bytes.size() != 1)
      return error(Code::kInvalidArgument, "all-gather of {} parts in a job of one rank",
                   bytes.size());
    if (bytes[0]) std::memmove(all, own, bytes[0]);
    return Status::ok();
  }
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }
};

}  // namespace

Launch launch_from_env() {
  // OpenMPI first (what scripts/setup.sh installs), then the PMI names that
  // MPICH / Slurm / PMIx launchers export.
  static const char* const kPairs[][2] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMIX_RANK", "PMIX_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
  };
  Launch l;
  for (const auto& p : kPairs) {
    const int r = env_int(p[0]), s = env_int(p[1]);
    if (r >= 0 || s >= 0) l.under_launcher = true;
    if (r >= 0 && s > r) {
      l.rank = r;
      l.size = s;
      return l;
    }
  }
  return l;
}

std::unique_ptr<Comm> local_comm() {
  return std::make_unique<LocalComm>();
}

}  // namespace sustain::dist

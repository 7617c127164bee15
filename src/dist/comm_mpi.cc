// The MPI transport (compiled only with SUSTAIN_MPI). MPI's default error
// handler, MPI_ERRORS_ARE_FATAL, is kept on purpose: when a peer dies, the
// next call that needs it fails and the launcher ends the whole job, so no
// rank is left waiting (tests/dist/ kills a rank to check this).
#include <mpi.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>

#include "dist/comm.h"

namespace sustain::dist {
namespace {

// MPI counts are ints: larger messages go in pieces of at most 1 GiB.
constexpr size_t kMaxPiece = size_t{1} << 30;

// How long a wait spins (polling MPI) before it starts to sleep, in µs:
// SUSTAIN_MPI_SPIN_US, default 200.
long spin_budget_us() {
  static const long us = [] {
    const char* v = std::getenv("SUSTAIN_MPI_SPIN_US");
    char* end = nullptr;
    const long n = v ? std::strtol(v, &end, 10) : -1;
    return v && *end == '\0' && n >= 0 && n <= 10'000'000 ? n : 200L;
  }();
  return us;
}

// Waits for a request without holding a core for long: OpenMPI's blocking
// calls spin, and a rank that waits for its turn in the pipeline (most of
// the time, in layer-split decode) would take a core from the rank that
// computes when they share a host. The tensor split's waits are short (the
// ranks meet at two all-reduces a block, a few µs apart), and a sleep there
// costs a timer's slack (~50 µs) every time: 16 ms a token over 32
// all-reduces on Llama 3.2 1B, against 2.7 ms spinning. So a wait spins for
// the spin budget, then sleeps in steps growing to 100 µs — and to 2 ms once
// it has waited 50 ms: a follower of a server with nothing to do, or of a
// bench row that runs on rank 0 alone, would otherwise wake 10 000 times a
// second beside the rank that works (a new request then waits up to 2 ms
// more for the followers).
int wait_sleeping(MPI_Request* req, MPI_Status* st) {
  int done = 0;
  if (int rc = MPI_Test(req, &done, st); rc != MPI_SUCCESS || done) return rc;
  const auto t0 = std::chrono::steady_clock::now();
  const auto budget = std::chrono::microseconds(spin_budget_us());
  for (int i = 1; !done; ++i) {
    if (int rc = MPI_Test(req, &done, st); rc != MPI_SUCCESS) return rc;
    if (i % 32 == 0 && std::chrono::steady_clock::now() - t0 >= budget) break;
  }
  long ns = 5000, cap = 100000;
  while (!done) {
    const timespec ts{0, ns};
    nanosleep(&ts, nullptr);
    if (cap < 2000000 && std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(50))
      cap = 2000000;
    ns = std::min(ns * 2, cap);
    if (int rc = MPI_Test(req, &done, st); rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

// Counts one transport call into a Traffic: its bytes and its wall time.
class Counted {
 public:
  Counted(Traffic& t, size_t bytes) : t_(t), t0_(std::chrono::steady_clock::now()) {
    ++t_.calls;
    t_.bytes += bytes;
  }
  ~Counted() {
    t_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  Traffic& t_;
  std::chrono::steady_clock::time_point t0_;
};

class MpiComm final : public Comm {
 public:
  MpiComm(int rank, int size, bool owns) : rank_(rank), size_(size), owns_(owns) {}
  ~MpiComm() override {
    int done = 0;
    MPI_Finalized(&done);
    if (owns_ && !done) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status send(int to, const void* data, size_t bytes) override {
    SUSTAIN_TRY(check_peer(to, "send to"));
    Counted count(traffic_, bytes);
    const auto* p = static_cast<const char*>(data);
    for (size_t off = 0; off < bytes || off == 0; off += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, bytes - off));
      MPI_Request req;
      if (MPI_Isend(p + off, n, MPI_BYTE, to, kTag, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
          wait_sleeping(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return error(Code::kIo, "MPI: send of {} bytes to rank {} failed", bytes, to);
      if (bytes == 0) break;
    }
    return Status::ok();
  }

  Status recv(int from, void* data, size_t bytes) override {
    SUSTAIN_TRY(check_peer(from, "receive from"));
    Counted count(traffic_, bytes);
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes || off == 0; off += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, bytes - off));
      MPI_Status st;
      MPI_Request req;
      if (MPI_Irecv(p + off, n, MPI_BYTE, from, kTag, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
          wait_sleeping(&req, &st) != MPI_SUCCESS)
        return error(Code::kIo, "MPI: receive of {} bytes from rank {} failed", bytes, from);
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      // Both sides run the same step, so a size mismatch is a bug, not noise.
      if (got != n)
        return error(Code::kInternal, "MPI: rank {} sent {} bytes where {} were expected", from,
                     got, n);
      if (bytes == 0) break;
    }
    return Status::ok();
  }

  Status broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= size_)
      return error(Code::kInvalidArgument, "broadcast from rank {} of {}", root, size_);
    Counted count(traffic_, bytes);
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, bytes - off));
      MPI_Request req;
      if (MPI_Ibcast(p + off, n, MPI_BYTE, root, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
          wait_sleeping(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return error(Code::kIo, "MPI: broadcast of {} bytes from rank {} failed", bytes, root);
    }
    return Status::ok();
  }

  Status all_reduce_sum(float* data, size_t n) override {
    Counted count(traffic_, n * sizeof(float));
    for (size_t off = 0; off < n; off += kMaxPiece / sizeof(float)) {
      const int k = static_cast<int>(std::min(kMaxPiece / sizeof(float), n - off));
      MPI_Request req;
      if (MPI_Iallreduce(MPI_IN_PLACE, data + off, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req) !=
              MPI_SUCCESS ||
          wait_sleeping(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return error(Code::kIo, "MPI: all-reduce of {} floats failed", n);
    }
    return Status::ok();
  }

  Status all_gather(const void* own, void* all, const std::vector<size_t>& bytes) override {
    if (static_cast<int>(bytes.size()) != size_)
      return error(Code::kInvalidArgument, "all-gather of {} parts over {} ranks", bytes.size(),
                   size_);
    std::vector<int> counts(bytes.size()), displs(bytes.size());
    size_t total = 0;
    for (size_t r = 0; r < bytes.size(); ++r) {
      if (total + bytes[r] > static_cast<size_t>(INT_MAX))
        return error(Code::kInvalidArgument, "all-gather of {}+ bytes: more than MPI counts",
                     total + bytes[r]);
      counts[r] = static_cast<int>(bytes[r]);
      displs[r] = static_cast<int>(total);
      total += bytes[r];
    }
    Counted count(traffic_, total - bytes[static_cast<size_t>(rank_)]);
    MPI_Request req;
    if (MPI_Iallgatherv(own, counts[static_cast<size_t>(rank_)], MPI_BYTE, all, counts.data(),
                        displs.data(), MPI_BYTE, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
        wait_sleeping(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return error(Code::kIo, "MPI: all-gather of {} bytes failed", total);
    return Status::ok();
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  static constexpr int kTag = 17;
  Status check_peer(int r, const char* what) const {
    if (r < 0 || r >= size_ || r == rank_)
      return error(Code::kInvalidArgument, "{} rank {} from rank {} of {}", what, r, rank_, size_);
    return Status::ok();
  }
  int rank_, size_;
  bool owns_;
};

}  // namespace

bool mpi_built() {
  return true;
}

Expected<std::unique_ptr<Comm>> mpi_comm() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    // One thread calls MPI at a time, but not always the main one: an
    // engine over ranks makes its calls from its step loop's thread (the
    // main thread only before it starts and after it stops). The thread
    // pool never calls MPI.
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      return error(Code::kUnavailable, "MPI_Init failed");
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<Comm>(new MpiComm(rank, size, !inited));
}

}  // namespace sustain::dist

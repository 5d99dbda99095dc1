// The MPI communicator (docs/architecture.md "Communicator", "Rules of thumb") and the process-wide
// MPI runtime. Buffers are host memory (the CPU backend's device memory is host memory).
//
// Threading: non-blocking MPI collectives only progress when polled, so this communicator owns
// ONE communication thread that runs every MPI call (collectives, broadcast, barrier, scalars)
// in the order they were issued. Non-blocking calls enqueue and return a CommRequest whose
// wait() blocks until that operation finished; blocking calls enqueue and wait. Issue all
// collectives from one thread (the engine's), in the same order on every rank. MPI is
// initialised with MPI_THREAD_SERIALIZED: only one thread is inside MPI at a time. The thread
// runs each collective as MPI's non-blocking one and polls it, sleeping between polls once it
// has waited a millisecond, so a rank waiting for a stuck one neither spins a core nor waits
// without a word (Communicator::set_wait_limits); an all-reduce of 1 MiB or more waits so in a
// barrier first and then runs MPI's blocking one, which is faster.
//
// Lifetime: MpiRuntime (in main, first) -> make_mpi_communicator() -> ... -> destroy the
// communicator -> destroy MpiRuntime (MPI_Finalize).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "zero/comm.h"

namespace zt {

// Fails fast on an MPI error code: prints the call, file:line, rank and MPI's message to stderr,
// then MPI_Abort so that no rank is left hanging. Use around every MPI call (communicators are
// set to MPI_ERRORS_RETURN so errors come back here).
#define ZT_CHECK_MPI(call)                                                                         \
  do {                                                                                             \
    int zt_mpi_rc_ = (call);                                                                       \
    if (zt_mpi_rc_ != 0 /* MPI_SUCCESS */) ::zt::mpi_fatal(zt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
[[noreturn]] void mpi_fatal(int rc, const char* call, const char* file, int line);

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun with PMI):
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or PMI_RANK is set. A plain `zerotrain train`
// without a launcher then runs as world size 1 without touching MPI.
bool launched_under_mpi();

// RAII owner of MPI_Init_thread(MPI_THREAD_SERIALIZED) / MPI_Finalize. Create one in main before
// any communicator and keep it until every communicator is destroyed. If MPI was already
// initialised by someone else (e.g. a test main), it neither initialises nor finalises.
class MpiRuntime {
 public:
  // Initialises MPI; error if the library cannot provide MPI_THREAD_SERIALIZED.
  static absl::StatusOr<std::unique_ptr<MpiRuntime>> init(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

 private:
  explicit MpiRuntime(bool owns) : owns_(owns) {}
  bool owns_;
};

// This process's world rank, for messages: MPI's once it is up, else the launcher's variables,
// else 0.
int rank_for_messages();

// True between MPI_Init and MPI_Finalize.
bool mpi_active();

// The MPI library's own name and version (MPI_Get_library_version's first line, callable
// before MPI_Init), for `zerotrain --version`: "Open MPI v4.1.4, package: Debian ...".
std::string mpi_library_version();

// Communicator over (a duplicate of) MPI_COMM_WORLD. Requires MPI initialised (MpiRuntime).
// Reductions (all_reduce, reduce_scatter) are fp32 sums only (MPI has no bf16/fp16 sum; the
// engine reduces in fp32) and abort on other dtypes; all_gather and broadcast move bytes of
// any dtype. Per-rank counts up to INT_MAX elements for reduce_scatter/all_gather.
// Nodes are those of MPI's shared-memory split (MPI_COMM_TYPE_SHARED); ranks_per_node > 0 makes
// consecutive groups of that many ranks the nodes instead (tests of hierarchical collectives
// on one machine).
absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(int ranks_per_node = 0);

// The communicator for this process: MPI when MPI is initialised, else single-process.
absl::StatusOr<std::unique_ptr<Communicator>> make_host_communicator();

// For a user error found by one rank mid-run (the others cannot be told in a collective):
// prints "error: [rank r] message" to stderr and ends every rank with exit_code (MPI_Abort), or
// std::exit(exit_code) when MPI is not running. Callable from any thread.
[[noreturn]] void abort_all_ranks(int exit_code, const std::string& message);

}  // namespace zt

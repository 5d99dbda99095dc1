// Registered by tests/CMakeLists.txt as comm_abort_np4: rank 1 finds a "user error" mid-run and
// calls abort_all_ranks while every other rank waits in a collective it will never complete.
// Passes when the job ends with exit status 2, every rank gone (tests/mpi/expect_exit.sh), and
// rank 1's message in the output.
#include <cstdio>

#include "common/status.h"
#include "zero/mpi_comm.h"

int main(int argc, char** argv) {
  auto runtime = zt::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) return 1;
  auto comm = zt::make_mpi_communicator();
  if (!comm.ok()) return 1;
  if ((*comm)->rank() == 1) {
    zt::abort_all_ranks(zt::kUserErrorExitCode, "deliberate user error found by one rank");
  }
  (*comm)->barrier();  // never completes: rank 1 does not arrive
  std::printf("unreachable: barrier completed\n");
  return 0;
}

// Registered by tests/CMakeLists.txt as comm_stuck_rank_np2 (driver: tests/mpi/stuck_rank_test.sh):
// rank 1 stops (SIGSTOP, as a rank on a hung file system or a GPU that stopped answering) while
// rank 0 waits for it in a collective. Rank 0 must say on stderr which collective it waits in,
// every report interval, and end the job (exit 2) at the timeout, without spinning a core while
// it waits: a watcher thread compares the process's CPU time with the wall time of the wait.
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "zero/mpi_comm.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);  // every thread of the process
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  auto runtime = zt::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) return 1;
  auto comm = zt::make_mpi_communicator();
  if (!comm.ok()) return 1;
  constexpr double kReport = 1, kTimeout = 8;
  (*comm)->set_wait_limits(kReport, kTimeout);
  double v[1] = {1};
  (*comm)->all_reduce_scalars(v, 1, zt::ScalarOp::kSum);  // collective #1: both ranks there
  if ((*comm)->rank() == 1) raise(SIGSTOP);
  // Over 5 s of waiting a spinning rank burns about 5 s of CPU; one that sleeps between polls
  // a few milliseconds. The bound leaves room for a loaded machine's accounting.
  std::thread watcher([] {
    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(5));
    const double cpu = cpu_seconds() - cpu0,
                 wall =
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "watcher: %.2f s of CPU over %.2f s of waiting\n", cpu, wall);
    if (cpu > wall / 5) zt::abort_all_ranks(3, "FAIL: the waiting rank spins a core");
    std::this_thread::sleep_for(std::chrono::seconds(25));
    zt::abort_all_ranks(4, "FAIL: no timeout ended the wait");
  });
  (*comm)->all_reduce_scalars(v, 1, zt::ScalarOp::kSum);  // #2: rank 1 never arrives
  std::printf("unreachable: the collective completed\n");
  watcher.join();
  return 0;
}

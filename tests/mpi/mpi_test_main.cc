// main for the multi-rank tests (run under mpirun): initialises MPI through MpiRuntime, runs
// every test on every rank. Rank 0 prints GoogleTest's usual output; other ranks print only
// their failures, prefixed with the rank, so mpirun's interleaved output stays readable. The
// exit code is nonzero on every rank if any rank failed.
#include <mpi.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "zero/mpi_comm.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto runtime = zt::MpiRuntime::init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", std::string(runtime.status().message()).c_str());
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "a rank other than 0 failed\n");
  return any_failed;
}

// Driver for misuse_test.sh: two ranks at ZeRO stage 3 fetch different units in their first
// step. The engine must notice before posting mismatched all-gathers and end every rank with
// exit code 2 and a message, instead of hanging.
#include <cstdio>
#include <exception>

#include "model/layout.h"
#include "model/transformer.h"
#include "zero/engine.h"
#include "zero/mpi_comm.h"

int main(int argc, char** argv) {
  auto mpi = zt::MpiRuntime::init(&argc, &argv);
  if (!mpi.ok()) return 1;
  auto comm = zt::make_mpi_communicator();
  if (!comm.ok()) return 1;
  auto config = zt::preset("tiny-llama");
  const zt::ParamLayout layout(*config);
  auto be = zt::make_cpu_backend(1);
  zt::EngineOptions eo;
  eo.zero.stage = 3;
  eo.zero.stage3_param_persistence_threshold = 0;
  zt::Engine engine(layout, be.get(), comm->get(), eo);
  const int unit = (*comm)->rank() == 0 ? 1 : 2;  // the ranks disagree
  try {
    engine.fetch(unit);
  } catch (const std::exception& e) {  // as the trainer's main: the message, exit code 2
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  std::printf("rank %d: fetch returned; the mismatch went unnoticed\n", (*comm)->rank());
  return 0;
}

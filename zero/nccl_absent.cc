// zero/nccl_comm.h in a build without NCCL (target zt_zero_nccl_absent): GPU collectives
// across ranks are unavailable and asking for them says why.
#include "zero/nccl_comm.h"

namespace zt {

absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& /*bootstrap*/,
                                                                     int /*device*/,
                                                                     void* /*compute_stream*/) {
  return absl::FailedPreconditionError(
      "several ranks on GPUs need NCCL, and this zerotrain was built without it (libnccl-dev "
      "or the CUDA toolkit's NCCL was not found); install NCCL and rebuild, or run one rank");
}

std::string nccl_report() { return "not built: NCCL was not found when this zerotrain was built"; }

}  // namespace zt

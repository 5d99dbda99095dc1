// model/cuda/cuda_backend.h in a build without the CUDA toolkit (target zt_cuda_absent): no
// device is visible and asking for one says why, so the trainer needs no #ifdef.
#include "model/cuda/cuda_backend.h"

namespace zt {

int cuda_device_count() { return 0; }

std::string cuda_report() { return "not built: nvcc was not found when this zerotrain was built"; }

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int /*device*/,
                                                           AttentionImpl /*attention*/) {
  return absl::FailedPreconditionError(
      "this zerotrain was built without CUDA (nvcc was not found by scripts/setup.sh); install "
      "the CUDA toolkit and rebuild, or use --device cpu");
}

}  // namespace zt

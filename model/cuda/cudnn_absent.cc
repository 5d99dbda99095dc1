// CudnnAttention::open where cuDNN cannot run: the CUDA emulation (its kernels run on the CPU),
// or a CUDA build without the cuDNN frontend's headers (model/CMakeLists.txt says which).
#include "model/cuda/cudnn_attention.h"

namespace zt {

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::open(Backend*, void*) {
  return absl::FailedPreconditionError(ZT_CUDNN_ABSENT_REASON);
}

std::string cudnn_library_report() {
  return std::string("cuDNN not built: ") + ZT_CUDNN_ABSENT_REASON;
}

}  // namespace zt

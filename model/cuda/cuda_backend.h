// The CUDA backend: same interface and same kernel families as model/cpu/, checked against the
// CPU backend by tests/unit/cuda_backend_test.cc (skipped without a GPU). GEMM via cuBLASLt.
// This header is plain C++ so that host code can create the backend without nvcc.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace zt {

// Number of CUDA devices visible to this process (0 when there is no GPU or no driver).
int cuda_device_count();
// The CUDA side of `zerotrain --version`, read at run time: the runtime built against, the
// driver, the GPUs visible (name each) and the cuDNN that loads; "not built: ..." in a build
// without nvcc, and the emulation says it is one.
std::string cuda_report();
// A backend on CUDA device `device` whose attention is `attention` (model/backend.h; kFlash,
// the default, needs nothing beyond the CUDA runtime). Errors (FailedPrecondition): the device
// does not exist or cannot be used; kCudnn where cuDNN cannot load (cudnn_attention.h).
absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(
    int device, AttentionImpl attention = AttentionImpl::kFlash);

}  // namespace zt

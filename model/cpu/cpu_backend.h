// The CPU backend: the numerical reference every CUDA kernel is checked against. OpenMP over
// rows, OpenBLAS for GEMM. One kernel family per file, same names as model/cuda/.
#pragma once

#include "common/block_cache.h"
#include "model/backend.h"

namespace zt {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string_view name() const override { return "cpu"; }

#include "model/backend_kernels.inc"  // NOLINT: memory and kernel overrides

 private:
  // Freed blocks kept for reuse (common/block_cache.h): no page faults on the step's path.
  static constexpr size_t kCacheLimit = size_t{1} << 30;
  BlockCache cache_;
};

}  // namespace zt

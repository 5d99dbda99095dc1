// The CPU backend: the numerical reference every CUDA kernel is checked against. OpenMP over
// rows, OpenBLAS for GEMM. One kernel family per file, same names as model/cuda/.
#pragma once

#include "model/backend.h"

namespace zt {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string_view name() const override { return "cpu"; }

  void* alloc(size_t bytes, MemCategory c) override;
  void free(void* p, size_t bytes, MemCategory c) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n) override;
  void synchronize() override {}

#include "model/backend_kernels.inc"  // NOLINT: the kernel overrides
};

}  // namespace zt

// The CPU backend: the numerical reference every CUDA kernel is checked against. OpenMP over
// rows, OpenBLAS for GEMM. One kernel family per file, same names as model/cuda/.
#pragma once

#include <vector>

#include "common/block_cache.h"
#include "common/status.h"
#include "model/backend.h"

namespace zt {

// The fp32 pointer of an activation argument. The CPU backend's activations are fp32
// (Backend::activation_dtype); a 16-bit one is a caller's bug and aborts here.
inline float* f32(TensorRef t) {
  ZT_CHECK(t.dtype == DType::kF32);
  return static_cast<float*>(t.data);
}
inline const float* f32(TensorView t) {
  ZT_CHECK(t.dtype == DType::kF32);
  return static_cast<const float*>(t.data);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string_view name() const override { return "cpu"; }

#include "model/backend_kernels.inc"  // NOLINT: memory and kernel overrides
  // Weight gradients stored in 16 bits are added into as stored (see grad_sum).
  DType grad_dtype(DType stored) const override { return stored; }

 private:
  // The fp32 elements of parameter view v (n of them): v's own pointer when it is fp32, else v
  // widened exactly into tmp, a workspace block. The block cache hands the same block back at
  // the next call of that size, so it costs no page faults: weights reach the kernels as stored
  // (UnitEngine::fetch_stored) and are widened one tensor at a time (the norms'), or a block of
  // rows at a time (the GEMMs, model/cpu/matmul.cc), not a unit at a time.
  // Activations stay fp32 (activation_dtype): a 16-bit weight does not round the other operand.
  const float* widen(TensorView v, size_t n, DeviceBuffer& tmp);
  // Where a kernel sums its contribution to weight gradient g (n elements): g's own memory when
  // it is fp32 (added into in place, as always), else a zeroed fp32 block of tmp, which
  // finish_grad then adds into g rounded once: the bits the engine's fold of a zeroed fp32
  // accumulator gives, without a pass over the whole unit.
  float* grad_sum(TensorRef g, size_t n, DeviceBuffer& tmp);
  void finish_grad(TensorRef g, const float* sum, size_t n);

  // Freed blocks kept for reuse (common/block_cache.h): no page faults on the step's path.
  static constexpr size_t kCacheLimit = size_t{1} << 30;
  BlockCache cache_;
};

}  // namespace zt

// The CPU backend: the numerical reference every CUDA kernel is checked against. OpenMP over
// rows, OpenBLAS for GEMM. One kernel family per file, same names as model/cuda/.
#pragma once

#include <vector>

#include "common/block_cache.h"
#include "common/status.h"
#include "model/backend.h"

namespace zt {

// The fp32 elements of parameter view v (n of them): v's own pointer when it is fp32, else a
// widened copy held in tmp. The CPU backend's kernels are fp32; 16-bit weights reach it only
// when a caller passes them (Backend::weight_dtype asks the engine for fp32).
inline const float* widen(TensorView v, size_t n, std::vector<float>& tmp) {
  if (!v || v.dtype == DType::kF32) return static_cast<const float*>(v.data);
  tmp.resize(n);
  convert(v.data, v.dtype, tmp.data(), DType::kF32, n);
  return tmp.data();
}
// x (n, fp32) rounded to t and widened back into tmp (x itself for fp32): the other operand of
// a GEMM on a 16-bit weight, as a GPU's 16-bit GEMM sees it.
inline const float* round_to(const float* x, size_t n, DType t, std::vector<float>& tmp) {
  if (t == DType::kF32) return x;
  std::vector<uint16_t> h(n);
  convert(x, DType::kF32, h.data(), t, n);
  tmp.resize(n);
  convert(h.data(), t, tmp.data(), DType::kF32, n);
  return tmp.data();
}

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

 private:
  // Freed blocks kept for reuse (common/block_cache.h): no page faults on the step's path.
  static constexpr size_t kCacheLimit = size_t{1} << 30;
  BlockCache cache_;
};

}  // namespace zt

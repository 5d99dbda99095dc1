// Shared CUDA helpers: the ZT_CHECK_CUDA / ZT_CHECK_CUBLAS macros (fail fast with file:line)
// and launch-size arithmetic.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define ZT_CHECK_CUDA(call)                                                                      \
  do {                                                                                           \
    cudaError_t zt_err_ = (call);                                                                \
    if (zt_err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "zerotrain CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(zt_err_));                                                 \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

#define ZT_CHECK_CUBLAS(call)                                                                      \
  do {                                                                                             \
    cublasStatus_t zt_st_ = (call);                                                                \
    if (zt_st_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      std::fprintf(stderr, "zerotrain cuBLAS error at %s:%d: %s: status %d\n", __FILE__, __LINE__, \
                   #call, static_cast<int>(zt_st_));                                               \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)

namespace zt {

constexpr int kThreads = 256;
inline unsigned blocks_for(size_t n, int threads = kThreads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Sum of v over the 32 lanes of a warp, broadcast to every lane.
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace zt

// Shared CUDA helpers: the ZT_CHECK_CUDA / ZT_CHECK_CUBLAS macros (fail fast with file:line)
// launch-size arithmetic and typed element access.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/dtype.h"

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

// Launches kernel k on grid x block threads with `smem` bytes of dynamic shared memory per block
// (dynamic_smem() in the kernel; over 48 KiB needs cudaFuncSetAttribute(k,
// cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first, at most 227 KiB on sm_90) on
// `stream` with `args`. Every launch is spelled this way instead of <<<>>>, so that the CUDA
// emulation (model/cuda/emu, ZT_CUDA_EMU) runs the same sources on the CPU. A launch the device
// refuses (its configuration, its shared memory) aborts here, at once, with file and line.
template <class... P, class... A>
void launch_kernel_smem(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                        A&&... args) {
#ifdef ZT_CUDA_EMU
  emu::before_work(stream);  // the emulation runs every launch at once
  emu::launch(grid, block, [&] { k(args...); }, smem, reinterpret_cast<const void*>(k));
#else
  k<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
  ZT_CHECK_CUDA(cudaGetLastError());
#endif
}
template <class... P, class... A>
void launch_kernel(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t stream, A&&... args) {
  launch_kernel_smem(k, grid, block, 0, stream, std::forward<A>(args)...);
}

// The shared memory a block may have on sm_90, static and dynamic together (the opt-in limit).
constexpr size_t kMaxBlockSmem = 227u << 10;

// A kernel's dynamic shared memory, opted in above 48 KiB. The attribute is the current
// device's, so it is set at every launch (a host call of a microsecond or so).
template <class K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > (48u << 10))
    ZT_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

// The block's dynamic shared memory (launch_kernel_smem's `smem` bytes), 16-byte aligned.
template <class T>
__device__ inline T* dynamic_smem() {
#ifdef ZT_CUDA_EMU
  return static_cast<T*>(emu::dynamic_shared());
#else
  extern __shared__ __align__(16) unsigned char zt_dynamic_smem[];
  return reinterpret_cast<T*>(zt_dynamic_smem);
#endif
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

// Element i of a buffer of dtype t, as fp32; and its store, rounding to nearest even.
__device__ inline float load_as_f32(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(p)[i]);
  }
  return 0.f;
}

__device__ inline float load_as_f32(TensorView v, size_t i) { return load_as_f32(v.data, v.dtype, i); }

__device__ inline void store_from_f32(void* p, DType t, size_t i, float v) {
  switch (t) {  // round-to-nearest-even, as common/dtype.h on the host
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case DType::kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
  }
}

// Typed activations (TensorRef/TensorView, model/backend.h): element i as fp32, and its store
// rounded once. (The host-side conversions of TensorRef are not device code: kernels index.)
__device__ inline float load_as_f32(TensorRef r, size_t i) {
  return load_as_f32(r.data, r.dtype, i);
}
__device__ inline void store_from_f32(TensorRef r, size_t i, float v) {
  store_from_f32(r.data, r.dtype, i, v);
}
// r[i] += v in fp32, rounded once: the backward's accumulation into an activation gradient.
__device__ inline void add_from_f32(TensorRef r, size_t i, float v) {
  store_from_f32(r, i, load_as_f32(r, i) + v);
}

}  // namespace zt

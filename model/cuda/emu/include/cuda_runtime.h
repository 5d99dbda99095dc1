// The CUDA runtime API as the CUDA emulation provides it (model/cuda/emu/cuda_emu.h): only
// what model/cuda/ uses. Device memory is host memory; a stream runs each call at once.
#pragma once

#include <cmath>
#include <cstddef>

#include "model/cuda/emu/cuda_emu.h"

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
using cudaError = cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;
constexpr unsigned cudaStreamNonBlocking = 1;

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);

namespace zt::emu {
// cudaMalloc calls so far (all threads): what a caching allocator saves, for tests.
long long cuda_malloc_calls();
}  // namespace zt::emu

// Device math the host library lacks.
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }

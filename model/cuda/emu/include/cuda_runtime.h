// The CUDA runtime API as the CUDA emulation provides it (model/cuda/emu/cuda_emu.h): only
// what model/cuda/ uses. Device memory is host memory. A stream runs each call at once, except
// one marked with zt::emu::defer_stream: its copies wait in a queue until the host or another
// stream waits for them (an event, a stream synchronise), so code that reads a copy's result, or
// reuses its buffer, without the wait CUDA requires sees the wrong bytes in the tests.
#pragma once

#include <cmath>
#include <cstddef>

#include "model/cuda/emu/cuda_emu.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600
};
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
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
// The host's physical memory as the device's total, and its available memory as free.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDisableTiming = 2;
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);  // cudaErrorNotReady while queued work is before it
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute, int value) {
  return zt::emu::set_max_dynamic_smem(reinterpret_cast<const void*>(kernel), value)
             ? cudaSuccess
             : cudaErrorInvalidValue;
}
constexpr unsigned cudaHostRegisterDefault = 0;
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void* p);

namespace zt::emu {
// cudaMalloc calls so far (all threads): what a caching allocator saves, for tests.
long long cuda_malloc_calls();
// Host waits for the device so far (cudaStreamSynchronize, cudaEventSynchronize; all threads):
// each one stalls a GPU's queue, so tests count them on the hot path.
long long host_waits();
// Queues the copies and memsets of stream s until something waits for them (see the top).
void defer_stream(cudaStream_t s);
// Called before work on stream s runs at once (a kernel, a GEMM): runs first what s was told
// to wait for (cudaStreamWaitEvent on a deferred stream's event).
void before_work(cudaStream_t s);
}  // namespace zt::emu

// Device math the host library lacks.
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }

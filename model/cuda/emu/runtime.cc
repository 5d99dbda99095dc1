// The CUDA runtime and cuBLASLt calls of the emulation (include/cuda_runtime.h, cublasLt.h).
#include <cstdlib>
#include <cstring>

#include "cublasLt.h"
#include "cuda_runtime.h"
#include "common/dtype.h"

#include <atomic>

namespace {
struct StreamTag {};
StreamTag g_streams[1];
std::atomic<long long> g_mallocs{0};
}  // namespace

long long zt::emu::cuda_malloc_calls() { return g_mallocs.load(); }

struct CUstream_st {};
struct cublasLtContext {};

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;  // the emulated device
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
  }
  return "unknown error";
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  ++g_mallocs;
  *p = zt::emu::device_alloc(bytes);  // cudaMalloc aligns to 256
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  zt::emu::device_free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t) {
  zt::emu::DeviceAccess access;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  zt::emu::DeviceAccess access;
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(&g_streams[0]);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  static cublasLtContext ctx;
  *h = &ctx;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new cublasLtMatmulDescOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memcpy(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &d->transa : &d->transb, buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < (int64_t)rows) return CUBLAS_STATUS_NOT_SUPPORTED;
  *l = new cublasLtMatrixLayoutOpaque_t{rows, cols, ld, type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* found) {
  *found = requested > 0 ? 1 : 0;
  if (*found) results[0] = {};
  return CUBLAS_STATUS_SUCCESS;
}

// Element i of a matrix of cuBLAS type t, as fp32 (exact).
static float element(const void* p, cudaDataType t, uint64_t i) {
  return zt::load_f32(p, t == CUDA_R_32F ? zt::DType::kF32
                         : t == CUDA_R_16BF ? zt::DType::kBF16
                                            : zt::DType::kF16, i);
}

// Column-major D (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C. A and B fp32, bf16 or
// fp16 (the same), C and D fp32, as cuBLASLt's CUBLAS_COMPUTE_32F allows.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
  const uint64_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
  const uint64_t n = tb ? b->rows : b->cols;
  if ((tb ? b->cols : b->rows) != k || dl->rows != m || dl->cols != n || c->rows != m ||
      c->cols != n || a->type != b->type || c->type != CUDA_R_32F || dl->type != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  zt::emu::DeviceAccess access;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const float* pc = static_cast<const float*>(C);
  float* pd = static_cast<float*>(D);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (uint64_t p = 0; p < k; ++p) {
        const float x = element(A, a->type, ta ? i * a->ld + p : p * a->ld + i);
        const float y = element(B, b->type, tb ? p * b->ld + j : j * b->ld + p);
        acc += (double)x * y;
      }
      const float r = al * (float)acc;
      pd[j * dl->ld + i] = be == 0.f ? r : r + be * pc[j * c->ld + i];
    }
  return CUBLAS_STATUS_SUCCESS;
}

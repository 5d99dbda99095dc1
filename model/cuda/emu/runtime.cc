// The CUDA runtime and cuBLASLt calls of the emulation (include/cuda_runtime.h, cublasLt.h).
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "cublasLt.h"
#include "cuda_runtime.h"
#include "model/cuda/gelu.cuh"

// A stream: immediate (each call runs at once, after what it was told to wait for), or deferred
// (calls queue, numbered, and run in order when waited for).
struct CUstream_st {
  int device = zt::emu::current_device();  // the device current where it was created
  bool deferred = false;
  std::deque<std::pair<uint64_t, std::function<void()>>> queue;
  uint64_t queued = 0;
};
// An event: the point of its stream's queue it was recorded at (0 on an immediate stream: done).
struct CUevent_st {
  int device = zt::emu::current_device();
  CUstream_st* stream = nullptr;
  uint64_t seq = 0;
};

namespace {
std::atomic<long long> g_mallocs{0};
std::atomic<long long> g_host_waits{0};
// One lock for every stream: queued work may run on whichever host thread waits for it.
std::recursive_mutex g_streams_mu;

void run_until(CUstream_st* s, uint64_t seq) {
  while (!s->queue.empty() && s->queue.front().first <= seq) {
    auto work = std::move(s->queue.front().second);
    s->queue.pop_front();
    work();
  }
}
// Runs `work` on stream s now, or queues it when s is deferred.
void on_stream(cudaStream_t s, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(g_streams_mu);
  if (s && s->deferred) {
    s->queue.emplace_back(++s->queued, std::move(work));
    return;
  }
  work();
}
}  // namespace

long long zt::emu::cuda_malloc_calls() { return g_mallocs.load(); }
static std::atomic<long long> g_heuristic_calls{0};
long long zt::emu::cublaslt_heuristic_calls() { return g_heuristic_calls.load(); }
static std::atomic<long long> g_gelu_epilogues{0};
long long zt::emu::cublaslt_gelu_epilogues() { return g_gelu_epilogues.load(); }
long long zt::emu::host_waits() { return g_host_waits.load(); }
void zt::emu::defer_stream(cudaStream_t s) { s->deferred = true; }
void zt::emu::before_work(cudaStream_t s) {
  if (s && s->device != current_device()) {
    std::fprintf(stderr,
                 "CUDA emulation: a launch on a stream of GPU %d from a host thread whose current "
                 "device is GPU %d (a GPU refuses it; cudaSetDevice on this thread first)\n",
                 s->device, current_device());
    std::abort();
  }
}

struct cublasLtContext {};

cudaError_t cudaGetDeviceCount(int* n) {
  *n = zt::emu::device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= zt::emu::device_count()) return cudaErrorInvalidDevice;
  zt::emu::set_current_device(device);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = zt::emu::current_device();
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  }
  return "unknown error";
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  ++g_mallocs;
  *p = zt::emu::device_alloc(bytes);  // cudaMalloc aligns to 256
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  *total_bytes = (size_t)sysconf(_SC_PHYS_PAGES) * page;
  *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * page;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  zt::emu::device_free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (zt::emu::strict_enabled()) {  // each side where its kind says, inside its allocation
    const bool to_device = kind == cudaMemcpyDefault ? zt::emu::is_device_pointer(dst)
                           : kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool from_device = kind == cudaMemcpyDefault ? zt::emu::is_device_pointer(src)
                             : kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    zt::emu::check_range(dst, bytes, to_device, "cudaMemcpyAsync's destination");
    zt::emu::check_range(src, bytes, from_device, "cudaMemcpyAsync's source");
  }
  if (bytes)
    on_stream(s, [=] {
      zt::emu::DeviceAccess access;
      std::memmove(dst, src, bytes);
    });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  zt::emu::check_range(p, bytes, true, "cudaMemsetAsync");
  if (bytes)
    on_stream(s, [=] {
      zt::emu::DeviceAccess access;
      std::memset(p, value, bytes);
    });
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  cudaStreamSynchronize(s);
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  ++g_host_waits;
  std::lock_guard<std::recursive_mutex> lock(g_streams_mu);
  if (s) run_until(s, s->queued);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  // Event and stream of different devices, or the default stream of another device than the
  // event's: a GPU refuses the record.
  if (e->device != (s ? s->device : zt::emu::current_device()))
    return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::recursive_mutex> lock(g_streams_mu);
  e->stream = s;
  e->seq = s && s->deferred ? s->queued : 0;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  ++g_host_waits;
  std::lock_guard<std::recursive_mutex> lock(g_streams_mu);
  if (e->stream && e->seq) run_until(e->stream, e->seq);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_streams_mu);
  const CUstream_st* s = e->stream;
  const bool pending = s && e->seq && !s->queue.empty() && s->queue.front().first <= e->seq;
  return pending ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_streams_mu);
  CUstream_st* other = e->stream;
  const uint64_t seq = e->seq;
  if (!other || !seq || other == s) return cudaSuccess;  // done, or in s's own order
  // An immediate stream runs what it waits for now: everything queued on it later comes after
  // (and a host thread reading device memory after the wait, as MPI does here, sees it too).
  if (s && s->deferred)
    s->queue.emplace_back(++s->queued, [other, seq] { run_until(other, seq); });
  else
    run_until(other, seq);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void*, size_t, unsigned) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }

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
  auto set = [&](auto& field) {
    if (bytes != sizeof field) return CUBLAS_STATUS_NOT_SUPPORTED;
    std::memcpy(&field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(d->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(d->aux_ld);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(d->bias_type);
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
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
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  const int i = attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
  if (i >= 0 && i < 4) {
    if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_NOT_SUPPORTED;
    std::memcpy(&p->min_alignment[i], buf, bytes);
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* found) {
  ++g_heuristic_calls;
  bool aligned = true;
  for (uint32_t a : p->min_alignment) aligned = aligned && a >= 4;
  *found = requested > 0 && aligned ? 1 : 0;
  if (!aligned) return CUBLAS_STATUS_NOT_SUPPORTED;  // as cuBLASLt may answer none
  if (*found) results[0] = {};
  return CUBLAS_STATUS_SUCCESS;
}

static zt::DType dtype_of(cudaDataType t) {
  return t == CUDA_R_32F ? zt::DType::kF32 : t == CUDA_R_16BF ? zt::DType::kBF16 : zt::DType::kF16;
}
// Element i of a matrix of cuBLAS type t, as fp32 (exact).
static float element(const void* p, cudaDataType t, uint64_t i) {
  return zt::load_f32(p, dtype_of(t), i);
}

// Column-major D (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C (+ bias, a vector of m
// elements of D's type broadcast over the columns, with CUBLASLT_EPILOGUE_BIAS): products summed
// in double, the beta C term and the bias added in fp32, stored rounded to D's dtype. A and B fp32,
// bf16 or fp16 (the same); C and D (the same) fp32 or A's dtype, as cuBLASLt's CUBLAS_COMPUTE_32F
// allows.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  zt::emu::before_work(stream);
  const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
  const uint64_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
  const uint64_t n = tb ? b->rows : b->cols;
  if ((tb ? b->cols : b->rows) != k || dl->rows != m || dl->cols != n || c->rows != m ||
      c->cols != n || a->type != b->type || c->type != dl->type ||
      (dl->type != CUDA_R_32F && dl->type != a->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const cublasLtEpilogue_t ep = d->epilogue;
  const bool bias = ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu = ep == CUBLASLT_EPILOGUE_GELU_AUX || ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = ep == CUBLASLT_EPILOGUE_DGELU;
  if ((ep != CUBLASLT_EPILOGUE_DEFAULT && !bias && !gelu && !dgelu) || (bias && !d->bias) ||
      (d->bias_type != -1 && d->bias_type != dl->type) ||
      (bias && reinterpret_cast<uintptr_t>(d->bias) % 16 != 0) ||  // as a GPU kernel may need
      ((gelu || dgelu) && (!d->aux || d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)m)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  zt::emu::DeviceAccess access;
  if (gelu || dgelu) ++g_gelu_epilogues;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (uint64_t p = 0; p < k; ++p) {
        const float x = element(A, a->type, ta ? i * a->ld + p : p * a->ld + i);
        const float y = element(B, b->type, tb ? p * b->ld + j : j * b->ld + p);
        acc += (double)x * y;
      }
      const float r = al * (float)acc;
      float out = be == 0.f ? r : r + be * element(C, c->type, j * c->ld + i);
      if (bias) out += element(d->bias, dl->type, i);  // broadcast over the columns
      if (gelu) {
        zt::store_f32(d->aux, dtype_of(dl->type), j * d->aux_ld + i, out);
        out = zt::gelu_tanh(out);
      } else if (dgelu) {
        out *= zt::gelu_tanh_grad(element(d->aux, dl->type, j * d->aux_ld + i));
      }
      zt::store_f32(D, dtype_of(dl->type), j * dl->ld + i, out);
    }
  return CUBLAS_STATUS_SUCCESS;
}

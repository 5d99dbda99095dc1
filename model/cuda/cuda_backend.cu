// CUDA backend: device, stream, memory, dtype conversion and small elementwise kernels.
#include "absl/strings/str_cat.h"
#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/cudnn_attention.h"
#include "model/cuda/elementwise.cuh"
#include "model/optimizer_math.h"

namespace zt {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return n;
}

std::string cuda_report() {
  const int n = cuda_device_count();
#ifdef ZT_CUDA_EMU
  std::string s = "the CUDA emulation (the GPU code run on the CPU, for tests)";
#else
  std::string s = absl::StrCat("runtime ", CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    absl::StrAppend(&s, ", driver ", driver / 1000, ".", driver % 1000 / 10);
  else
    absl::StrAppend(&s, ", no driver");
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) == cudaSuccess)
      absl::StrAppend(&s, d ? ", " : "; ", "GPU ", d, " ", p.name, " (sm_", p.major, p.minor, ")");
  }
  cudaGetLastError();
#endif
  absl::StrAppend(&s, "; ", n, " GPU(s) visible; ", cudnn_library_report());
  return s;
}

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device, AttentionImpl attention) {
  const int n = cuda_device_count();
  if (device < 0 || device >= n)
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " requested but ", n,
                     " device(s) are visible; check "
                     "CUDA_VISIBLE_DEVICES and the driver, or use the CPU backend"));
  auto be = std::make_unique<CudaBackend>(device);
  if (attention != AttentionImpl::kFlash) {
    absl::StatusOr<std::unique_ptr<CudnnAttention>> cudnn =
        CudnnAttention::open(be.get(), be->stream());
    if (cudnn.ok())
      be->use_cudnn(std::move(*cudnn), attention);
    else if (attention == AttentionImpl::kCudnn)
      return absl::FailedPreconditionError(
          absl::StrCat("--attention cudnn: ", cudnn.status().message()));
  }
  return std::unique_ptr<Backend>(std::move(be));
}

size_t CudaBackend::scratch_budget() const {
  size_t total = memory_limit();
  if (total == 0) {
    size_t free_bytes = 0;
    ZT_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  }
  return std::max<size_t>(total / 16, size_t{32} << 20);
}

// cudaFree synchronises the device, so a block leaving the cache is no longer in use.
CudaBackend::CudaBackend(int device)
    : device_(device), cache_(0, [](void* p, size_t) { cudaFree(p); }) {
  ZT_CHECK_CUDA(cudaSetDevice(device));
  set_memory_limit(0);  // none yet: sizes the block cache by the device's memory
  ZT_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (cudaStream_t& s : copy_streams_) {
    ZT_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
#ifdef ZT_CUDA_EMU
    emu::defer_stream(s);  // its copies run late, so a missing wait shows in the tests
#endif
  }
  ZT_CHECK_CUDA(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
  ZT_CHECK_CUBLAS(cublasLtCreate(&lt_));
  ZT_CHECK_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
  ZT_CHECK_CUDA(cudaMalloc(&reduce_, kMaxReduceBlocks * sizeof(double)));
}

CudaBackend::~CudaBackend() {
  bind_thread();  // its streams, events and blocks are the device's
  for (cudaStream_t s : copy_streams_) cudaStreamSynchronize(s);
  cudaStreamSynchronize(stream_);
  cudnn_.reset();  // its workspace goes back through free(), into cache_
  for (const QueuedCopy& c : copies_) cudaEventDestroy(c.done);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  cudaEventDestroy(compute_mark_);
  for (cudaStream_t s : copy_streams_) cudaStreamDestroy(s);
  cache_.clear();
  cudaFree(reduce_);
  cudaFree(workspace_);
  gemm_plans_.reset();  // its descriptors, before the handle
  cublasLtDestroy(lt_);
  cudaStreamDestroy(stream_);
}

namespace {
size_t block_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

void CudaBackend::bind_thread() const {
  int current = -1;
  ZT_CHECK_CUDA(cudaGetDevice(&current));
  if (current != device_) ZT_CHECK_CUDA(cudaSetDevice(device_));
}

void CudaBackend::set_memory_limit(size_t bytes) {
  bind_thread();
  Backend::set_memory_limit(bytes);
  size_t free_bytes = 0, total = 0;
  ZT_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  cache_.set_limit((bytes ? std::min(bytes, total) : total) / kCacheShare);
}

void* CudaBackend::alloc(size_t bytes, MemCategory c) {
  bind_thread();
  check_memory_limit(tracker_, memory_limit_, bytes, c);
  const size_t rounded = block_bytes(bytes);
  void* p = cache_.take(rounded);
#ifdef ZT_CUDA_EMU
  // The strict emulation fills a reused block with NaN, as it does a fresh one: the GPU
  // promises neither's contents, so nothing may read them before writing.
  if (p && emu::strict_enabled()) ZT_CHECK_CUDA(cudaMemsetAsync(p, 0xFF, rounded, stream_));
#endif
  if (!p && cudaMalloc(&p, rounded) != cudaSuccess) {
    cudaGetLastError();  // out of memory: give the cached blocks back and try once more
    cache_.clear();
    p = nullptr;
    ZT_CHECK_CUDA(cudaMalloc(&p, rounded));
  }
  tracker_.on_alloc(c, bytes);
  return p;
}

void CudaBackend::free(void* p, size_t bytes, MemCategory c) {
  bind_thread();  // an eviction's cudaFree would otherwise start a context on GPU 0
  cache_.put(p, block_bytes(bytes));
  tracker_.on_free(c, bytes);
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  bind_thread();
  ZT_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  ZT_CHECK_CUDA(cudaStreamSynchronize(stream_));
}
void CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  bind_thread();
  ZT_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  ZT_CHECK_CUDA(cudaStreamSynchronize(stream_));  // src may be pageable and reused
}
void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  bind_thread();
  ZT_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}
void CudaBackend::zero(void* p, size_t bytes) {
  bind_thread();
  ZT_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_));
}
void CudaBackend::synchronize() {
  bind_thread();
  ZT_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

bool CudaBackend::pin_host(void* p, size_t bytes) {
  bind_thread();  // the registration belongs to the current device's context
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  cudaGetLastError();  // refused (the memlock limit): the caller keeps pageable memory
  return false;
}
void CudaBackend::unpin_host(void* p, size_t) {
  bind_thread();
  // Memory pin_host could not register: refused again, and cleared so that no later check
  // reports it.
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

namespace {
// After a cudaEventQuery that said cudaErrorNotReady (an answer, not an error): clears that from
// the runtime's last error, and reports any other error found there (an earlier copy's or
// kernel's) instead of swallowing it.
void clear_not_ready() {
  const cudaError_t last = cudaGetLastError();
  if (last != cudaErrorNotReady) ZT_CHECK_CUDA(last);
}
}  // namespace

uint64_t CudaBackend::queue_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                 bool join) {
  bind_thread();
  std::lock_guard<std::mutex> lock(copy_mu_);
  // Copies nobody waits for (a gather's load) are done once their event is: recycle those.
  while (!copies_.empty() && copies_.front().waiters == 0) {
    const cudaError_t q = cudaEventQuery(copies_.front().done);
    if (q == cudaErrorNotReady) {
      clear_not_ready();
      break;
    }
    ZT_CHECK_CUDA(q);
    spare_events_.push_back(copies_.front().done);
    copies_.pop_front();
  }
  // One stream per direction, so a GPU's two copy engines move gradients out and weights in
  // at once. After the kernels queued so far: a D2H reads what they wrote, an H2D must not
  // overwrite what they still read.
  const int dir = kind == cudaMemcpyDeviceToHost ? kToHost : join ? kToDevice : kToDeviceUnjoined;
  const cudaStream_t copy_stream = copy_streams_[dir];
  ZT_CHECK_CUDA(cudaEventRecord(compute_mark_, stream_));
  ZT_CHECK_CUDA(cudaStreamWaitEvent(copy_stream, compute_mark_, 0));
  ZT_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream));
  cudaEvent_t done;
  if (spare_events_.empty()) {
    ZT_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = spare_events_.back();
    spare_events_.pop_back();
  }
  ZT_CHECK_CUDA(cudaEventRecord(done, copy_stream));
  if (kind == cudaMemcpyHostToDevice && join)  // the kernels queued from now on read the data
    ZT_CHECK_CUDA(cudaStreamWaitEvent(stream_, done, 0));
  copies_.push_back({++last_ticket_, done, dir});
  return last_ticket_;
}
uint64_t CudaBackend::copy_to_host_async(void* dst, const void* src, size_t bytes) {
  return queue_copy(dst, src, bytes, cudaMemcpyDeviceToHost);
}
uint64_t CudaBackend::copy_to_device_async(void* dst, const void* src, size_t bytes) {
  return queue_copy(dst, src, bytes, cudaMemcpyHostToDevice);
}
uint64_t CudaBackend::copy_to_device_unjoined(void* dst, const void* src, size_t bytes) {
  return queue_copy(dst, src, bytes, cudaMemcpyHostToDevice, /*join=*/false);
}
void CudaBackend::join_copy(uint64_t ticket) {
  bind_thread();
  // The latest unjoined copy up to ticket still listed (their stream runs them in order); under
  // the lock, so that its event is not recycled and recorded anew before the wait. One no
  // longer listed was waited for by the host: done.
  std::lock_guard<std::mutex> lock(copy_mu_);
  cudaEvent_t last = nullptr;
  for (const QueuedCopy& c : copies_)
    if (c.ticket <= ticket && c.dir == kToDeviceUnjoined) last = c.done;
  if (last) ZT_CHECK_CUDA(cudaStreamWaitEvent(stream_, last, 0));
}
void CudaBackend::wait_copy(uint64_t ticket) {
  bind_thread();
  // The latest queued copy up to ticket on each copy stream: a stream runs its copies in order,
  // so those imply the rest.
  // (A deque's elements stay where they are as others are added or taken off its ends.)
  QueuedCopy* last[kCopyStreams] = {};
  {
    std::lock_guard<std::mutex> lock(copy_mu_);
    for (QueuedCopy& c : copies_)
      if (c.ticket <= ticket) last[c.dir] = &c;
    for (QueuedCopy* c : last)
      if (c) ++c->waiters;  // listed, and its event this copy's, until the wait below is done
  }
  // Outside the lock, so other threads keep queuing. The events stay listed until they are
  // done, so a concurrent wait for an earlier ticket still finds something to wait on.
  for (QueuedCopy* c : last) {  // none: done and waited for already
    if (!c) continue;
    const cudaError_t q = cudaEventQuery(c->done);  // done already (a sync since): no host wait
    if (q == cudaSuccess) continue;
    if (q != cudaErrorNotReady) ZT_CHECK_CUDA(q);
    clear_not_ready();
    ZT_CHECK_CUDA(cudaEventSynchronize(c->done));
  }
  std::lock_guard<std::mutex> lock(copy_mu_);
  for (QueuedCopy* c : last)
    if (c) --c->waiters;
  while (!copies_.empty() && copies_.front().ticket <= ticket && copies_.front().waiters == 0) {
    spare_events_.push_back(copies_.front().done);
    copies_.pop_front();
  }
}

namespace {

__global__ void convert_kernel(const void* src, DType st, void* dst, DType dt, size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) store_from_f32(dst, dt, i, load_as_f32(src, st, i));
}

__global__ void add_kernel(TensorRef y, TensorView x, size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) add_from_f32(y, i, load_as_f32(x, i));
}

struct Add {
  __device__ float operator()(float y, float x) const { return y + x; }
};

__global__ void scale_add_kernel(void* y, DType yt, const float* x, float alpha, bool accumulate,
                                 size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  // Rounded as the CPU's scale_add: the product, then the sum (no fused multiply-add).
  if (i < n) {
    const float ax = __fmul_rn(alpha, x[i]);
    store_from_f32(y, yt, i, accumulate ? __fadd_rn(ax, load_as_f32(y, yt, i)) : ax);
  }
}

// Sum of squares in double without atomics, so the global norm has the same bits every run:
// each thread sums its grid-stride elements in order, each warp combines its lanes in a fixed
// butterfly, thread 0 adds the warps in order into partial[block]; sum_partials_kernel then
// adds the blocks in a fixed order. (The grid depends on n only.)
__global__ void sum_squares_kernel(const void* x, DType t, size_t n, double* partial) {
  __shared__ double warps[kThreads / 32];
  double acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const double d = load_as_f32(x, t, i);
    acc += d * d;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int w = 0; w < (int)(blockDim.x / 32); ++w) s += warps[w];
    partial[blockIdx.x] = s;
  }
}

// One block: thread k adds partials k, k + kThreads, ... in order, then a fixed tree over the
// threads (the same bits every run). One thread adding 1024 partials in turn took 32 us a call
// on an H200 (docs/gpu_results.md), 14 calls a GPT-2 step.
__global__ void sum_partials_kernel(const double* partial, int blocks, double* out) {
  __shared__ double sums[kThreads];
  double s = 0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sums[0];
}

}  // namespace

void CudaBackend::convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (n == 0) return;
  if (st == dt) return copy(dst, src, n * dtype_size(st));
  launch_kernel(convert_kernel, blocks_for(n), kThreads, stream_, src, st, dst, dt, n);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::add_inplace(TensorRef y, TensorView x, size_t n) {
  if (n == 0) return;
  if (y.dtype == x.dtype && map2(stream_, y.dtype, y.data, y.data, x.data, n, Add{})) return;
  launch_kernel(add_kernel, blocks_for(n), kThreads, stream_, y, x, n);
}

void CudaBackend::scale_add(void* y, DType yt, const float* x, float alpha, bool accumulate,
                            size_t n, double* sum_squares) {
  if (n > 0) {
    launch_kernel(scale_add_kernel, blocks_for(n), kThreads, stream_, y, yt, x, alpha, accumulate,
                  n);
    ZT_CHECK_CUDA(cudaGetLastError());
  }
  // A second pass: the GPU's bandwidth makes it cheap beside the CPU's (fused there).
  if (sum_squares) this->sum_squares(y, yt, n, sum_squares);
}

void CudaBackend::sum_squares(const void* x, DType t, size_t n, double* out) {
  if (n == 0) return zero(out, sizeof(double));
  // reduce_: one partial per block, added in order by the second kernel (no host wait).
  const unsigned blocks = std::min<unsigned>(blocks_for(n), kMaxReduceBlocks);
  launch_kernel(sum_squares_kernel, blocks, kThreads, stream_, x, t, n, reduce_);
  launch_kernel(sum_partials_kernel, 1, kThreads, stream_, reduce_, (int)blocks, out);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

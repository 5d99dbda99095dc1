// Fused softmax cross-entropy with ignore index (equations in model/cpu/crossentropy.cc); one
// block per row, block-wide max and sum through shared memory. Logits in the activation dtype
// (bf16 on a mixed-precision run, as llm.c and PyTorch autocast keep them), rows padded to a
// multiple of 128 (logits_row_stride); the loss and the softmax are fp32.
//
// Two kernels. crossentropy_row_kernel reads each 16-byte pack of the row once, keeping it in
// shared memory for the sum and the gradient, and writes the gradient: the logits cost one read
// and one write (the roofline's budget, benchmarks/gpu_roofline.py), where reading them again
// for the max, the sum and the gradient cost three reads. It takes rows starting on 16-byte
// boundaries that fit a block's shared memory (226 KiB past its static arrays: 115,712 16-bit
// logits, 57,856 fp32; GPT-2's 50,304 bf16 logits take 2 blocks an SM). crossentropy_kernel,
// reading the dtype at run time, takes the rest.
#include <algorithm>

#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/elementwise.cuh"

namespace zt {
namespace {

// Reduces v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[32];
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.f);
  return kMax ? warp_max(v) : warp_sum(v);
}

// Row blockIdx.x of logits (stride ld, V columns read), in their dtype, computed in fp32.
__global__ void crossentropy_kernel(TensorRef logits, int ld, float* losses, const int* targets,
                                    int V, float scale) {
  const int n = blockIdx.x;
  const size_t row = (size_t)n * ld;
  const int y = targets[n];
  const bool grad = scale != 0.f;
  if (y < 0) {
    if (threadIdx.x == 0) losses[n] = 0.f;
    if (grad)
      for (int v = threadIdx.x; v < V; v += blockDim.x) store_from_f32(logits, row + v, 0.f);
    return;
  }
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, load_as_f32(logits, row + v));
  m = block_reduce<true>(m);
  float s = 0.f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(load_as_f32(logits, row + v) - m);
  s = block_reduce<false>(s);
  const float logsum = logf(s) + m;
  const float zy = load_as_f32(logits, row + y);
  __syncthreads();  // everyone has read z[y] before it is overwritten
  if (threadIdx.x == 0) losses[n] = logsum - zy;
  if (grad)
    for (int v = threadIdx.x; v < V; v += blockDim.x)
      store_from_f32(logits, row + v,
                     (expf(load_as_f32(logits, row + v) - logsum) - (v == y ? 1.f : 0.f)) * scale);
}

constexpr int kRowThreads = 1024;
// A block's shared memory, less a KiB for the kernel's static shared memory (block_reduce's two
// arrays: 256 bytes), which counts against the same limit.
constexpr size_t kMaxRowSmem = kMaxBlockSmem - 1024;

// Row blockIdx.x of logits (T, stride ld, 16-byte aligned rows), its first V columns: thread k
// takes packs k, k + blockDim.x, ... of the row, each read from device memory once into shared
// memory (ceil(V / kN) packs). Every pass reads back only the thread's own packs, so the block
// synchronises only in its two reductions.
template <class T>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_row_kernel(T* logits, int ld, float* losses, const int* targets, int V,
                            float scale) {
  constexpr int kN = Pack16<T>::kN;
  Pack16<T>* z = dynamic_smem<Pack16<T>>();
  Pack16<T>* row = reinterpret_cast<Pack16<T>*>(logits + (size_t)blockIdx.x * ld);
  const int packs = (V + kN - 1) / kN;
  const int y = targets[blockIdx.x];
  const bool grad = scale != 0.f;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack16<T> p = row[i];
    z[i] = p;
#pragma unroll
    for (int k = 0; k < kN; ++k)
      if (i * kN + k < V) m = fmaxf(m, to_f32(p.v[k]));
  }
  if (y < 0) {  // the whole block takes this branch (y is the row's)
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.f;
    if (grad)
      for (int i = threadIdx.x; i < packs; i += blockDim.x) {
        Pack16<T> p = z[i];
#pragma unroll
        for (int k = 0; k < kN; ++k)
          if (i * kN + k < V) p.v[k] = from_f32<T>(0.f);
        row[i] = p;  // the padding lanes written back unchanged
      }
    return;
  }
  m = block_reduce<true>(m);
  float s = 0.f;
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack16<T> p = z[i];
#pragma unroll
    for (int k = 0; k < kN; ++k)
      if (i * kN + k < V) s += expf(to_f32(p.v[k]) - m);
  }
  s = block_reduce<false>(s);
  const float logsum = logf(s) + m;
  if (y >= V) {  // a target past the vocabulary: no z[y] to read (the caller's error)
    if (threadIdx.x == 0) losses[blockIdx.x] = NAN;
  } else if ((y / kN) % (int)blockDim.x == (int)threadIdx.x) {  // the pack holding z[y]
    losses[blockIdx.x] = logsum - to_f32(z[y / kN].v[y % kN]);
  }
  if (!grad) return;
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    Pack16<T> p = z[i];
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int v = i * kN + k;
      if (v < V)
        p.v[k] = from_f32<T>((expf(to_f32(p.v[k]) - logsum) - (v == y ? 1.f : 0.f)) * scale);
    }
    row[i] = p;  // the padding lanes written back unchanged
  }
}

// Launches crossentropy_row_kernel where its conditions hold; false (nothing launched)
// otherwise.
bool crossentropy_rows(cudaStream_t stream, TensorRef logits, int ld, float* losses,
                       const int* targets, int N, int V, float scale) {
  const size_t elem = dtype_size(logits.dtype), smem = ((size_t)V * elem + 15) / 16 * 16;
  if (!aligned16({logits.data}) || (ld * elem) % 16 != 0 || smem > kMaxRowSmem) return false;
  with_dtype(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    allow_smem(crossentropy_row_kernel<T>, smem);
    launch_kernel_smem(crossentropy_row_kernel<T>, N, kRowThreads, smem, stream,
                       static_cast<T*>(logits.data), ld, losses, targets, V, scale);
  });
  return true;
}

}  // namespace

void CudaBackend::crossentropy_forward_backward(TensorRef logits, int ld, float* losses,
                                                const int* targets, int N, int V,
                                                float dlogits_scale) {
  if (N == 0) return;
  if (crossentropy_rows(stream_, logits, ld, losses, targets, N, V, dlogits_scale)) return;
  launch_kernel(crossentropy_kernel, N, 512, stream_, logits, ld, losses, targets, V,
                dlogits_scale);
}

int CudaBackend::logits_row_stride(int V) const { return gpu_logits_row_stride(V); }

size_t CudaBackend::classifier_chunk_bytes() const {
  // One chunk for GPT-2's 16 x 1024 rows of 50304 bf16 logits (1.6 GB) on an H200, a few on an
  // 8 GB GPU.
  return scratch_budget();
}

}  // namespace zt

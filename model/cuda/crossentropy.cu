// Fused softmax cross-entropy with ignore index (equations in model/cpu/crossentropy.cc); one
// block per row, block-wide max and sum through shared memory. Logits in the activation dtype
// (bf16 on a mixed-precision run, as llm.c and PyTorch autocast keep them), rows padded to a
// multiple of 128 (logits_row_stride); the loss and the softmax are fp32.
#include <algorithm>

#include "model/cuda/cuda_backend.cuh"

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

}  // namespace

void CudaBackend::crossentropy_forward_backward(TensorRef logits, int ld, float* losses,
                                                const int* targets, int N, int V,
                                                float dlogits_scale) {
  if (N == 0) return;
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

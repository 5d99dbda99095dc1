// Fused softmax cross-entropy with ignore index (equations in model/cpu/crossentropy.cc); one
// block per row, block-wide max and sum through shared memory.
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

__global__ void crossentropy_kernel(float* logits, float* losses, const int* targets, int V,
                                    float scale) {
  const int n = blockIdx.x;
  float* z = logits + (size_t)n * V;
  const int y = targets[n];
  const bool grad = scale != 0.f;
  if (y < 0) {
    if (threadIdx.x == 0) losses[n] = 0.f;
    if (grad)
      for (int v = threadIdx.x; v < V; v += blockDim.x) z[v] = 0.f;
    return;
  }
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, z[v]);
  m = block_reduce<true>(m);
  float s = 0.f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(z[v] - m);
  s = block_reduce<false>(s);
  const float logsum = logf(s) + m;
  const float zy = z[y];
  __syncthreads();  // everyone has read z[y] before it is overwritten
  if (threadIdx.x == 0) losses[n] = logsum - zy;
  if (grad)
    for (int v = threadIdx.x; v < V; v += blockDim.x)
      z[v] = (expf(z[v] - logsum) - (v == y ? 1.f : 0.f)) * scale;
}

}  // namespace

void CudaBackend::crossentropy_forward_backward(float* logits, float* losses, const int* targets,
                                                int N, int V, float dlogits_scale) {
  if (N == 0) return;
  launch_kernel(crossentropy_kernel, N, 512, stream_, logits, losses, targets, V, dlogits_scale);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

// RMSNorm, one warp per row (equations in model/cpu/rmsnorm.cc).
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

// With residual non-null, inp (N,C) += residual first, in place (as layernorm.cu).
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, float* inp, const float* residual,
                                       TensorView w, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  float* x = inp + (size_t)row * C;
  if (residual) add_row(x, residual + (size_t)row * C, lane, C);
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c] * x[c];
  const float r = rsqrtf(warp_sum(s) / C + eps);
  float* y = out + (size_t)row * C;
  for (int c = lane; c < C; c += 32) y[c] = x[c] * r * load_as_f32(w, c);
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_kernel(float* dinp, float* dw, const float* dout, const float* inp,
                                        TensorView w, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + (size_t)row * C;
  const float* dy = dout + (size_t)row * C;
  const float r = rstd[row];
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += dy[c] * load_as_f32(w, c) * x[c] * r;
  const float mean_dxhat_xhat = warp_sum(s) / C;
  float* dx = dinp + (size_t)row * C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = x[c] * r;
    dx[c] += r * (dy[c] * load_as_f32(w, c) - xhat * mean_dxhat_xhat);
  }
}

}  // namespace

void CudaBackend::rmsnorm_forward(float* out, float* rstd, const float* inp, TensorView w, int N,
                                  int C, float eps) {
  // Without a residual the kernel only reads inp.
  launch_kernel(rmsnorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, rstd,
                const_cast<float*>(inp), (const float*)nullptr, w, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::residual_rmsnorm_forward(float* x, const float* residual, float* out,
                                           float* rstd, TensorView w, int N, int C, float eps) {
  launch_kernel(rmsnorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, rstd, x,
                residual, w, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                                   TensorView w, const float* rstd, int N, int C) {
  launch_kernel(rmsnorm_backward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, dinp, dw,
                dout, inp, w, rstd, N, C);
  ZT_CHECK_CUDA(cudaGetLastError());
  norm_param_grads(dw, nullptr, dout, inp, nullptr, rstd, N, C);  // rows in order, no atomics
}

}  // namespace zt

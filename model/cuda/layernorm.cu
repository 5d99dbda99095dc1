// LayerNorm, one warp per row (equations in model/cpu/layernorm.cc). The weight and bias
// gradients are sums over rows: a second kernel gives each column to one thread, which adds
// the rows in order, so two runs give the same bits (no atomics). RMSNorm uses it too. The
// forward optionally adds the residual first (x += residual, then the norm of the sum).
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

// With residual non-null, inp (N,C) += residual first, in place: each lane writes the sums it
// reads back, so no barrier is needed.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, float* inp,
                                         const float* residual, TensorView w, TensorView b, int N,
                                         int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  float* x = inp + (size_t)row * C;
  if (residual) add_row(x, residual + (size_t)row * C, lane, C);
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(warp_sum(v) / C + eps);
  float* y = out + (size_t)row * C;
  for (int c = lane; c < C; c += 32) y[c] = (x[c] - m) * r * load_as_f32(w, c) + load_as_f32(b, c);
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

__global__ void layernorm_backward_kernel(float* dinp, float* dw, float* db, const float* dout,
                                          const float* inp, TensorView w, const float* mean,
                                          const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + (size_t)row * C;
  const float* dy = dout + (size_t)row * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.f, bsum = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * r, dxhat = dy[c] * load_as_f32(w, c);
    a += dxhat;
    bsum += dxhat * xhat;
  }
  const float mean_dxhat = warp_sum(a) / C, mean_dxhat_xhat = warp_sum(bsum) / C;
  float* dx = dinp + (size_t)row * C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * r;
    dx[c] += r * (dy[c] * load_as_f32(w, c) - mean_dxhat - xhat * mean_dxhat_xhat);
  }
}

// dw[c] += sum_n dy[n,c] * xhat[n,c]; db[c] += sum_n dy[n,c] (db may be null), xhat =
// (x - mean) * rstd, or x * rstd when mean is null (RMSNorm). Rows in order, one thread per
// column: adjacent columns keep a warp's loads coalesced.
__global__ void norm_param_grad_kernel(float* dw, float* db, const float* dout, const float* inp,
                                       const float* mean, const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.f, sb = 0.f;
  for (int n = 0; n < N; ++n) {
    const float x = inp[(size_t)n * C + c], dy = dout[(size_t)n * C + c];
    const float xhat = (mean ? x - mean[n] : x) * rstd[n];
    sw += dy * xhat;
    sb += dy;
  }
  dw[c] += sw;
  if (db) db[c] += sb;
}

}  // namespace

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                    TensorView w, TensorView b, int N, int C, float eps) {
  // Without a residual the kernel only reads inp.
  launch_kernel(layernorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, mean,
                rstd, const_cast<float*>(inp), (const float*)nullptr, w, b, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::residual_layernorm_forward(float* x, const float* residual, float* out,
                                             float* mean, float* rstd, TensorView w, TensorView b,
                                             int N, int C, float eps) {
  launch_kernel(layernorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, mean,
                rstd, x, residual, w, b, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                     const float* inp, TensorView w, const float* mean,
                                     const float* rstd, int N, int C) {
  launch_kernel(layernorm_backward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, dinp, dw,
                db, dout, inp, w, mean, rstd, N, C);
  ZT_CHECK_CUDA(cudaGetLastError());
  norm_param_grads(dw, db, dout, inp, mean, rstd, N, C);
}

void CudaBackend::norm_param_grads(float* dw, float* db, const float* dout, const float* inp,
                                   const float* mean, const float* rstd, int N, int C) {
  launch_kernel(norm_param_grad_kernel, blocks_for((size_t)C), kThreads, stream_, dw, db, dout, inp,
                mean, rstd, N, C);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

// RMSNorm, one warp per row (equations in model/cpu/rmsnorm.cc). The backward takes dx and the
// weight gradient's partials in one pass (norm_backward.cuh); past its width limit the weight
// gradient takes two passes of its own (CudaBackend::norm_param_grads).
#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/norm_backward.cuh"

namespace zt {
namespace {

// With residual non-null, inp (N,C) += residual first, in place (as layernorm.cu).
__global__ void rmsnorm_forward_kernel(TensorRef out, float* rstd, TensorRef inp,
                                       TensorView residual, TensorView w, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t x = (size_t)row * C;  // the row's first element
  if (residual.data)
    for (int c = lane; c < C; c += 32)
      store_from_f32(inp, x + c, load_as_f32(inp, x + c) + load_as_f32(residual, x + c));
  float s = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float v = load_as_f32(inp, x + c);
    s += v * v;
  }
  const float r = rsqrtf(warp_sum(s) / C + eps);
  for (int c = lane; c < C; c += 32)
    store_from_f32(out, x + c, load_as_f32(inp, x + c) * r * load_as_f32(w, c));
  if (lane == 0) rstd[row] = r;
}

}  // namespace

void CudaBackend::rmsnorm_forward(TensorRef out, float* rstd, TensorView inp, TensorView w, int N,
                                  int C, float eps) {
  // Without a residual the kernel only reads inp.
  const TensorRef x(const_cast<void*>(inp.data), inp.dtype);
  launch_kernel(rmsnorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, rstd, x,
                TensorView(), w, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::residual_rmsnorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                           float* rstd, TensorView w, int N, int C, float eps) {
  launch_kernel(rmsnorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, rstd, x,
                residual, w, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::rmsnorm_backward(TensorRef dinp, TensorRef dw_g, TensorView dout, TensorView inp,
                                   TensorView w, const float* rstd, int N, int C) {
  float* dw = grad_f32(dw_g);
  if (!norm_backward_tiles<false>(this, stream_, dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N,
                                  C))
    norm_param_grads(dw, nullptr, dout, inp, nullptr, rstd, N, C);
}

}  // namespace zt

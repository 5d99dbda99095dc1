// LayerNorm, one warp per row (equations in model/cpu/layernorm.cc). The forward optionally adds
// the residual first (x += residual, then the norm of the sum). The backward takes dx and the
// weight and bias gradients' partials in one pass (norm_backward.cuh); past its width limit,
// the gradients take two fixed-order passes of their own (norm_param_grads, column_sum.cuh),
// RMSNorm's too. Either way two runs give the same bits (no atomics).
#include "model/cuda/column_sum.cuh"
#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/norm_backward.cuh"

namespace zt {
namespace {

// With residual non-null, inp (N,C) += residual first, in place: each lane writes the sums it
// reads back (columns lane, lane + 32, ...), so no barrier is needed; in a 16-bit dtype it reads
// back the rounded sum, as the unfused add then norm would.
__global__ void layernorm_forward_kernel(TensorRef out, float* mean, float* rstd, TensorRef inp,
                                         TensorView residual, TensorView w, TensorView b, int N,
                                         int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t x = (size_t)row * C;  // the row's first element
  if (residual.data)
    for (int c = lane; c < C; c += 32)
      store_from_f32(inp, x + c, load_as_f32(inp, x + c) + load_as_f32(residual, x + c));
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += load_as_f32(inp, x + c);
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = load_as_f32(inp, x + c) - m;
    v += d * d;
  }
  const float r = rsqrtf(warp_sum(v) / C + eps);
  for (int c = lane; c < C; c += 32)
    store_from_f32(out, x + c,
                   (load_as_f32(inp, x + c) - m) * r * load_as_f32(w, c) + load_as_f32(b, c));
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

// Row n, column c's summands of the norms' parameter gradients: dy * xhat (the weight's) and
// dy (the bias's), xhat = (x - mean) * rstd, or x * rstd when mean is null (RMSNorm).
struct NormGradOp {
  TensorView dout, inp;
  const float *mean, *rstd;
  int C;
  __device__ void operator()(int n, int c, float (&v)[2]) const {
    const float x = load_as_f32(inp, (size_t)n * C + c), dy = load_as_f32(dout, (size_t)n * C + c);
    v[0] = dy * ((mean ? x - mean[n] : x) * rstd[n]);
    v[1] = dy;
  }
};

}  // namespace

void CudaBackend::layernorm_forward(TensorRef out, float* mean, float* rstd, TensorView inp,
                                    TensorView w, TensorView b, int N, int C, float eps) {
  // Without a residual the kernel only reads inp.
  const TensorRef x(const_cast<void*>(inp.data), inp.dtype);
  launch_kernel(layernorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, mean,
                rstd, x, TensorView(), w, b, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::residual_layernorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                             float* mean, float* rstd, TensorView w, TensorView b,
                                             int N, int C, float eps) {
  launch_kernel(layernorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, mean,
                rstd, x, residual, w, b, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::layernorm_backward(TensorRef dinp, TensorRef dw_g, TensorRef db_g,
                                     TensorView dout, TensorView inp, TensorView w,
                                     const float* mean, const float* rstd, int N, int C) {
  float *dw = grad_f32(dw_g), *db = grad_f32(db_g);
  if (!norm_backward_tiles<true>(this, stream_, dinp, dw, db, dout, inp, w, mean, rstd, N, C))
    norm_param_grads(dw, db, dout, inp, mean, rstd, N, C);
}

void CudaBackend::norm_param_grads(float* dw, float* db, TensorView dout, TensorView inp,
                                   const float* mean, const float* rstd, int N, int C) {
  column_sums<2>(this, stream_, {{dw, db}}, NormGradOp{dout, inp, mean, rstd, C}, N, C);
}

}  // namespace zt

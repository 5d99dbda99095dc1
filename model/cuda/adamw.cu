// Fused AdamW on fp32 master weights: typed gradient in, typed working copy out, in one pass;
// the element update is model/adamw_math.h (as model/cpu/cpu_adam.cc on the CPU). It is
// multi-tensor by layout: the engine calls it once per unit, and a unit is one flat buffer
// holding every tensor of a block (docs/architecture.md), so a step launches L + 2 kernels however
// many tensors the model has, which is what PyTorch's multi_tensor_apply gets by batching lists.
#include "model/adamw_math.h"
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void adamw_kernel(float* master, void* grad, DType gt, float* m, float* v, void* out,
                             DType ot, size_t n, AdamCoefs c) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float p = adamw_element(master[i], load_as_f32(grad, gt, i), m[i], v[i], c);
  master[i] = p;
  if (c.zero_grad) store_from_f32(grad, gt, i, 0.f);
  if (out) store_from_f32(out, ot, i, p);
}

}  // namespace

void CudaBackend::adamw_update(float* master, void* grad, DType grad_t, float* m, float* v,
                               void* out, DType out_t, size_t n, const AdamStep& s) {
  if (n == 0) return;
  launch_kernel(adamw_kernel, blocks_for(n), kThreads, stream_, master, grad, grad_t, m, v, out,
                out_t, n, adam_coefs(s));
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

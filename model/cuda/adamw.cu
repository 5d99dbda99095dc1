// AdamW with bias correction on fp32 master weights; the element update is model/adamw_math.h.
#include "model/adamw_math.h"
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float step,
                             float bc2_sqrt, float grad_scale, bool adam_w_mode) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  param[i] = adamw_element(param[i], grad[i], m[i], v[i], lr, beta1, beta2, eps, wd, step, bc2_sqrt,
                           grad_scale, adam_w_mode);
}

}  // namespace

void CudaBackend::adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                               float lr, float beta1, float beta2, float eps, float weight_decay,
                               int t, float grad_scale, bool adam_w_mode, bool bias_correction) {
  if (n == 0) return;
  const float bc1 = bias_correction ? 1.f - std::pow(beta1, (float)t) : 1.f;
  const float bc2 = bias_correction ? 1.f - std::pow(beta2, (float)t) : 1.f;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(param, grad, m, v, n, lr, beta1, beta2, eps,
                                                        weight_decay, lr / bc1, std::sqrt(bc2),
                                                        grad_scale, adam_w_mode);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

// AdamW with bias correction on fp32 master weights (equation in model/cpu/adamw.cc).
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float step,
                             float bc2_sqrt, float grad_scale, bool adam_w_mode) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float g = grad[i] * grad_scale;
  float p = param[i];
  if (!adam_w_mode) g += wd * p;
  const float mi = beta1 * m[i] + (1.f - beta1) * g;
  const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  if (adam_w_mode) p -= lr * wd * p;
  param[i] = p - step * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

}  // namespace

void CudaBackend::adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                               float lr, float beta1, float beta2, float eps, float weight_decay,
                               int t, float grad_scale, bool adam_w_mode, bool bias_correction) {
  if (n == 0) return;
  const float bc1 = bias_correction ? 1.f - std::pow(beta1, (float)t) : 1.f;
  const float bc2 = bias_correction ? 1.f - std::pow(beta2, (float)t) : 1.f;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(param, grad, m, v, n, lr, beta1, beta2,
                                                        eps, weight_decay, lr / bc1,
                                                        std::sqrt(bc2), grad_scale, adam_w_mode);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

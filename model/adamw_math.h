// The AdamW update of one fp32 element, shared by the CPU and CUDA kernels so both backends
// compute the same thing (Loshchilov & Hutter 2019, Algorithm 2; torch.optim.AdamW and
// DeepSpeed's FusedAdam / CPUAdam with adam_w_mode):
//   g = grad * grad_scale  (+ wd p when !adam_w_mode: L2 regularisation, classic Adam)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr wd p  (adam_w_mode);  p -= step m / (sqrt(v) / sqrt(bc2) + eps),  step = lr / bc1
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

// Returns the updated parameter; m and v are updated in place. step = lr / bc1 and
// bc2_sqrt = sqrt(bc2) are the bias corrections of step t (1 when bias_correction is off).
ZT_HOST_DEVICE inline float adamw_element(float p, float grad, float& m, float& v, float lr,
                                          float beta1, float beta2, float eps, float wd, float step,
                                          float bc2_sqrt, float grad_scale, bool adam_w_mode) {
  float g = grad * grad_scale;
  if (!adam_w_mode) g += wd * p;
  m = beta1 * m + (1.f - beta1) * g;
  v = beta2 * v + (1.f - beta2) * g * g;
  if (adam_w_mode) p -= lr * wd * p;
  return p - step * m / (sqrtf(v) / bc2_sqrt + eps);
}

}  // namespace zt

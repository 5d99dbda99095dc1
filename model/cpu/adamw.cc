// AdamW (Loshchilov & Hutter 2019, Algorithm 2) with bias correction, as torch.optim.AdamW and
// DeepSpeed's FusedAdam / CPUAdam (adam_w_mode). The update of one fp32 element:
//   g = grad * grad_scale  (+ wd p when !adam_w_mode: L2 regularisation)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr wd p  (adam_w_mode);  p -= lr (m / bc1) / (sqrt(v / bc2) + eps).
#include <cmath>

#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                              float lr, float beta1, float beta2, float eps, float weight_decay,
                              int t, float grad_scale, bool adam_w_mode, bool bias_correction) {
  const float bc1 = bias_correction ? 1.f - std::pow(beta1, (float)t) : 1.f;
  const float bc2 = bias_correction ? 1.f - std::pow(beta2, (float)t) : 1.f;
  const float step = lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i] * grad_scale;
    float p = param[i];
    if (!adam_w_mode) g += weight_decay * p;
    const float mi = beta1 * m[i] + (1.f - beta1) * g;
    const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    if (adam_w_mode) p -= lr * weight_decay * p;
    param[i] = p - step * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

}  // namespace zt

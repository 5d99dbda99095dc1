// AdamW with bias correction on fp32 master weights; the element update (and its equation) is
// model/adamw_math.h, shared with the CUDA kernel.
#include <cmath>

#include "model/adamw_math.h"
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
  for (size_t i = 0; i < n; ++i)
    param[i] = adamw_element(param[i], grad[i], m[i], v[i], lr, beta1, beta2, eps, weight_decay,
                             step, bc2_sqrt, grad_scale, adam_w_mode);
}

}  // namespace zt

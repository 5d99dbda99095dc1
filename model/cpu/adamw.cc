// AdamW on the CPU backend: the fused, vectorised CPU Adam of model/cpu/cpu_adam.h (the same
// kernel optimizer offload runs), so the step streams each parameter once.
#include "model/cpu/cpu_adam.h"
#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::adamw_update(float* master, void* grad, DType grad_t, float* m, float* v,
                              void* out, DType out_t, size_t n, const AdamStep& s) {
  cpu_adam_step(master, grad, grad_t, m, v, out, out_t, n, s);
}

}  // namespace zt

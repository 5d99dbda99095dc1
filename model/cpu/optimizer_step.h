// The optimizer step on host memory: the CPU backend's step and optimizer offload's (Ren et
// al., "ZeRO-Offload", USENIX ATC 2021, Section 4.2; DeepSpeed's DeepSpeedCPUAdam,
// DeepSpeedCPULion and DeepSpeedCPUAdagrad). AdamW runs CPU Adam (model/cpu/cpu_adam.h); Lion
// and Adagrad run one vectorised loop over the element updates of model/optimizer_math.h.
// Every path reads the gradient in its storage dtype once, updates master and states in place
// and writes the rounded working copy in the same pass, OpenMP over 8K-element tiles; every
// SIMD level gives the scalar path's bits.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/simd.h"
#include "model/optimizer_math.h"

namespace zt {

// master: n fp32, updated in place. grad: n elements of grad_t, read (and set to zero when
// s.zero_grad). states: optimizer_info(s.kind).num_states pointers to n fp32 each (AdamW: m,
// v; Lion: m; Adagrad: sum), updated in place. out: n elements of out_t receiving the updated
// master rounded to nearest even, or null. `level` must be supported by this CPU
// (cpu_supports); the overload without it uses the best.
void cpu_optimizer_step(float* master, void* grad, DType grad_t, float* const* states, void* out,
                        DType out_t, size_t n, const OptimizerStep& s, SimdLevel level);
void cpu_optimizer_step(float* master, void* grad, DType grad_t, float* const* states, void* out,
                        DType out_t, size_t n, const OptimizerStep& s);

}  // namespace zt

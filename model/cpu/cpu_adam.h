// CPU Adam: the fused optimizer step over fp32 master weights and moments that runs wherever
// the optimizer state lives in host memory: the CPU backend's step, and optimizer offload
// (Ren et al., "ZeRO-Offload", USENIX ATC 2021, Section 4.2; DeepSpeed's DeepSpeedCPUAdam).
//
// One pass per element reads the gradient in its storage dtype, unscales and clips it (one
// factor, OptimizerStep::grad_scale), updates master, m and v (model/optimizer_math.h), and writes
// the rounded 16-bit working copy: 28 bytes per parameter with bf16/fp16 gradients and a 16-bit
// copy, the least any Adam step can move (30 when it also zeroes the gradient it consumed,
// OptimizerStep::zero_grad, which replaces a separate zeroing pass). AVX-512, AVX2 and scalar paths
// are chosen at run time (common/simd.h) and give the same bits; OpenMP over 8K-element tiles.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/simd.h"
#include "model/optimizer_math.h"

namespace zt {

// master, m, v: n fp32 elements, updated in place. grad: n elements of grad_t, read (and set to
// zero when s.zero_grad).
// out: n elements of out_t receiving the updated master rounded to nearest even, or null (then
// out_t is ignored; e.g. when fp32 master and working parameters are one buffer).
// `level` must be supported by this CPU (cpu_supports); the overload without it uses the best.
void cpu_adam_step(float* master, void* grad, DType grad_t, float* m, float* v, void* out,
                   DType out_t, size_t n, const OptimizerStep& s, SimdLevel level);
void cpu_adam_step(float* master, void* grad, DType grad_t, float* m, float* v, void* out,
                   DType out_t, size_t n, const OptimizerStep& s);

// Sum of squares of n elements of dtype t (the global gradient norm's partial sum): the vector
// paths sum runs of 64 squares per lane in fp32, then add those in double (relative error
// below about 4e-6, typically 1e-7, as torch's fp32 norm has over far longer runs; a square
// above fp32's range is inf, as in torch); the scalar path sums in double.
// Lanes are summed in a fixed order, so the result depends on n and the SIMD level only, not
// on the thread count.
double cpu_sum_squares(const void* x, DType t, size_t n, SimdLevel level);
double cpu_sum_squares(const void* x, DType t, size_t n);

// y (n, yt) = alpha * x (n, fp32) + (accumulate ? y : 0) as scale_add (common/dtype.h), and
// returns Σ y² of the stored result equal bit for bit to cpu_sum_squares(y, yt, n): each 8K
// tile is summed right after it is written, from cache, so the gradient norm costs no second
// pass over memory. (DeepSpeed likewise sums the squares of an offloaded gradient partition
// as it copies it: stage_1_and_2.py, complete_grad_norm_calculation_for_cpu_offload.)
double cpu_scale_add_sum_squares(void* y, DType yt, const float* x, float alpha, bool accumulate,
                                 size_t n);

}  // namespace zt

// Linear layer via BLAS: out = inp @ W^T + b, W stored (OC, C) as nn.Linear.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::matmul_forward(TensorRef out_a, TensorView inp_a, TensorView weight_v,
                                TensorView bias_v, int N, int C, int OC) {
  float* out = f32(out_a);
  const float* inp = f32(inp_a);
  DeviceBuffer wt, bt;
  const float* weight = widen(weight_v, (size_t)OC * C, wt);
  const float* bias = widen(bias_v, OC, bt);
  // out (N,OC) = inp (N,C) @ weight (OC,C)^T. One row (a decoding step) is a matrix-vector
  // product: sgemm would first copy the whole weight into its packed layout.
  if (N == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.f, weight, C, inp, 1, 0.f, out, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.f, inp, C, weight, C, 0.f,
                out, OC);
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[(size_t)n * OC + o] += bias[o];
  }
}

// A 16-bit weight gradient is computed a block of rows at a time, at most about 4 MiB of fp32
// product per block, in cache (L3) until it is added into the gradient. Blocks of 1 MiB ran the
// GEMMs at about half speed (each block repacks the other operand, and few rows per call
// starve the kernel): the blocks' weight-gradient backward of gpt2-124m at B x T = 1 x 64 took
// 247 ms per step against fp32's 149, with 4 MiB 164-180 against 142-144 (flops_profiler,
// docs/benchmarks.md). The blocks share one parallel region (OpenBLAS single-threaded inside
// it): one barrier per weight, not one per block, which on a 2-vCPU machine costs more than the
// GEMMs themselves at small batches. Their number is a multiple of the threads, so none idles.
constexpr size_t kGradChunkFloats = size_t{1} << 20;

void CpuBackend::matmul_backward(TensorRef dinp_a, TensorRef dweight, TensorRef dbias_g,
                                 TensorView dout_a, TensorView inp_a, TensorView weight_v, int N,
                                 int C, int OC) {
  float* dinp = f32(dinp_a);
  const float *dout = f32(dout_a), *inp = f32(inp_a);
  DeviceBuffer wt, gt, bt;
  const float* weight = widen(weight_v, (size_t)OC * C, wt);
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.f, dout, OC, weight, C, 1.f,
                dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C): straight into an fp32 gradient; into a 16-bit
  // one a block of rows at a time, each product added rounded while it is in cache. While the
  // N rows fit one of OpenBLAS's K blocks the bits are those of an fp32 accumulator from zeros
  // folded afterwards (but +0 where the fold stored a -0 contribution); beyond, the blocked
  // GEMM may sum in another order, which moves a fraction of a percent of the values by a
  // 16-bit step (tests/unit/cpu_sixteen_bit_test.cc).
  if (dweight.dtype == DType::kF32) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.f, dout, OC, inp, C, 1.f,
                static_cast<float*>(dweight.data), C);
  } else {
    const int nt = omp_get_max_threads();
    size_t blocks = ((size_t)OC * C + kGradChunkFloats - 1) / kGradChunkFloats;
    blocks = std::min<size_t>((blocks + nt - 1) / nt * nt, OC);  // a multiple of the threads
    const int rows = (int)((OC + blocks - 1) / blocks);
    const int chunks = (OC + rows - 1) / rows;
    const size_t per_thread = (size_t)rows * C;
    gt = DeviceBuffer(this, std::min(nt, chunks) * per_thread * sizeof(float),
                      MemCategory::kWorkspace);
#pragma omp parallel for schedule(static)
    for (int k = 0; k < chunks; ++k) {
      const int o0 = k * rows, r = std::min(rows, OC - o0);
      float* tmp = gt.f32() + omp_get_thread_num() * per_thread;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, C, N, 1.f, dout + o0, OC, inp, C, 0.f,
                  tmp, C);
      const TensorRef g = dweight + (size_t)o0 * C;  // rounded once, on this thread
      scale_add_serial(g.data, g.dtype, tmp, 1.f, true, (size_t)r * C);
    }
  }
  if (dbias_g) {
    float* dbias = grad_sum(dbias_g, OC, bt);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      float s = 0.f;
      for (int n = 0; n < N; ++n) s += dout[(size_t)n * OC + o];
      dbias[o] += s;
    }
    finish_grad(dbias_g, dbias, OC);
  }
}

}  // namespace zt

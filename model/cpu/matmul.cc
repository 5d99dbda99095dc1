// Linear layer via BLAS: out = inp @ W^T + b, W stored (OC, C) as nn.Linear.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "model/cpu/cpu_backend.h"

namespace zt {
namespace {

// A 16-bit weight, and its gradient, is handled a block of rows at a time, at most about 4 MiB
// of fp32 per block, in cache (L3) between its widening or product and its use. Blocks of 1 MiB ran
// the GEMMs at about half speed (each block repacks the other operand, and few rows per call starve
// the kernel): the blocks' weight-gradient backward of gpt2-124m at B x T = 1 x 64 took 247 ms per
// step against fp32's 149, with 4 MiB 164-180 against 142-144 (flops_profiler, docs/benchmarks.md).
// The blocks share one parallel region (OpenBLAS single-threaded inside it): one barrier per
// weight, not one per block, which on a 2-vCPU machine costs more than the GEMMs themselves at
// small batches. Their number is a multiple of the threads, so none idles.
constexpr size_t kBlockFloats = size_t{1} << 20;

// Rows per block of a (rows, cols) 16-bit weight: about kBlockFloats fp32 elements per block,
// the number of blocks a multiple of the threads.
int block_rows(int rows, int cols) {
  const int nt = omp_get_max_threads();
  size_t blocks = ((size_t)rows * cols + kBlockFloats - 1) / kBlockFloats;
  blocks = std::min<size_t>((blocks + nt - 1) / nt * nt, rows);
  return (int)((rows + blocks - 1) / blocks);
}

}  // namespace

void CpuBackend::matmul_forward(TensorRef out_a, TensorView inp_a, TensorView weight_v,
                                TensorView bias_v, int N, int C, int OC) {
  float* out = f32(out_a);
  const float* inp = f32(inp_a);
  DeviceBuffer wt, bt;
  const float* bias = widen(bias_v, OC, bt);
  if (N > 1 && weight_v.dtype != DType::kF32) {
    // A 16-bit weight a block of its rows at a time, each thread widening its own block into
    // cache and computing those output columns (the same sums as one GEMM on the widened
    // weight): the widened weight is never written to memory and read back.
    const int rows = block_rows(OC, C), chunks = (OC + rows - 1) / rows;
    const size_t per_thread = (size_t)rows * C;
    wt = DeviceBuffer(this, std::min(omp_get_max_threads(), chunks) * per_thread * sizeof(float),
                      MemCategory::kWorkspace);
#pragma omp parallel for schedule(static)
    for (int k = 0; k < chunks; ++k) {
      const int o0 = k * rows, r = std::min(rows, OC - o0);
      float* w = wt.f32() + omp_get_thread_num() * per_thread;
      convert_serial(static_cast<const char*>(weight_v.data) + (size_t)o0 * C * 2, weight_v.dtype,
                     w, DType::kF32, (size_t)r * C);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, C, 1.f, inp, C, w, C, 0.f,
                  out + o0, OC);
    }
  } else {
    const float* weight = widen(weight_v, (size_t)OC * C, wt);
    // out (N,OC) = inp (N,C) @ weight (OC,C)^T. One row (a decoding step) is a matrix-vector
    // product: sgemm would first copy the whole weight into its packed layout.
    if (N == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.f, weight, C, inp, 1, 0.f, out, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.f, inp, C, weight, C, 0.f,
                  out, OC);
  }
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[(size_t)n * OC + o] += bias[o];
  }
}

// At most this many fp32 elements (8 MiB) of a thread's part of the input gradient for the
// blocked backward of a 16-bit weight, so that a classifier chunk (about 8M logits: 262 rows of
// a 32k vocabulary, C up to 8000) takes that path; more rows than that (a block's backward at a
// large batch) take one GEMM on the widened weight.
constexpr size_t kPartFloats = size_t{1} << 21;

void CpuBackend::matmul_backward(TensorRef dinp_a, TensorRef dweight, TensorRef dbias_g,
                                 TensorView dout_a, TensorView inp_a, TensorView weight_v, int N,
                                 int C, int OC) {
  float* dinp = f32(dinp_a);
  const float *dout = f32(dout_a), *inp = f32(inp_a);
  DeviceBuffer wt, bt;
  // dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T (OC,N) @ inp (N,C).
  // A 16-bit weight gradient gets each block's product added rounded once while it is in cache.
  // While the N rows fit one of OpenBLAS's K blocks its bits are those of an fp32 accumulator
  // from zeros folded afterwards (but +0 where the fold stored a -0 contribution); beyond, the
  // blocked GEMM may sum in another order, which moves a fraction of a percent of the values
  // by a 16-bit step (tests/unit/cpu_sixteen_bit_test.cc).
  const bool g16 = dweight.dtype != DType::kF32;
  // A 16-bit weight's input gradient in the blocked pass below, each thread adding into a part
  // of its own, when those parts are small: the weight is widened a block at a time into cache.
  const bool part_dinp = dinp && weight_v.dtype != DType::kF32 && (size_t)N * C <= kPartFloats;
  if (dinp && !part_dinp) {
    const float* weight = widen(weight_v, (size_t)OC * C, wt);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.f, dout, OC, weight, C, 1.f,
                dinp, C);
  }
  if (!g16 && !part_dinp) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.f, dout, OC, inp, C, 1.f,
                static_cast<float*>(dweight.data), C);
  } else {
    // Blocks of the weight's rows in one parallel region. Per block: the widened weight and
    // dout[:, block] @ block into this thread's part of dinp (part_dinp); the block's weight
    // gradient. Then the parts are summed into dinp (in another order than one GEMM: the same
    // values up to fp32 rounding).
    const int nt = omp_get_max_threads();
    const int rows = block_rows(OC, C), chunks = (OC + rows - 1) / rows;
    const size_t block = (size_t)rows * C, part = part_dinp ? (size_t)N * C : 0;
    const size_t stride = (part_dinp ? 2 : 1) * block + part;  // per thread
    wt = DeviceBuffer(this, nt * stride * sizeof(float), MemCategory::kWorkspace);
    float* const base = wt.f32();
#pragma omp parallel
    {
      float* g = base + omp_get_thread_num() * stride;  // the block's weight gradient
      float *w = g + block, *p = w + (part_dinp ? block : 0);
      std::fill_n(p, part, 0.f);
#pragma omp for schedule(static)
      for (int k = 0; k < chunks; ++k) {
        const int o0 = k * rows, r = std::min(rows, OC - o0);
        if (part_dinp) {
          convert_serial(static_cast<const char*>(weight_v.data) + (size_t)o0 * C * 2,
                         weight_v.dtype, w, DType::kF32, (size_t)r * C);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, r, 1.f, dout + o0, OC, w, C,
                      1.f, p, C);
        }
        if (g16) {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, C, N, 1.f, dout + o0, OC, inp, C,
                      0.f, g, C);
          const TensorRef gw = dweight + (size_t)o0 * C;  // rounded once, on this thread
          scale_add_serial(gw.data, gw.dtype, g, 1.f, true, (size_t)r * C);
        } else {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, C, N, 1.f, dout + o0, OC, inp, C,
                      1.f, static_cast<float*>(dweight.data) + (size_t)o0 * C, C);
        }
      }
#pragma omp for schedule(static)
      for (size_t i = 0; i < part; ++i) {
        float sum = dinp[i];
        for (int t = 0; t < nt; ++t) sum += base[t * stride + stride - part + i];
        dinp[i] = sum;
      }
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

// Linear layer via BLAS: out = inp @ W^T + b, W stored (OC, C) as nn.Linear.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "model/cpu/cpu_backend.h"

namespace zt {
namespace {

// A 16-bit weight, and its gradient, is handled a block of rows at a time, about 4 MiB of fp32
// per block, each thread widening its block (or computing its gradient) into a scratch block of
// its own and using it while it is in cache. Blocks of 1 MiB ran the GEMMs at about half speed
// (each block repacks the other operand, and few rows per call starve the kernel): the blocks'
// weight-gradient backward of gpt2-124m at B x T = 1 x 64 took 247 ms per step against fp32's
// 149, with 4 MiB 164-180 against 142-144 (flops_profiler, docs/benchmarks.md). The blocks of
// one call share one parallel region (OpenBLAS runs single-threaded inside it): one barrier per
// weight, not one per block, which on a 2-vCPU machine costs more than the GEMMs themselves at
// small batches. Their number is a multiple of the threads, rows split evenly among them.
constexpr size_t kBlockFloats = size_t{1} << 20;

// A (rows, cols) 16-bit weight in blocks of rows: block k is rows [begin(k), begin(k + 1)).
struct RowBlocks {
  int count, rows;
  RowBlocks(int rows_, int cols) : rows(rows_) {
    const int nt = omp_get_max_threads();
    const size_t want = ((size_t)rows * cols + kBlockFloats - 1) / kBlockFloats;
    count = (int)std::min<size_t>((want + nt - 1) / nt * nt, rows);
  }
  int begin(int k) const { return (int)((int64_t)k * rows / count); }
  int largest() const { return (rows + count - 1) / count; }
};

// Rows [o0, o0 + r) of a 16-bit (OC, C) weight, widened into w (r * C floats) on this thread.
void widen_rows(TensorView weight, int o0, int r, int C, float* w) {
  convert_serial((weight + (size_t)o0 * C).data, weight.dtype, w, DType::kF32, (size_t)r * C);
}

}  // namespace

void CpuBackend::matmul_forward(TensorRef out_a, TensorView inp_a, TensorView weight_v,
                                TensorView bias_v, int N, int C, int OC, int ld) {
  float* out = f32(out_a);
  if (ld == 0) ld = OC;
  const float* inp = f32(inp_a);
  DeviceBuffer wt, bt;
  const float* bias = widen(bias_v, OC, bt);
  if (N > 1 && weight_v.dtype != DType::kF32) {
    // A 16-bit weight a block of its rows at a time, each thread widening its own block into
    // cache and computing those output columns: the same sums as one GEMM on the widened weight
    // up to their order (OpenBLAS single-threaded may split K, = C, other than its threaded
    // driver, so the bits may differ for some C), but the widened weight is never written to
    // memory and read back.
    const RowBlocks blocks(OC, C);
    const size_t per_thread = (size_t)blocks.largest() * C;
    wt = DeviceBuffer(this, omp_get_max_threads() * per_thread * sizeof(float),
                      MemCategory::kWorkspace);
#pragma omp parallel for schedule(static)
    for (int k = 0; k < blocks.count; ++k) {
      const int o0 = blocks.begin(k), r = blocks.begin(k + 1) - o0;
      float* w = wt.f32() + omp_get_thread_num() * per_thread;
      widen_rows(weight_v, o0, r, C, w);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, C, 1.f, inp, C, w, C, 0.f,
                  out + o0, ld);
    }
  } else {
    const float* weight = widen(weight_v, (size_t)OC * C, wt);
    // out (N,OC) = inp (N,C) @ weight (OC,C)^T. One row (a decoding step) is a matrix-vector
    // product: sgemm would first copy the whole weight into its packed layout.
    if (N == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.f, weight, C, inp, 1, 0.f, out, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.f, inp, C, weight, C, 0.f,
                  out, ld);
  }
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[(size_t)n * ld + o] += bias[o];
  }
}

// At most this many fp32 elements (8 MiB) of a thread's part of the input gradient of a 16-bit
// weight: more rows than fit go in slabs of rows, each slab a pass that widens the weight again
// (a block's widening costs about 1 / (2 x slab rows) of its GEMM).
constexpr size_t kPartFloats = size_t{1} << 21;

void CpuBackend::matmul_backward(TensorRef dinp_a, TensorRef dweight, TensorRef dbias_g,
                                 TensorView dout_a, TensorView inp_a, TensorView weight_v, int N,
                                 int C, int OC, int ld) {
  float* dinp = f32(dinp_a);
  if (ld == 0) ld = OC;  // dout's row stride
  const float *dout = f32(dout_a), *inp = f32(inp_a);
  DeviceBuffer wt, bt;
  // dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T (OC,N) @ inp (N,C).
  // A 16-bit weight gradient gets each block's product added rounded once while it is in cache.
  // While the N rows fit one of OpenBLAS's K blocks its bits are those of an fp32 accumulator
  // from zeros folded afterwards (but +0 where the fold stored a -0 contribution); beyond, the
  // blocked GEMM may sum in another order, which moves a fraction of a percent of the values
  // by a 16-bit step (tests/unit/cpu_sixteen_bit_test.cc).
  const bool w16 = weight_v.dtype != DType::kF32, g16 = dweight.dtype != DType::kF32;
  if (dinp && !w16)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.f, dout, ld,
                static_cast<const float*>(weight_v.data), C, 1.f, dinp, C);
  if (!w16 && !g16) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.f, dout, ld, inp, C, 1.f,
                static_cast<float*>(dweight.data), C);
  } else {
    // Blocks of the weight's rows in one parallel region per slab of rows of dinp. Per block:
    // with a 16-bit weight, the block widened and dout[slab, block] @ block added into this
    // thread's part of dinp[slab]; in the first pass, the block's weight gradient. Then the
    // parts are summed into dinp[slab] (in another order than one GEMM: the same values up to
    // fp32 rounding, which depend on the thread count).
    const bool parts = dinp && w16;
    const RowBlocks blocks(OC, C);
    const size_t block = (size_t)blocks.largest() * C;
    const int slab = parts ? (int)std::clamp<size_t>(kPartFloats / C, 1, N) : N;
    const size_t part = parts ? (size_t)slab * C : 0;
    const size_t stride = (g16 ? block : 0) + (parts ? block + part : 0);  // per thread
    const int nt = omp_get_max_threads();
    wt = DeviceBuffer(this, nt * stride * sizeof(float), MemCategory::kWorkspace);
    float* const base = wt.f32();
    for (int n0 = 0; n0 == 0 || n0 < N; n0 += slab) {
      const int ns = std::min(slab, N - n0);
#pragma omp parallel
      {
        const int team = omp_get_num_threads();
        float* g = base + omp_get_thread_num() * stride;  // the block's weight gradient
        float* w = g + (g16 ? block : 0);                 // the widened block
        float* p = w + block;                             // this thread's part of dinp[slab]
        if (parts) std::fill_n(p, (size_t)ns * C, 0.f);
#pragma omp for schedule(static)
        for (int k = 0; k < blocks.count; ++k) {
          const int o0 = blocks.begin(k), r = blocks.begin(k + 1) - o0;
          if (parts) {
            widen_rows(weight_v, o0, r, C, w);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ns, C, r, 1.f,
                        dout + (size_t)n0 * ld + o0, ld, w, C, 1.f, p, C);
          }
          if (n0 > 0) continue;  // the weight gradient takes every row at once
          if (g16) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, C, N, 1.f, dout + o0, ld, inp,
                        C, 0.f, g, C);
            const TensorRef gw = dweight + (size_t)o0 * C;  // rounded once, on this thread
            scale_add_serial(gw.data, gw.dtype, g, 1.f, true, (size_t)r * C);
          } else {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, C, N, 1.f, dout + o0, ld, inp,
                        C, 1.f, static_cast<float*>(dweight.data) + (size_t)o0 * C, C);
          }
        }
        if (parts) {  // dinp[slab] += the parts, in thread order (after the loop's barrier)
          float* d = dinp + (size_t)n0 * C;
          const size_t n = (size_t)ns * C, piece = 4096;
#pragma omp for schedule(static)
          for (size_t i0 = 0; i0 < n; i0 += piece) {
            const size_t i1 = std::min(n, i0 + piece);
            for (int t = 0; t < team; ++t) {
              const float* q = base + t * stride + stride - part;
              for (size_t i = i0; i < i1; ++i) d[i] += q[i];
            }
          }
        }
      }
    }
  }
  if (dbias_g) {
    float* dbias = grad_sum(dbias_g, OC, bt);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      float s = 0.f;
      for (int n = 0; n < N; ++n) s += dout[(size_t)n * ld + o];
      dbias[o] += s;
    }
    finish_grad(dbias_g, dbias, OC);
  }
}

void CpuBackend::gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                          const float* b, int ldb, float* c, int ldc, float beta) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace zt

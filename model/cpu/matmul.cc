// Linear layer via BLAS: out = inp @ W^T + b, W stored (OC, C) as nn.Linear.
#include <cblas.h>

#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::matmul_forward(TensorRef out_a, TensorView inp_a, TensorView weight_v,
                                TensorView bias_v, int N, int C, int OC) {
  float* out = f32(out_a);
  const float* inp = f32(inp_a);
  std::vector<float> wt, bt, it;
  const float* weight = widen(weight_v, (size_t)OC * C, wt);
  const float* bias = widen(bias_v, OC, bt);
  inp = round_to(inp, (size_t)N * C, weight_v.dtype, it);
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

void CpuBackend::matmul_backward(TensorRef dinp_a, float* dweight, float* dbias, TensorView dout_a,
                                 TensorView inp_a, TensorView weight_v, int N, int C, int OC) {
  float* dinp = f32(dinp_a);
  const float *dout_f32 = f32(dout_a), *inp = f32(inp_a);
  std::vector<float> wt, it, dt;
  const float* weight = widen(weight_v, (size_t)OC * C, wt);
  inp = round_to(inp, (size_t)N * C, weight_v.dtype, it);
  const float* dout = round_to(dout_f32, (size_t)N * OC, weight_v.dtype, dt);
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.f, dout, OC, weight, C, 1.f,
                dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.f, dout, OC, inp, C, 1.f,
              dweight, C);
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      float s = 0.f;
      for (int n = 0; n < N; ++n) s += dout_f32[(size_t)n * OC + o];
      dbias[o] += s;
    }
  }
}

}  // namespace zt

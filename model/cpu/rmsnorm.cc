// RMSNorm over the last dim C, per row n (LLaMA):
//   rstd = 1/sqrt(sum x^2 / C + eps), y = x rstd w.
// Backward: dxhat = dy w; dx = rstd (dxhat - xhat mean(dxhat xhat)), xhat = x rstd;
//   dw += sum_n dy xhat.
// Fused residual forward: x += residual first, then the norm of the sum (same bits as the two ops).
#include <omp.h>

#include <cmath>
#include <vector>

#include "model/cpu/cpu_backend.h"

namespace zt {

namespace {

// One row: y (C) = RMSNorm(x (C)); returns rstd through s_out.
void rmsnorm_row(float* y, float* s_out, const float* x, const float* w, int C, float eps) {
  double ss = 0.0;
  for (int c = 0; c < C; ++c) ss += (double)x[c] * x[c];
  const float s = static_cast<float>(1.0 / std::sqrt(ss / C + eps));
  for (int c = 0; c < C; ++c) y[c] = x[c] * s * w[c];
  *s_out = s;
}

// The forward's rows; with `residual`, sum (N,C) += residual first and is the norm's input.
void rmsnorm_rows(float* out, float* rstd, const float* inp, float* sum, const float* residual,
                  const float* w, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t r = (size_t)n * C;
    if (residual)
      for (int c = 0; c < C; ++c) sum[r + c] += residual[r + c];
    rmsnorm_row(out + r, rstd + n, inp + r, w, C, eps);
  }
}

}  // namespace

void CpuBackend::rmsnorm_forward(TensorRef out, float* rstd, TensorView inp, TensorView w_v, int N,
                                 int C, float eps) {
  DeviceBuffer wt;
  rmsnorm_rows(f32(out), rstd, f32(inp), nullptr, nullptr, widen(w_v, C, wt), N, C, eps);
}

void CpuBackend::residual_rmsnorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                          float* rstd, TensorView w_v, int N, int C, float eps) {
  DeviceBuffer wt;
  rmsnorm_rows(f32(out), rstd, f32(x), f32(x), f32(residual), widen(w_v, C, wt), N, C, eps);
}

void CpuBackend::rmsnorm_backward(TensorRef dinp_a, TensorRef dw_g, TensorView dout_a,
                                  TensorView inp_a, TensorView w_v, const float* rstd, int N,
                                  int C) {
  float* dinp = f32(dinp_a);
  const float *dout = f32(dout_a), *inp = f32(inp_a);
  DeviceBuffer wt;
  const float* w = widen(w_v, C, wt);
  const int nt = omp_get_max_threads();
  std::vector<float> part((size_t)nt * C, 0.f);
#pragma omp parallel
  {
    float* pdw = part.data() + (size_t)omp_get_thread_num() * C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = inp + (size_t)n * C;
      const float* dy = dout + (size_t)n * C;
      float* dx = dinp + (size_t)n * C;
      const float s = rstd[n];
      float mean_dxhat_xhat = 0.f;
      for (int c = 0; c < C; ++c) mean_dxhat_xhat += dy[c] * w[c] * x[c] * s;
      mean_dxhat_xhat /= C;
      for (int c = 0; c < C; ++c) {
        const float xhat = x[c] * s;
        pdw[c] += dy[c] * xhat;
        dx[c] += s * (dy[c] * w[c] - xhat * mean_dxhat_xhat);
      }
    }
  }
  DeviceBuffer dwt;
  float* dw = grad_sum(dw_g, C, dwt);
  for (int t = 0; t < nt; ++t)
    for (int c = 0; c < C; ++c) dw[c] += part[(size_t)t * C + c];
  finish_grad(dw_g, dw, C);
}

}  // namespace zt

// LayerNorm over the last dim C, per row n:
//   mean = sum x / C, var = sum (x-mean)^2 / C, rstd = 1/sqrt(var+eps), xhat = (x-mean) rstd,
//   y = xhat w + b.
// Backward: dxhat = dy w; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat));
//   dw += sum_n dy xhat; db += sum_n dy.
// Fused residual forward: x += residual first, then the norm of the sum (same bits as the two ops).
#include <omp.h>

#include <cmath>
#include <vector>

#include "model/cpu/cpu_backend.h"

namespace zt {

namespace {

// One row: y (C) = LayerNorm(x (C)); returns mean and rstd through m_out and s_out.
void layernorm_row(float* y, float* m_out, float* s_out, const float* x, const float* w,
                   const float* b, int C, float eps) {
  double m = 0.0;
  for (int c = 0; c < C; ++c) m += x[c];
  m /= C;
  double var = 0.0;
  for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  var /= C;
  const float s = static_cast<float>(1.0 / std::sqrt(var + eps));
  for (int c = 0; c < C; ++c) y[c] = (x[c] - static_cast<float>(m)) * s * w[c] + b[c];
  *m_out = static_cast<float>(m);
  *s_out = s;
}

// The forward's rows; with `residual`, sum (N,C) += residual first and is the norm's input.
void layernorm_rows(float* out, float* mean, float* rstd, const float* inp, float* sum,
                    const float* residual, const float* w, const float* b, int N, int C,
                    float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t r = (size_t)n * C;
    if (residual)  // the row's sum is still in cache when its norm reads it
      for (int c = 0; c < C; ++c) sum[r + c] += residual[r + c];
    layernorm_row(out + r, mean + n, rstd + n, inp + r, w, b, C, eps);
  }
}

}  // namespace

void CpuBackend::layernorm_forward(TensorRef out, float* mean, float* rstd, TensorView inp,
                                   TensorView w_v, TensorView b_v, int N, int C, float eps) {
  DeviceBuffer wt, bt;
  layernorm_rows(f32(out), mean, rstd, f32(inp), nullptr, nullptr, widen(w_v, C, wt),
                 widen(b_v, C, bt), N, C, eps);
}

void CpuBackend::residual_layernorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                            float* mean, float* rstd, TensorView w_v,
                                            TensorView b_v, int N, int C, float eps) {
  DeviceBuffer wt, bt;
  layernorm_rows(f32(out), mean, rstd, f32(x), f32(x), f32(residual), widen(w_v, C, wt),
                 widen(b_v, C, bt), N, C, eps);
}

void CpuBackend::layernorm_backward(TensorRef dinp_a, TensorRef dw_g, TensorRef db_g,
                                    TensorView dout_a, TensorView inp_a, TensorView w_v,
                                    const float* mean, const float* rstd, int N, int C) {
  float* dinp = f32(dinp_a);
  const float *dout = f32(dout_a), *inp = f32(inp_a);
  DeviceBuffer wt;
  const float* w = widen(w_v, C, wt);
  // Per-thread partial dw/db, reduced at the end: rows run in parallel without races.
  const int nt = omp_get_max_threads();
  std::vector<float> part((size_t)nt * 2 * C, 0.f);
#pragma omp parallel
  {
    float* pdw = part.data() + (size_t)omp_get_thread_num() * 2 * C;
    float* pdb = pdw + C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = inp + (size_t)n * C;
      const float* dy = dout + (size_t)n * C;
      float* dx = dinp + (size_t)n * C;
      const float m = mean[n], s = rstd[n];
      float mean_dxhat = 0.f, mean_dxhat_xhat = 0.f;
      for (int c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * s;
        const float dxhat = dy[c] * w[c];
        mean_dxhat += dxhat;
        mean_dxhat_xhat += dxhat * xhat;
      }
      mean_dxhat /= C;
      mean_dxhat_xhat /= C;
      for (int c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * s;
        const float dxhat = dy[c] * w[c];
        pdb[c] += dy[c];
        pdw[c] += dy[c] * xhat;
        dx[c] += s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  }
  DeviceBuffer dwt, dbt;
  float *dw = grad_sum(dw_g, C, dwt), *db = grad_sum(db_g, C, dbt);
  for (int t = 0; t < nt; ++t)
    for (int c = 0; c < C; ++c) {
      dw[c] += part[(size_t)t * 2 * C + c];
      db[c] += part[(size_t)t * 2 * C + C + c];
    }
  finish_grad(dw_g, dw, C);
  finish_grad(db_g, db, C);
}

}  // namespace zt

// LayerNorm over the last dim C, per row n:
//   mean = sum x / C, var = sum (x-mean)^2 / C, rstd = 1/sqrt(var+eps), xhat = (x-mean) rstd,
//   y = xhat w + b.
// Backward: dxhat = dy w; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat));
//   dw += sum_n dy xhat; db += sum_n dy.
#include <omp.h>

#include <cmath>
#include <vector>

#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                   TensorView w_v, TensorView b_v, int N, int C, float eps) {
  std::vector<float> wt, bt;
  const float* w = widen(w_v, C, wt);
  const float* b = widen(b_v, C, bt);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + (size_t)n * C;
    double m = 0.0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const float s = static_cast<float>(1.0 / std::sqrt(var + eps));
    float* y = out + (size_t)n * C;
    for (int c = 0; c < C; ++c) y[c] = (x[c] - static_cast<float>(m)) * s * w[c] + b[c];
    mean[n] = static_cast<float>(m);
    rstd[n] = s;
  }
}

void CpuBackend::layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                    const float* inp, TensorView w_v, const float* mean,
                                    const float* rstd, int N, int C) {
  std::vector<float> wt;
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
  for (int t = 0; t < nt; ++t)
    for (int c = 0; c < C; ++c) {
      dw[c] += part[(size_t)t * 2 * C + c];
      db[c] += part[(size_t)t * 2 * C + C + c];
    }
}

}  // namespace zt

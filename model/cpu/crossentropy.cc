// Fused softmax + cross-entropy with an ignore index, per row n of logits (N,V):
//   p = softmax(z), loss_n = -log p[y_n];  dz = (p - onehot(y_n)) * scale.
// Rows with y_n < 0 (PyTorch's ignore_index -100) get loss 0 and zero gradient.
#include <cmath>

#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::crossentropy_forward_backward(float* logits, float* losses, const int* targets,
                                               int N, int V, float dlogits_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* z = logits + (size_t)n * V;
    const int y = targets[n];
    if (y < 0) {
      losses[n] = 0.f;
      if (dlogits_scale != 0.f)
        for (int v = 0; v < V; ++v) z[v] = 0.f;
      continue;
    }
    float maxv = -INFINITY;
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(z[v] - maxv);
    const double logsum = std::log(sum) + maxv;
    losses[n] = static_cast<float>(logsum - z[y]);
    if (dlogits_scale != 0.f) {
      for (int v = 0; v < V; ++v)
        z[v] = static_cast<float>(std::exp(z[v] - logsum)) * dlogits_scale;
      z[y] -= dlogits_scale;
    }
  }
}

}  // namespace zt

// Fused softmax + cross-entropy with an ignore index, per row n of logits (N,V):
//   p = softmax(z), loss_n = -log p[y_n];  dz = (p - onehot(y_n)) * scale.
// Rows with y_n < 0 (PyTorch's ignore_index -100) get loss 0 and zero gradient.
// One exp per logit (kept in place when the gradient is wanted): with a 32k vocabulary this
// loop costs about as much as the classifier GEMM, so it is written to vectorise.
#include <cmath>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/vec_math.h"

namespace zt {

void CpuBackend::crossentropy_forward_backward(TensorRef logits_a, int ld, float* losses,
                                               const int* targets, int N, int V,
                                               float dlogits_scale) {
  float* logits = f32(logits_a);
  const bool grad = dlogits_scale != 0.f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* z = logits + (size_t)n * ld;
    const int y = targets[n];
    if (y < 0) {
      losses[n] = 0.f;
      if (grad)
        for (int v = 0; v < V; ++v) z[v] = 0.f;
      continue;
    }
    float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
    const float zy = z[y];
    float sum = 0.f;
    if (grad) {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < V; ++v) {
        z[v] = exp_fast(z[v] - maxv);
        sum += z[v];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < V; ++v) sum += exp_fast(z[v] - maxv);
    }
    losses[n] = std::log(sum) + maxv - zy;
    if (grad) {
      const float s = dlogits_scale / sum;
#pragma omp simd
      for (int v = 0; v < V; ++v) z[v] *= s;
      z[y] -= dlogits_scale;
    }
  }
}

}  // namespace zt

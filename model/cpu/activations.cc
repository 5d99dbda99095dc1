// Pointwise MLP activations.
// GELU, tanh form (GPT-2's gelu_new): y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3);
//   dy/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2).
// SwiGLU (Shazeer, LLaMA's MLP): y = silu(g) u, silu(g) = g sigmoid(g);
//   dg = dy u sigmoid(g) (1 + g (1 - sigmoid(g))), du = dy silu(g).
#include <cmath>

#include "model/cpu/cpu_backend.h"

namespace zt {

static constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

void CpuBackend::gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void CpuBackend::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float th = std::tanh(kGeluScale * (x + 0.044715f * x * x * x));
    const float du = kGeluScale * (1.f + 3.f * 0.044715f * x * x);
    dinp[i] = dout[i] * (0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du);
  }
}

void CpuBackend::swiglu_forward(float* out, const float* inp, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + (size_t)n * 2 * I;
    const float* u = g + I;
    float* y = out + (size_t)n * I;
    for (int i = 0; i < I; ++i) y[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }
}

void CpuBackend::swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + (size_t)n * 2 * I;
    const float* u = g + I;
    const float* dy = dout + (size_t)n * I;
    float* dg = dinp + (size_t)n * 2 * I;
    float* du = dg + I;
    for (int i = 0; i < I; ++i) {
      const float sig = 1.f / (1.f + std::exp(-g[i]));
      dg[i] = dy[i] * u[i] * sig * (1.f + g[i] * (1.f - sig));
      du[i] = dy[i] * g[i] * sig;
    }
  }
}

}  // namespace zt

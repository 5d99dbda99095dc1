// Pointwise MLP activations.
// GELU, tanh form (GPT-2's gelu_new): y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
//   Computed as y = x s with s = (1 + tanh u)/2 = sigmoid(2u) = 1 / (1 + e^(-2u)): the same
//   function, without the cancellation of 1 + tanh u for very negative x, and with exp_fast
//   (model/cpu/vec_math.h), which the compiler vectorises where std::tanh stays a scalar call.
//   dy/dx = s + 2 x s (1 - s) du, du = sqrt(2/pi) (1 + 3*0.044715 x^2) (as (1 - tanh^2 u)/2 =
//   2 s (1 - s)).
// SwiGLU (Shazeer, LLaMA's MLP): y = silu(g) u, silu(g) = g sigmoid(g);
//   dg = dy u sigmoid(g) (1 + g (1 - sigmoid(g))), du = dy silu(g).
#include <cmath>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/vec_math.h"

namespace zt {

static constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

static inline float gelu_sigmoid(float x) {  // s = sigmoid(2u)
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 1.f / (1.f + exp_fast(-2.f * u));
}
static inline float sigmoid(float g) { return 1.f / (1.f + exp_fast(-g)); }

void CpuBackend::gelu_forward(TensorRef out_a, TensorView inp_a, size_t n) {
  float* out = f32(out_a);
  const float* inp = f32(inp_a);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = inp[i] * gelu_sigmoid(inp[i]);
}

void CpuBackend::gelu_backward(TensorRef dinp_a, TensorView inp_a, TensorView dout_a, size_t n) {
  float* dinp = f32(dinp_a);
  const float *inp = f32(inp_a), *dout = f32(dout_a);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i], s = gelu_sigmoid(x);
    const float du = kGeluScale * (1.f + 3.f * 0.044715f * x * x);
    dinp[i] = dout[i] * (s + 2.f * x * s * (1.f - s) * du);
  }
}

void CpuBackend::swiglu_forward(TensorRef out_a, TensorView inp_a, int N, int I) {
  float* out = f32(out_a);
  const float* inp = f32(inp_a);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + (size_t)n * 2 * I;
    const float* u = g + I;
    float* y = out + (size_t)n * I;
#pragma omp simd
    for (int i = 0; i < I; ++i) y[i] = g[i] * sigmoid(g[i]) * u[i];
  }
}

void CpuBackend::swiglu_backward(TensorRef dinp_a, TensorView dout_a, TensorView inp_a, int N,
                                 int I) {
  float* dinp = f32(dinp_a);
  const float *dout = f32(dout_a), *inp = f32(inp_a);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + (size_t)n * 2 * I;
    const float* u = g + I;
    const float* dy = dout + (size_t)n * I;
    float* dg = dinp + (size_t)n * 2 * I;
    float* du = dg + I;
#pragma omp simd
    for (int i = 0; i < I; ++i) {
      const float sig = sigmoid(g[i]);
      dg[i] = dy[i] * u[i] * sig * (1.f + g[i] * (1.f - sig));
      du[i] = dy[i] * g[i] * sig;
    }
  }
}

}  // namespace zt

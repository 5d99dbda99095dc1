// Token (and GPT-2 learned position) embeddings: out[b,t] = wte[tok[b,t]] + wpe[p], p = t or,
// in packed rows, pos[b,t].
#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::embedding_forward(TensorRef out_a, const int* tokens, const void* wte,
                                   const void* wpe, DType t, int B, int T, int C, const int* pos) {
  float* out = f32(out_a);
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    const size_t e = (size_t)tokens[bt] * C, p = (size_t)(pos ? pos[bt] : bt % T) * C;
    float* o = out + (size_t)bt * C;
    for (int c = 0; c < C; ++c)
      o[c] = load_f32(wte, t, e + c) + (wpe ? load_f32(wpe, t, p + c) : 0.f);
  }
}

void CpuBackend::embedding_backward(float* dwte, float* dwpe, TensorView dout_a, const int* tokens,
                                    int B, int T, int C, const int* pos) {
  const float* dout = f32(dout_a);
  // Scatter-add: repeated tokens collide, so parallelise over channels instead of rows.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    for (int bt = 0; bt < B * T; ++bt) {
      const float g = dout[(size_t)bt * C + c];
      dwte[(size_t)tokens[bt] * C + c] += g;
      if (dwpe) dwpe[(size_t)(pos ? pos[bt] : bt % T) * C + c] += g;
    }
  }
}

}  // namespace zt

// GELU in its tanh form (GPT-2's gelu_new; equations in model/cpu/activations.cc) and its
// derivative, in fp32: the element-wise kernels' (activations.cu) and the emulated cuBLASLt
// epilogues' (emu/runtime.cc), so the two paths of a GPU run compute the same function.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ (the emulation's, in its builds)

#include <cmath>

namespace zt {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

__host__ __device__ inline float gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
}
// d gelu / dx at x.
__host__ __device__ inline float gelu_tanh_grad(float x) {
  const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  const float du = kGeluScale * (1.f + 3.f * 0.044715f * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du;
}

}  // namespace zt

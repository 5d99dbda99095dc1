// The AdamW update of one fp32 element, shared by the CPU kernels (model/cpu/cpu_adam.cc, whose
// SIMD paths repeat these operations in this order) and the CUDA kernel, so every backend
// computes the same thing (Loshchilov & Hutter 2019, Algorithm 2; torch.optim.AdamW and
// DeepSpeed's FusedAdam / CPUAdam with adam_w_mode):
//   g = grad * grad_scale  (+ wd p when !adam_w_mode: L2 regularisation, classic Adam)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p *= 1 - lr wd  (adam_w_mode);  p -= step m / (sqrt(v) / sqrt(bc2) + eps),  step = lr / bc1
// bc1 = 1 - b1^t and bc2 = 1 - b2^t are the bias corrections of step t (1 when off).
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

// One optimizer step's scalars: DeepSpeed's optimizer.params, the step's learning rate, and
// the factor every gradient is multiplied by first (1/loss_scale times the clip coefficient,
// so unscaling and clipping cost no pass of their own).
// Hyper-parameters are doubles, as in the config and in PyTorch, so derived constants such as
// 1 - beta2 are exact before their one rounding to fp32 (1 - 0.999f is 1.3e-5 off 0.001).
struct AdamStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int t = 1;  // step number, >= 1
  double grad_scale = 1;
  bool adam_w_mode = true;  // decoupled weight decay; false: L2 added to the gradient
  bool bias_correction = true;
  // The gradient is consumed: zeros are written back as it is read, which replaces the
  // separate zeroing pass of the next step's accumulation (the line is already in cache).
  bool zero_grad = false;
};

// The per-step constants of the element update, each computed in double and rounded once.
struct AdamCoefs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd, decay, step, bc2_sqrt,
      grad_scale;
  bool adam_w_mode, zero_grad;
};

inline AdamCoefs adam_coefs(const AdamStep& s) {
  const double bc1 = s.bias_correction ? 1.0 - std::pow(s.beta1, s.t) : 1.0;
  const double bc2 = s.bias_correction ? 1.0 - std::pow(s.beta2, s.t) : 1.0;
  AdamCoefs c;
  c.beta1 = (float)s.beta1, c.beta2 = (float)s.beta2;
  c.one_minus_beta1 = (float)(1.0 - s.beta1), c.one_minus_beta2 = (float)(1.0 - s.beta2);
  c.eps = (float)s.eps, c.wd = (float)s.weight_decay;
  c.decay = (float)(1.0 - s.lr * s.weight_decay);  // torch.optim.AdamW: p *= 1 - lr wd
  c.step = (float)(s.lr / bc1), c.bc2_sqrt = (float)std::sqrt(bc2);
  c.grad_scale = (float)s.grad_scale, c.adam_w_mode = s.adam_w_mode, c.zero_grad = s.zero_grad;
  return c;
}

// Single fp32 operations, each rounded to nearest: no fused multiply-add on either side (the
// CPU files that use them compile with -ffp-contract=off; nvcc would contract a * b + c), so
// the CPU's vector paths and the CUDA kernel give the scalar path's bits.
ZT_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
ZT_HOST_DEVICE inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Returns the updated parameter; m and v are updated in place. Each operation rounds once, in
// this order (model/cpu/cpu_adam.cc's vector paths repeat it).
ZT_HOST_DEVICE inline float adamw_element(float p, float grad, float& m, float& v,
                                          const AdamCoefs& c) {
  float g = mul_rn(grad, c.grad_scale);
  if (!c.adam_w_mode) g = add_rn(g, mul_rn(c.wd, p));
  m = add_rn(mul_rn(c.beta1, m), mul_rn(c.one_minus_beta1, g));
  v = add_rn(mul_rn(c.beta2, v), mul_rn(mul_rn(c.one_minus_beta2, g), g));
  if (c.adam_w_mode) p = mul_rn(p, c.decay);
  return add_rn(p, -(mul_rn(c.step, m) / add_rn(sqrtf(v) / c.bc2_sqrt, c.eps)));
}

}  // namespace zt

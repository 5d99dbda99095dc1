// The optimizers' element updates, shared by the CPU kernels (model/cpu/cpu_adam.cc,
// model/cpu/optimizer_step.cc) and the CUDA kernel (model/cuda/optimizer.cu), so every backend
// computes the same bits. Each optimizer keeps an fp32 master weight and `num_states` fp32
// state tensors per parameter (optimizer_info), the names torch.optim gives them:
//
// AdamW (Loshchilov & Hutter 2019, Algorithm 2; torch.optim.AdamW, DeepSpeed's FusedAdam and
// CPUAdam with adam_w_mode), states exp_avg (m) and exp_avg_sq (v):
//   g = grad * grad_scale  (+ wd p when !adam_w_mode: L2 regularisation, classic Adam)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p *= 1 - lr wd  (adam_w_mode);  p -= step m / (sqrt(v) / sqrt(bc2) + eps),  step = lr / bc1
//   bc1 = 1 - b1^t and bc2 = 1 - b2^t are the bias corrections of step t (1 when off).
// Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023, Algorithm 2;
// DeepSpeed's FusedLion and DeepSpeedCPULion), state exp_avg (m):
//   g = grad * grad_scale;  c = b1 m + (1-b1) g
//   p *= 1 - lr wd;  p -= lr sign(c);  m = b2 m + (1-b2) g
// Adagrad (Duchi et al. 2011; torch.optim.Adagrad, DeepSpeedCPUAdagrad), state sum:
//   g = grad * grad_scale + wd p;  sum += g^2
//   p -= clr g / (sqrt(sum) + eps),  clr = lr / (1 + (t - 1) lr_decay)
// Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers"; DeepSpeed's Muon,
// MuonWithAuxAdam's muon_update), states exp_avg (the momentum buffer) and exp_avg_sq: the
// hidden matrices (OptimizerStep::muon_spans) take two passes around an orthogonalisation the
// element updates cannot do (model/newton_schulz.h, which needs the whole matrix):
//   1. g = grad * grad_scale;  m = lerp(m, g, 1 - mu);  u = lerp(g, m, mu)  (Nesterov), to out
//   2. o = NS5(u) sqrt(max(1, rows / cols)) arrives as the gradient: p *= 1 - lr wd;  p -= lr o
// Every other element (embeddings, head, norms, biases) is AdamW above in pass 1 (its
// exp_avg_sq unused on the matrices) and only written out in pass 2.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

enum class OptimizerKind { kAdamW, kLion, kAdagrad, kMuon };

// Every optimizer keeps at most this many state tensors beside the master weights.
inline constexpr int kMaxOptimizerStates = 2;

// What an optimizer keeps: its state tensors, named as torch.optim names them (checkpoints
// store them by these names), each one fp32 element per parameter.
// whole_matrices: its update needs each hidden matrix whole (a gather of the matrices and a
// matrix step between element passes, zero/optimizer_rule.h), not element by element.
struct OptimizerInfo {
  const char* name;  // as the ds_config's optimizer.type spells it
  int num_states;
  const char* state_names[kMaxOptimizerStates];
  bool whole_matrices = false;
};
inline const OptimizerInfo& optimizer_info(OptimizerKind k) {
  static constexpr OptimizerInfo kInfo[] = {{"AdamW", 2, {"exp_avg", "exp_avg_sq"}},
                                            {"Lion", 1, {"exp_avg", nullptr}},
                                            {"Adagrad", 1, {"sum", nullptr}},
                                            {"Muon", 2, {"exp_avg", "exp_avg_sq"}, true}};
  return kInfo[static_cast<int>(k)];
}
// K of the ZeRO paper (Rajbhandari et al., SC20, Section 3.1): optimizer bytes per parameter,
// the fp32 master (unless the fp32 working copy is the master) and 4 bytes per state.
inline int optimizer_bytes_per_param(OptimizerKind k, bool master_is_working_copy) {
  return (master_is_working_copy ? 0 : 4) + 4 * optimizer_info(k).num_states;
}

// One optimizer step's scalars: DeepSpeed's optimizer.params, the step's learning rate, and
// the factor every gradient is multiplied by first (1/loss_scale times the clip coefficient,
// so unscaling and clipping cost no pass of their own). Each optimizer reads the fields its
// update above names.
// Hyper-parameters are doubles, as in the config and in PyTorch, so derived constants such as
// 1 - beta2 are exact before their one rounding to fp32 (1 - 0.999f is 1.3e-5 off 0.001).
struct OptimizerStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int t = 1;  // step number, >= 1
  double grad_scale = 1;
  bool adam_w_mode = true;  // AdamW: decoupled weight decay; false: L2 added to the gradient
  bool bias_correction = true;
  // The gradient is consumed: zeros are written back as it is read, which replaces the
  // separate zeroing pass of the next step's accumulation (the line is already in cache).
  bool zero_grad = false;
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr_decay = 0;  // Adagrad
  // Muon: the momentum mu, the pass (1 or 2, above), and the hidden matrices' elements of the
  // unit's owned slice as sorted [begin, end) pairs (2 * num_muon_spans values, host memory);
  // `offset` is the owned index of this call's element 0 (an offloaded state's tiles).
  double momentum = 0.95;
  double aux_lr = -1;  // Muon: its AdamW elements' learning rate (< 0: lr), the other half's
  int muon_pass = 1;
  const size_t* muon_spans = nullptr;
  int num_muon_spans = 0;
  size_t offset = 0;
};

// Splits a Muon call's n elements at its hidden matrices: fn(begin, end, muon) for each run of
// elements in [0, n) that are all in a matrix (muon) or all not, in order. Host code.
template <class Fn>
void for_each_muon_run(const OptimizerStep& s, size_t n, Fn fn) {
  size_t pos = 0;
  for (int k = 0; k < s.num_muon_spans && pos < n; ++k) {
    const size_t b = s.muon_spans[2 * k], e = s.muon_spans[2 * k + 1];
    if (e <= s.offset + pos) continue;
    const size_t begin = b > s.offset ? b - s.offset : 0, end = e - s.offset;
    if (begin >= n) break;
    if (begin > pos) fn(pos, begin, false);
    pos = begin > pos ? begin : pos;
    const size_t stop = end < n ? end : n;
    fn(pos, stop, true);
    pos = stop;
  }
  if (pos < n) fn(pos, n, false);
}

// The per-step constants of the element update, each computed in double and rounded once.
struct AdamCoefs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd, decay, step, bc2_sqrt, grad_scale;
  bool adam_w_mode, zero_grad;
};

inline AdamCoefs adam_coefs(const OptimizerStep& s) {
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

// Lion's and Adagrad's per-step constants, each computed in double and rounded once.
struct LionCoefs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, decay, lr, grad_scale;
};
inline LionCoefs lion_coefs(const OptimizerStep& s) {
  return {(float)s.beta1,
          (float)s.beta2,
          (float)(1.0 - s.beta1),
          (float)(1.0 - s.beta2),
          (float)(1.0 - s.lr * s.weight_decay),
          (float)s.lr,
          (float)s.grad_scale};
}
struct AdagradCoefs {
  float wd, clr, eps, grad_scale;
};
inline AdagradCoefs adagrad_coefs(const OptimizerStep& s) {
  return {(float)s.weight_decay, (float)(s.lr / (1.0 + (s.t - 1) * s.lr_decay)), (float)s.eps,
          (float)s.grad_scale};
}

// The step Muon's AdamW elements take: s at their own learning rate (DeepSpeed's MuonWithAuxAdam
// gives each half its lr: params.adam_lr and muon_lr, scheduled each on its own).
inline OptimizerStep muon_adam_half(const OptimizerStep& s) {
  OptimizerStep a = s;
  if (s.aux_lr >= 0) a.lr = s.aux_lr;
  return a;
}

// Muon's per-step constants (pass 1: the momentum; pass 2: decay and learning rate).
struct MuonCoefs {
  float mu, one_minus_mu, decay, lr, grad_scale;
};
inline MuonCoefs muon_coefs(const OptimizerStep& s) {
  return {(float)s.momentum, (float)(1.0 - s.momentum), (float)(1.0 - s.lr * s.weight_decay),
          (float)s.lr, (float)s.grad_scale};
}

// Pass 1 on a matrix element: returns u; m is updated in place. torch.lerp's two branches:
// m + w (g - m) for w = 1 - mu < 0.5, then m - (m - g) (1 - mu) for weight mu >= 0.5.
ZT_HOST_DEVICE inline float muon_momentum_element(float grad, float& m, const MuonCoefs& c) {
  const float g = mul_rn(grad, c.grad_scale);
  m = add_rn(m, mul_rn(c.one_minus_mu, add_rn(g, -m)));
  return add_rn(m, -mul_rn(add_rn(m, -g), c.one_minus_mu));
}
// Pass 2 on a matrix element: returns the updated parameter, o its orthogonalised update.
ZT_HOST_DEVICE inline float muon_apply_element(float p, float o, const MuonCoefs& c) {
  return add_rn(mul_rn(p, c.decay), -mul_rn(c.lr, o));
}

// sign(c) as torch.sign: +-1, zero for zero, NaN for NaN (c * 0).
ZT_HOST_DEVICE inline float sign_of(float c) { return c > 0.f ? 1.f : c < 0.f ? -1.f : c * 0.f; }

// Returns the updated parameter; m is updated in place.
ZT_HOST_DEVICE inline float lion_element(float p, float grad, float& m, const LionCoefs& c) {
  const float g = mul_rn(grad, c.grad_scale);
  const float u = add_rn(mul_rn(c.beta1, m), mul_rn(c.one_minus_beta1, g));
  p = mul_rn(p, c.decay);
  p = add_rn(p, -mul_rn(c.lr, sign_of(u)));
  m = add_rn(mul_rn(c.beta2, m), mul_rn(c.one_minus_beta2, g));
  return p;
}

// Returns the updated parameter; sum is updated in place. torch's addcdiv order:
// p + (-clr * g) / (sqrt(sum) + eps).
ZT_HOST_DEVICE inline float adagrad_element(float p, float grad, float& sum,
                                            const AdagradCoefs& c) {
  float g = mul_rn(grad, c.grad_scale);
  g = add_rn(g, mul_rn(c.wd, p));
  sum = add_rn(sum, mul_rn(g, g));
  return add_rn(p, mul_rn(-c.clr, g) / add_rn(sqrtf(sum), c.eps));
}

}  // namespace zt

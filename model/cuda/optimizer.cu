// Fused optimizer step on fp32 master weights: typed gradient in, typed working copy out, in
// one pass; the element updates are model/optimizer_math.h's (as model/cpu/optimizer_step.cc
// on the CPU), so both backends give the same bits. It is multi-tensor by layout: the engine
// calls it once per unit, and a unit is one flat buffer holding every tensor of a block
// (docs/architecture.md), so a step launches L + 2 kernels however many tensors the model has,
// which is what PyTorch's multi_tensor_apply gets by batching lists.
#include "model/cuda/cuda_backend.cuh"
#include "model/optimizer_math.h"

namespace zt {
namespace {

__global__ void adamw_kernel(float* master, void* grad, DType gt, float* m, float* v, void* out,
                             DType ot, size_t n, AdamCoefs c) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float p = adamw_element(master[i], load_as_f32(grad, gt, i), m[i], v[i], c);
  master[i] = p;
  if (c.zero_grad) store_from_f32(grad, gt, i, 0.f);
  if (out) store_from_f32(out, ot, i, p);
}

// Lion and Adagrad: one state tensor each.
template <OptimizerKind K, class Coefs>
__global__ void one_state_kernel(float* master, void* grad, DType gt, float* state, void* out,
                                 DType ot, size_t n, bool zero_grad, Coefs c) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = load_as_f32(grad, gt, i);
  float p;
  if constexpr (K == OptimizerKind::kLion)
    p = lion_element(master[i], g, state[i], c);
  else
    p = adagrad_element(master[i], g, state[i], c);
  master[i] = p;
  if (zero_grad) store_from_f32(grad, gt, i, 0.f);
  if (out) store_from_f32(out, ot, i, p);
}

// Muon on a run of matrix elements: pass 1 writes u (the state is the momentum), pass 2 applies
// the orthogonalised update that arrives as the gradient.
__global__ void muon_kernel(float* master, void* grad, DType gt, float* m, void* out, DType ot,
                            size_t n, int pass, bool zero_grad, MuonCoefs c) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = load_as_f32(grad, gt, i);
  float r;
  if (pass == 1) {
    r = muon_momentum_element(g, m[i], c);
    if (zero_grad) store_from_f32(grad, gt, i, 0.f);
  } else {
    r = master[i] = muon_apply_element(master[i], g, c);
  }
  if (out) store_from_f32(out, ot, i, r);
}

}  // namespace

void CudaBackend::optimizer_update(float* master, void* grad, DType grad_t, float* const* states,
                                   void* out, DType out_t, size_t n, const OptimizerStep& s) {
  if (n == 0) return;
  switch (s.kind) {
    case OptimizerKind::kAdamW:
      launch_kernel(adamw_kernel, blocks_for(n), kThreads, stream_, master, grad, grad_t, states[0],
                    states[1], out, out_t, n, adam_coefs(s));
      break;
    case OptimizerKind::kLion:
      launch_kernel(one_state_kernel<OptimizerKind::kLion, LionCoefs>, blocks_for(n), kThreads,
                    stream_, master, grad, grad_t, states[0], out, out_t, n, s.zero_grad,
                    lion_coefs(s));
      break;
    case OptimizerKind::kAdagrad:
      launch_kernel(one_state_kernel<OptimizerKind::kAdagrad, AdagradCoefs>, blocks_for(n),
                    kThreads, stream_, master, grad, grad_t, states[0], out, out_t, n, s.zero_grad,
                    adagrad_coefs(s));
      break;
    case OptimizerKind::kMuon: {
      // One launch per run of matrix or other elements (a unit has a handful of each).
      const size_t gb = dtype_size(grad_t), ob = dtype_size(out_t);
      for_each_muon_run(s, n, [&](size_t b, size_t e, bool muon) {
        void* g = static_cast<char*>(grad) + b * gb;
        void* o = out ? static_cast<char*>(out) + b * ob : nullptr;
        if (muon)
          launch_kernel(muon_kernel, blocks_for(e - b), kThreads, stream_, master + b, g, grad_t,
                        states[0] + b, o, out_t, e - b, s.muon_pass, s.zero_grad, muon_coefs(s));
        else if (s.muon_pass == 1)
          launch_kernel(adamw_kernel, blocks_for(e - b), kThreads, stream_, master + b, g, grad_t,
                        states[0] + b, states[1] + b, o, out_t, e - b,
                        adam_coefs(muon_adam_half(s)));
        else if (o)
          convert(master + b, DType::kF32, o, out_t, e - b);
      });
      break;
    }
  }
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt

#include "zero/engine.h"

#include <cmath>

#include "common/status.h"

namespace zt {

struct Engine::UnitState {
  size_t numel = 0;
  DeviceBuffer params;   // working copy, param_dtype
  DeviceBuffer master;   // fp32; empty when params are fp32 (params are the master)
  DeviceBuffer m, v;     // fp32 Adam moments
  DeviceBuffer grads;    // stored gradients, grad_dtype
  DeviceBuffer fetched;  // fp32 view while fetched (param_dtype != fp32)
  DeviceBuffer scratch;  // fp32 gradient accumulator during backward (grad_dtype != fp32)
  int live = 0;          // nested fetch count
  float* master_f32() const { return master.data() ? master.f32() : params.f32(); }
};

Engine::Engine(const ParamLayout& layout, Backend* be, const EngineOptions& opt)
    : layout_(layout), be_(be), opt_(opt), units_(layout.num_units()) {
  for (int u = 0; u < layout.num_units(); ++u) {
    UnitState& s = units_[u];
    s.numel = layout.units()[u].numel;
    s.params = DeviceBuffer(be, s.numel * dtype_size(opt.param_dtype), MemCategory::kParams);
    if (opt.param_dtype != DType::kF32)
      s.master = DeviceBuffer(be, s.numel * 4, MemCategory::kOptimizer);
    s.m = DeviceBuffer(be, s.numel * 4, MemCategory::kOptimizer);
    s.v = DeviceBuffer(be, s.numel * 4, MemCategory::kOptimizer);
    s.grads = DeviceBuffer(be, s.numel * dtype_size(opt.grad_dtype), MemCategory::kGrads);
    be->zero(s.m.data(), s.m.bytes());
    be->zero(s.v.data(), s.v.bytes());
    be->zero(s.grads.data(), s.grads.bytes());
  }
}

Engine::~Engine() = default;

void Engine::set_unit_params(int u, std::span<const float> host) {
  UnitState& s = units_[u];
  ZT_CHECK(host.size() == s.numel);
  be_->copy_to_device(s.master_f32(), host.data(), s.numel * 4);
  if (s.master.data()) be_->convert(s.master.f32(), DType::kF32, s.params.data(),
                                    opt_.param_dtype, s.numel);
}

void Engine::get_unit_params(int u, std::span<float> host) const {
  const UnitState& s = units_[u];
  ZT_CHECK(host.size() == s.numel);
  be_->copy_to_host(host.data(), s.master_f32(), s.numel * 4);
}

void Engine::get_unit_grads(int u, std::span<float> host) const {
  const UnitState& s = units_[u];
  ZT_CHECK(host.size() == s.numel);
  if (opt_.grad_dtype == DType::kF32) {
    be_->copy_to_host(host.data(), s.grads.data(), s.numel * 4);
    return;
  }
  DeviceBuffer tmp(be_, s.numel * 4, MemCategory::kWorkspace);
  be_->convert(s.grads.data(), opt_.grad_dtype, tmp.data(), DType::kF32, s.numel);
  be_->copy_to_host(host.data(), tmp.data(), s.numel * 4);
}

const float* Engine::fetch(int u) {
  UnitState& s = units_[u];
  if (opt_.param_dtype == DType::kF32) {
    ++s.live;
    return s.params.f32();
  }
  if (s.live++ == 0) {  // materialise the fp32 view of the working copy
    s.fetched = DeviceBuffer(be_, s.numel * 4, MemCategory::kWorkspace);
    be_->convert(s.params.data(), opt_.param_dtype, s.fetched.data(), DType::kF32, s.numel);
  }
  return s.fetched.f32();
}

void Engine::release(int u) {
  UnitState& s = units_[u];
  ZT_CHECK(s.live > 0);
  if (--s.live == 0) s.fetched.reset();
}

float* Engine::grads(int u) {
  UnitState& s = units_[u];
  if (opt_.grad_dtype == DType::kF32) return s.grads.f32();  // accumulate in place
  if (!s.scratch.data()) {
    s.scratch = DeviceBuffer(be_, s.numel * 4, MemCategory::kWorkspace);
    be_->zero(s.scratch.data(), s.scratch.bytes());
  }
  return s.scratch.f32();
}

void Engine::reduce_gradients(int u) {
  UnitState& s = units_[u];
  if (opt_.grad_dtype == DType::kF32) return;  // one rank, stage 0: already in place
  ZT_CHECK(s.scratch.data());
  // Accumulate the micro-step's fp32 gradient into the stored low-precision gradient.
  DeviceBuffer acc(be_, s.numel * 4, MemCategory::kWorkspace);
  be_->convert(s.grads.data(), opt_.grad_dtype, acc.data(), DType::kF32, s.numel);
  be_->add_inplace(acc.f32(), s.scratch.f32(), s.numel);
  be_->convert(acc.data(), DType::kF32, s.grads.data(), opt_.grad_dtype, s.numel);
  s.scratch.reset();
}

StepStats Engine::step(float lr) {
  StepStats st;
  // fp32 view of every unit's gradient (the stored buffer itself when grads are fp32).
  std::vector<DeviceBuffer> g32(units_.size());
  auto grad_f32 = [&](size_t u) -> float* {
    UnitState& s = units_[u];
    if (opt_.grad_dtype == DType::kF32) return s.grads.f32();
    if (!g32[u].data()) {
      g32[u] = DeviceBuffer(be_, s.numel * 4, MemCategory::kWorkspace);
      be_->convert(s.grads.data(), opt_.grad_dtype, g32[u].data(), DType::kF32, s.numel);
    }
    return g32[u].f32();
  };
  double ss = 0;
  for (size_t u = 0; u < units_.size(); ++u) ss += be_->sum_squares(grad_f32(u), units_[u].numel);
  st.grad_norm = std::sqrt(ss);
  if (opt_.gradient_clipping > 0 && st.grad_norm > opt_.gradient_clipping)
    st.clip_coef = opt_.gradient_clipping / (st.grad_norm + 1e-6);
  ++t_;
  const AdamParams& a = opt_.adam;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    be_->adamw_update(s.master_f32(), grad_f32(u), s.m.f32(), s.v.f32(), s.numel, lr, a.beta1,
                      a.beta2, a.eps, a.weight_decay, t_, static_cast<float>(st.clip_coef),
                      a.adam_w_mode, a.bias_correction);
    if (s.master.data())
      be_->convert(s.master.f32(), DType::kF32, s.params.data(), opt_.param_dtype, s.numel);
    g32[u].reset();
  }
  zero_grad();
  st.step = t_;
  return st;
}

void Engine::zero_grad() {
  for (UnitState& s : units_) be_->zero(s.grads.data(), s.grads.bytes());
}

}  // namespace zt

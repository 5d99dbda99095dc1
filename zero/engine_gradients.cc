// The engine's gradient buffers and their reduction (all-reduce, reduce-scatter), per unit.
#include "common/status.h"
#include "common/timer.h"
#include "common/trace.h"
#include "zero/engine_unit.h"

namespace zt {

bool Engine::direct_grads(const UnitState& s) const {
  return opt_.grad_dtype == DType::kF32 && (s.replicated || opt_.zero.stage == 1);
}

void Engine::settle_stale(UnitState& s) {
  if (s.stored != UnitState::Stored::kStale) return;
  if (s.host_grads)
    optimizer_->zero_gradient(int(&s - units_.data()));
  else
    be_->zero(s.grads.data(), s.grads.bytes());
  s.stored = UnitState::Stored::kZero;
  s.owned_ss = UnitState::SumSq::kZero;
}

float* Engine::grads(int u) {
  publish(u);  // its pipelined update has read the gradient this backward overwrites
  UnitState& s = unit(u);
  if (direct_grads(s)) {
    s.mark_written();
    s.owned_ss = UnitState::SumSq::kUnknown;  // the backward's kernels accumulate into it
    return s.grads.f32();
  }
  if (!s.scratch.data()) {
    s.scratch = DeviceBuffer(be_, s.padded * 4, MemCategory::kWorkspace);
    be_->zero(s.scratch.data(), s.scratch.bytes());
  }
  return s.scratch.f32();
}

bool Engine::kernels_add_to_stored(const UnitState& s) const {
  return (s.replicated || opt_.zero.stage == 1) && !s.host_grads &&
         be_->grad_dtype(opt_.grad_dtype) == opt_.grad_dtype;
}

TensorRef Engine::grads_stored(int u) {
  publish(u);
  UnitState& s = unit(u);
  if (direct_grads(s) || !kernels_add_to_stored(s) || s.scratch.data()) return grads(u);
  settle_stale(s);  // the kernels add to it: a stale gradient becomes the zeros it stands for
  s.stored = UnitState::Stored::kKernelsAdd;
  s.owned_ss = UnitState::SumSq::kUnknown;  // the step sums its squares
  return {s.grads.data(), opt_.grad_dtype};
}

void Engine::reduce_gradients(int u) {
  UnitState& s = unit(u);
  const bool whole = s.replicated || opt_.zero.stage == 1;
  if (s.scratch.data() && whole) {  // accumulate the micro-step into the stored gradient
    // No reduction follows and no micro-step: the step's gradient, whose Σ g² the norm needs.
    const bool final = dp_ == 1 && s.replicated && boundary_;
    be_->scale_add(s.grads.data(), opt_.grad_dtype, s.scratch.f32(), 1.f, s.holds_values(),
                   s.padded, final ? norm_slot(s) : nullptr);
    s.owned_ss = final ? UnitState::SumSq::kInSlot : UnitState::SumSq::kUnknown;
    s.mark_written();
    s.scratch.reset();
  }
  if (dp_ == 1 && whole) return;
  if (whole && !boundary_) return;  // stages 0-1 reduce once per step
  PendingReduce p{u, {}, {}, {}};
  p.boundary = boundary_;
  if (whole) {
    settle_stale(s);  // no micro-step wrote it: zeros
    // The stored gradient in fp32 (MPI reduces fp32), reduced in place.
    p.send = DeviceBuffer(be_, s.padded * 4, MemCategory::kCommBuffers);
    be_->convert(s.grads.data(), opt_.grad_dtype, p.send.data(), DType::kF32, s.padded);
    if (s.replicated) {
      p.req = world_comm_->all_reduce(p.send.data(), s.padded, DType::kF32);
    } else {
      reduce_to_shard(p, s);
    }
  } else {  // stages 2-3: reduce this micro-step's gradient, accumulate into the shard
    ZT_CHECK(s.scratch.data());  // grads(u) came first
    p.send = std::move(s.scratch);
    reduce_to_shard(p, s);
  }
  pending_.push_back(std::move(p));
  // overlap_comm: keep one reduction in flight behind the next unit's backward.
  drain_reductions(opt_.zero.overlap_comm ? 1 : 0);
}

// The averaged shard of this rank from the whole-unit gradient in p.send: a reduce-scatter, or
// with reduce_scatter false (DeepSpeed's option) an all-reduce of which the shard is kept.
void Engine::reduce_to_shard(PendingReduce& p, UnitState& s) {
  p.recv = DeviceBuffer(be_, s.shard * 4, MemCategory::kCommBuffers);
  p.shard_of_all_reduce = !opt_.zero.reduce_scatter;
  if (zeropp_.across && !p.shard_of_all_reduce) {  // ZeRO++ qgZ (zero/zeropp.h)
    p.qgz = QuantizedReduce(be_, zeropp_, p.send.f32(), s.shard);
    return;
  }
  p.req = p.shard_of_all_reduce
              ? comm_->all_reduce(p.send.data(), s.padded, DType::kF32)
              : comm_->reduce_scatter(p.send.data(), p.recv.data(), s.shard, DType::kF32);
}

void Engine::finish_reduce(PendingReduce& p) {
  Timer t;
  p.req.wait();
  if (p.qgz.active()) p.qgz.finish(p.recv.f32());
  note_comm_wait(t.ms());
  if (p.shard_of_all_reduce)
    be_->copy(p.recv.data(), p.send.f32() + (size_t)rank_ * unit(p.unit).shard,
              unit(p.unit).shard * 4);
  UnitState& s = unit(p.unit);
  if (zeropp_.mics_replicas && !s.replicated) {  // MiCS's second hop: the shard across groups
    Timer r;
    zeropp_.mics_replicas->all_reduce(p.recv.data(), s.shard, DType::kF32).wait();
    note_comm_wait(r.ms());
  }
  const float mean = 1.f / (float)dp_;  // gradient_allreduce_op: mean
  // The boundary's pass also sums the squares of what it writes (the step's gradient norm,
  // from cache) into the unit's norm slot; earlier micro-steps' sums would be overwritten.
  double* want_ss = p.boundary ? norm_slot(s) : nullptr;
  if (s.replicated) {
    be_->scale_add(s.grads.data(), opt_.grad_dtype, p.send.f32(), mean, false, s.padded, want_ss);
  } else if (opt_.zero.stage == 1) {
    be_->scale_add(p.recv.data(), DType::kF32, p.recv.f32(), mean, false, s.shard, want_ss);
    s.reduced = std::move(p.recv);
  } else if (s.host_grads) {  // stages 2-3, offloaded: averaged and accumulated on the host
    optimizer_->accumulate_gradient(p.unit, p.recv.f32(), mean, s.holds_values());
  } else {  // stages 2-3: average and accumulate into the stored shard in one pass
    be_->scale_add(s.grads.data(), opt_.grad_dtype, p.recv.f32(), mean, s.holds_values(), s.shard,
                   want_ss);
  }
  // (An offloaded state keeps its own.)
  s.owned_ss = want_ss && !s.host_grads ? UnitState::SumSq::kInSlot : UnitState::SumSq::kUnknown;
  if (opt_.zero.stage != 1 || s.replicated) s.mark_written();
}

void Engine::drain_reductions(size_t keep) {
  while (pending_.size() > keep) {
    finish_reduce(pending_.front());
    pending_.pop_front();
  }
}

Engine::OwnedGrad Engine::owned_grad(UnitState& s) {
  settle_stale(s);  // no backward since the last step: the gradient is zeros
  if (!s.replicated && opt_.zero.stage == 1) {
    if (!s.reduced.data()) {  // no backward since the last step: a zero shard, as other stages
      s.reduced = DeviceBuffer(be_, s.shard * 4, MemCategory::kCommBuffers);
      be_->zero(s.reduced.data(), s.reduced.bytes());
      s.owned_ss = UnitState::SumSq::kZero;
    }
    return OwnedGrad{s.reduced.data(), DType::kF32, false};
  }
  return OwnedGrad{s.grads.data(), opt_.grad_dtype, true};  // null data with host_grads
}

}  // namespace zt

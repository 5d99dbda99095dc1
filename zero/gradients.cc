#include "zero/gradients.h"

#include <algorithm>
#include <cstring>

#include "common/status.h"
#include "common/timer.h"
#include "model/cpu/cpu_adam.h"

namespace zt {

Gradients::Gradients(Backend* be, Communicator* comm, Communicator* world,
                     const ZeroppGroups& zeropp, const std::vector<UnitPartition>& plan,
                     const Options& o, std::function<void(double)> note_wait)
    : be_(be),
      comm_(comm),
      world_(world),
      zeropp_(zeropp),
      opt_(o),
      note_wait_(std::move(note_wait)),
      rank_(comm->rank()),
      dp_(world->world_size()),
      units_(plan.size()) {
  norm_ss_ = DeviceBuffer(be, units_.size() * sizeof(double), MemCategory::kWorkspace);
  size_t tile = 0;
  for (size_t u = 0; u < plan.size(); ++u) {
    const UnitPartition& p = plan[u];
    Unit& s = units_[u];
    s.numel = (size_t)p.numel;
    s.shard = (size_t)p.shard;
    s.padded = (size_t)p.padded;
    s.replicated = p.replicated;
    s.whole = p.whole_grads;
    s.host = p.host_grads;
    s.lands = o.land_on_host && !s.host;
    if (s.host) {
      s.host_stored =
          HostBuffer(s.shard * dtype_size(o.grad_dtype), MemCategory::kGrads, &host_, o.pin_with);
      std::memset(s.host_stored.data(), 0, s.host_stored.bytes());
      tile = std::max(tile, std::min(s.shard, kAccumulateTile));
    } else {
      s.stored =
          DeviceBuffer(be, (size_t)p.grad_numel() * dtype_size(o.grad_dtype), MemCategory::kGrads);
      be->zero(s.stored.data(), s.stored.bytes());
    }
    if (s.lands)
      s.host_stored = HostBuffer(s.owned() * dtype_size(owned_dtype((int)u)), MemCategory::kGrads,
                                 &host_, o.pin_with);
  }
  if (tile > 0) stage_ = HostBuffer(tile * 4, MemCategory::kPinnedHost, &host_, o.pin_with);
}

Gradients::~Gradients() {
  // No buffer may go while the communication thread can still write into it. Only waited for,
  // not finished: finishing allocates, and past the device-memory limit (the error that may be
  // ending the run) would throw out of a destructor and terminate the process.
  for (Pending& p : pending_) {
    p.req.wait();
    p.qgz.wait();
  }
  settle_copy();
}

double* Gradients::norm_slot(int u) { return static_cast<double*>(norm_ss_.data()) + u; }

bool Gradients::direct(const Unit& s) const { return opt_.grad_dtype == DType::kF32 && s.whole; }

bool Gradients::kernels_add_to_stored(const Unit& s) const {
  return s.whole && !s.host && be_->grad_dtype(opt_.grad_dtype) == opt_.grad_dtype;
}

void Gradients::settle_stale(int u) {
  Unit& s = unit(u);
  if (s.state != Unit::Stored::kStale) return;
  if (s.host) {
    settle_copy();
    std::memset(s.host_stored.data(), 0, s.host_stored.bytes());
    s.host_ss = 0.0;
  } else {
    be_->zero(s.stored.data(), s.stored.bytes());
  }
  s.state = Unit::Stored::kZero;
  s.ss = Unit::SumSq::kZero;
}

float* Gradients::backward_target(int u) {
  Unit& s = unit(u);
  if (direct(s)) {
    s.mark_written();
    s.ss = Unit::SumSq::kUnknown;  // the backward's kernels accumulate into it
    return s.stored.f32();
  }
  if (!s.scratch.data()) {
    s.scratch = DeviceBuffer(be_, s.padded * 4, MemCategory::kWorkspace);
    be_->zero(s.scratch.data(), s.scratch.bytes());
  }
  return s.scratch.f32();
}

TensorRef Gradients::kernels_target(int u) {
  Unit& s = unit(u);
  if (direct(s) || !kernels_add_to_stored(s) || s.scratch.data()) return backward_target(u);
  settle_stale(u);  // the kernels add to it: a stale gradient becomes the zeros it stands for
  s.state = Unit::Stored::kKernelsAdd;
  s.ss = Unit::SumSq::kUnknown;  // the step sums its squares
  return {s.stored.data(), opt_.grad_dtype};
}

void Gradients::reduce(int u, bool boundary) {
  Unit& s = unit(u);
  const bool whole = s.whole;
  if (s.scratch.data() && whole) {  // accumulate the micro-step into the stored gradient
    // No reduction follows and no micro-step: the step's gradient, whose Σ g² the norm needs.
    const bool final = dp_ == 1 && s.replicated && boundary;
    be_->scale_add(s.stored.data(), opt_.grad_dtype, s.scratch.f32(), 1.f, s.holds_values(),
                   s.padded, final ? norm_slot(u) : nullptr);
    s.ss = final ? Unit::SumSq::kInSlot : Unit::SumSq::kUnknown;
    s.mark_written();
    s.scratch.reset();
  }
  if (dp_ == 1 && whole) {  // nothing to reduce: at the boundary the gradient is final
    if (boundary && s.lands) {
      settle_stale(u);  // no micro-step wrote it: zeros
      land(u, s.stored.data(), {});
    }
    return;
  }
  if (whole && !boundary) return;  // stages 0-1 reduce once per step
  Pending p{u, {}, {}, {}};
  p.boundary = boundary;
  if (whole) {
    settle_stale(u);  // no micro-step wrote it: zeros
    // The stored gradient in fp32 (MPI reduces fp32), reduced in place.
    p.send = DeviceBuffer(be_, s.padded * 4, MemCategory::kCommBuffers);
    be_->convert(s.stored.data(), opt_.grad_dtype, p.send.data(), DType::kF32, s.padded);
    if (s.replicated) {
      p.req = world_->all_reduce(p.send.data(), s.padded, DType::kF32);
    } else {
      reduce_to_shard(p, s);
    }
  } else {  // stages 2-3: reduce this micro-step's gradient, accumulate into the shard
    ZT_CHECK(s.scratch.data());  // backward_target(u) came first
    p.send = std::move(s.scratch);
    reduce_to_shard(p, s);
  }
  pending_.push_back(std::move(p));
  // overlap_comm: keep one reduction in flight behind the next unit's backward.
  drain(opt_.overlap_comm ? 1 : 0);
}

// The averaged shard of this rank from the whole-unit gradient in p.send: a reduce-scatter, or
// with reduce_scatter false (DeepSpeed's option) an all-reduce of which the shard is kept.
void Gradients::reduce_to_shard(Pending& p, Unit& s) {
  p.recv = DeviceBuffer(be_, s.shard * 4, MemCategory::kCommBuffers);
  p.shard_of_all_reduce = !opt_.reduce_scatter;
  if (zeropp_.across && !p.shard_of_all_reduce) {  // ZeRO++ qgZ (zero/zeropp.h)
    p.qgz = QuantizedReduce(be_, zeropp_, p.send.f32(), s.shard);
    return;
  }
  p.req = p.shard_of_all_reduce
              ? comm_->all_reduce(p.send.data(), s.padded, DType::kF32)
              : comm_->reduce_scatter(p.send.data(), p.recv.data(), s.shard, DType::kF32);
}

void Gradients::finish(Pending& p) {
  Unit& s = unit(p.unit);
  Timer t;
  p.req.wait();
  if (p.qgz.active()) p.qgz.finish(p.recv.f32());
  note_wait_(t.ms());
  if (p.shard_of_all_reduce)
    be_->copy(p.recv.data(), p.send.f32() + (size_t)rank_ * s.shard, s.shard * 4);
  if (zeropp_.mics_replicas && !s.replicated) {  // MiCS's second hop: the shard across groups
    Timer r;
    zeropp_.mics_replicas->all_reduce(p.recv.data(), s.shard, DType::kF32).wait();
    note_wait_(r.ms());
  }
  const float mean = 1.f / (float)dp_;  // gradient_allreduce_op: mean
  // The boundary's pass also sums the squares of what it writes (the step's gradient norm,
  // from cache) into the unit's norm slot; earlier micro-steps' sums would be overwritten.
  double* want_ss = p.boundary ? norm_slot(p.unit) : nullptr;
  if (s.replicated) {
    be_->scale_add(s.stored.data(), opt_.grad_dtype, p.send.f32(), mean, false, s.padded, want_ss);
  } else if (s.reduced_view()) {
    be_->scale_add(p.recv.data(), DType::kF32, p.recv.f32(), mean, false, s.shard, want_ss);
  } else if (s.host) {  // stages 2-3, offloaded: averaged and accumulated on the host
    accumulate_host(p.unit, p.recv.f32(), mean, s.holds_values());
  } else {  // stages 2-3: average and accumulate into the stored shard in one pass
    be_->scale_add(s.stored.data(), opt_.grad_dtype, p.recv.f32(), mean, s.holds_values(), s.shard,
                   want_ss);
  }
  // (A host gradient keeps its own.)
  s.ss = want_ss && !s.host ? Unit::SumSq::kInSlot : Unit::SumSq::kUnknown;
  if (s.reduced_view()) {
    void* shard = p.recv.data();
    if (s.lands)
      land(p.unit, shard, std::move(p.recv));
    else
      s.reduced = std::move(p.recv);
  } else {
    s.mark_written();
    if (s.lands) land(p.unit, s.stored.data(), {});  // a unit kept whole, at the boundary
  }
}

void Gradients::drain(size_t keep) {
  while (pending_.size() > keep) {
    finish(pending_.front());
    pending_.pop_front();
  }
}

double Gradients::owned_sum_squares(const std::function<bool(int)>& counted) {
  std::vector<double> host_ss(units_.size(), 0.0);  // offloaded units'
  for (int u = 0; u < (int)units_.size(); ++u) {
    if (!counted(u)) continue;
    Unit& s = unit(u);
    const View g = owned(u);  // settles a stale gradient (no backward since the last step)
    if (s.host) {
      host_ss[u] = s.host_ss ? *s.host_ss : cpu_sum_squares(g.data, g.dtype, s.owned());
    } else if (s.ss == Unit::SumSq::kUnknown) {
      ZT_CHECK(!g.host);  // a device view: land() leaves none unknown
      be_->sum_squares(g.data, g.dtype, s.owned(), norm_slot(u));
      s.ss = Unit::SumSq::kInSlot;
    }
  }
  std::vector<double> slots(units_.size());
  be_->copy_to_host(slots.data(), norm_ss_.data(), norm_ss_.bytes());
  double ss = 0;
  for (int u = 0; u < (int)units_.size(); ++u)  // kInSlot is never set for an offloaded gradient
    if (counted(u)) ss += units_[u].ss == Unit::SumSq::kInSlot ? slots[u] : host_ss[u];
  return ss;
}

Gradients::View Gradients::owned(int u) {
  Unit& s = unit(u);
  settle_stale(u);  // no backward since the last step: the gradient is zeros
  if (s.lands) {
    settle_copy();    // its copy has landed
    if (!s.landed) {  // no backward since the last step: zeros
      std::memset(s.host_stored.data(), 0, s.host_stored.bytes());
      s.ss = Unit::SumSq::kZero;
      s.landed = true;
    }
    return View{s.host_stored.data(), owned_dtype(u), true};
  }
  if (s.reduced_view()) {
    if (!s.reduced.data()) {  // no backward since the last step: a zero shard, as other stages
      s.reduced = DeviceBuffer(be_, s.shard * 4, MemCategory::kCommBuffers);
      be_->zero(s.reduced.data(), s.reduced.bytes());
      s.ss = Unit::SumSq::kZero;
    }
    return View{s.reduced.data(), owned_dtype(u), false};
  }
  if (!s.host) return View{s.stored.data(), owned_dtype(u), false};
  settle_copy();  // its copy to the host has landed
  return View{s.host_stored.data(), owned_dtype(u), true};
}

Gradients::View Gradients::hand_off(int u) {
  Unit& s = unit(u);
  ZT_CHECK(s.host || s.lands);
  settle_copy();
  if (!s.handed_off.data())
    s.handed_off = HostBuffer(s.host_stored.bytes(), MemCategory::kGrads, &host_, opt_.pin_with);
  std::swap(s.host_stored, s.handed_off);
  if (s.host) {  // the buffer the backward writes next holds an older gradient: stale, not zeros
    s.state = Unit::Stored::kStale;
    s.host_ss.reset();
  } else {  // the next copy overwrites it whole; until then owned(u) reads zeros, not it
    s.landed = false;
  }
  return View{s.handed_off.data(), owned_dtype(u), true};
}

bool Gradients::zero_as_read(int u) const {
  const Unit& s = units_[u];
  // (A landed gradient is read on the host: the device's stays for end_step to settle.)
  return !s.lands && !s.reduced_view() && (direct(s) || s.state == Unit::Stored::kKernelsAdd);
}

void Gradients::read(int u, bool zeroed) {
  Unit& s = unit(u);
  if (!s.reduced_view() && !s.lands) s.state = zeroed ? Unit::Stored::kZero : Unit::Stored::kStale;
}

void Gradients::end_step() {
  settle_copy();  // no pass below may write a gradient still being copied out
  for (Unit& s : units_) {
    s.landed = false;
    if (s.holds_values()) {
      if (direct(s)) {
        be_->zero(s.stored.data(), s.stored.bytes());
        s.state = Unit::Stored::kZero;
      } else {
        s.state = Unit::Stored::kStale;  // its next writer overwrites it
      }
    }
    s.ss = Unit::SumSq::kUnknown;
    s.reduced.reset();
  }
}

void Gradients::owned_f32(int u, float* out) {
  Unit& s = unit(u);
  const View g = owned(u);
  if (!g.host) {
    be_->convert(g.data, g.dtype, out, DType::kF32, s.owned());
    return;
  }
  std::vector<float> h(s.owned());
  convert(g.data, g.dtype, h.data(), DType::kF32, h.size());
  be_->copy_to_device(out, h.data(), h.size() * 4);
}

void Gradients::accumulate_host(int u, const float* x, float scale, bool accumulate) {
  Timer t;
  Unit& s = unit(u);
  const size_t gb = dtype_size(opt_.grad_dtype);
  settle_copy();      // the previous unit's copy, long done: one in flight at a time
  if (!accumulate) {  // rounded on the device: the copy moves gradient-dtype bytes
    DeviceBuffer tmp(be_, s.shard * gb, MemCategory::kCommBuffers);
    // The norm's share, summed as the gradient is written, where the backend's memory is the
    // host's (the CPU: no second pass). On a GPU the sum would land in device memory and cost
    // a wait to bring back per unit, so the step sums the landed gradient on the host instead.
    const bool in_pass = be_->host_addressable();
    double ss = 0;
    be_->scale_add(tmp.data(), opt_.grad_dtype, x, scale, false, s.shard, in_pass ? &ss : nullptr);
    s.host_ss = in_pass ? std::optional<double>(ss) : std::nullopt;
    // On the copy stream, overlapping the next unit's backward; tmp lives until it lands.
    const void* rounded = tmp.data();
    copy_out(u, rounded, std::move(tmp));
  } else {  // gradient accumulation: the fp32 sum moves, the host adds it
    s.host_ss.reset();
    const size_t tile = stage_.bytes() / 4;
    for (size_t begin = 0; begin < s.shard; begin += tile) {
      const size_t n = std::min(tile, s.shard - begin);
      be_->copy_to_host(stage_.data(), x + begin, n * 4);
      to_host_ += (int64_t)(n * 4);
      scale_add(static_cast<char*>(s.host_stored.data()) + begin * gb, opt_.grad_dtype,
                static_cast<const float*>(stage_.data()), scale, true, n);
    }
  }
  clock_.add(OffloadClock::kGradOut, t.ms());
}

void Gradients::land(int u, const void* src, DeviceBuffer source) {
  Timer t;
  Unit& s = unit(u);
  if (s.ss == Unit::SumSq::kUnknown) {  // the norm's share, on the device while it is there
    be_->sum_squares(src, owned_dtype(u), s.owned(), norm_slot(u));
    s.ss = Unit::SumSq::kInSlot;
  }
  copy_out(u, src, std::move(source));
  s.landed = true;
  clock_.add(OffloadClock::kGradOut, t.ms());
}

void Gradients::copy_out(int u, const void* src, DeviceBuffer source) {
  settle_copy();  // the previous unit's, long done: one in flight at a time
  HostBuffer& dst = unit(u).host_stored;
  copy_ = {true, be_->copy_to_host_async(dst.data(), src, dst.bytes()), std::move(source)};
  to_host_ += (int64_t)dst.bytes();
}

void Gradients::settle_copy() {
  if (!copy_.active) return;
  be_->wait_copy(copy_.ticket);
  copy_ = {};
}

}  // namespace zt

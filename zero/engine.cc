#include "zero/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/fault.h"
#include "common/status.h"
#include "common/timer.h"
#include "zero/param_gatherer.h"
#include "zero/partition.h"

namespace zt {

struct Engine::UnitState {
  size_t numel = 0;             // Ψ of the unit
  size_t shard = 0;             // elements per rank (numel when replicated)
  size_t padded = 0;            // shard * N_d (numel when replicated)
  bool replicated = false;      // whole on every rank: stage 0, or stage 3 under the threshold
  bool sharded_params = false;  // stage 3 and not replicated
  DeviceBuffer params;          // working dtype: the whole unit (padded), or this rank's shard
  void* shared = nullptr;       // node-shared: the whole unit's working copy (params unused)
  int store = -1;               // stage 3 with parameter offload: the shard's ParamStore handle
  DeviceBuffer fetched;         // fp32 view while in use, when the working dtype is not fp32
  DeviceBuffer grads;      // stored: whole unit (stages 0-1, replicated) or shard (2-3),
                           // none when the optimizer state holds it (host_grads)
  bool host_grads = false;
  DeviceBuffer scratch;    // fp32 whole-unit gradient while a backward writes it
  // What the stored gradient holds since the last step:
  //   kZero      zeros: nothing to read;
  //   kStale     the zeros it stands for, but the buffer still holds the last step's values: its
  //              next writer overwrites it (scale_add without accumulate), or settle_stale
  //              zeroes it, so the step did not spend a pass zeroing it;
  //   kWritten   this step's gradient, written by the engine's passes (or, direct_grads, added
  //              by the backward's kernels);
  //   kKernelsAdd  this step's gradient, which grads_stored handed to the backward's kernels to
  //              add into: the step leaves it zeroed (as for direct_grads).
  enum class Stored { kZero, kStale, kWritten, kKernelsAdd } stored = Stored::kZero;
  bool holds_values() const { return stored == Stored::kWritten || stored == Stored::kKernelsAdd; }
  // A pass wrote (or added to) this step's gradient.
  void mark_written() {
    if (stored != Stored::kKernelsAdd) stored = Stored::kWritten;
  }
  // Σ g² of the owned gradient as step() reads it: not known yet (step() sums it), zero (no
  // backward wrote it), or in the unit's norm slot, summed on the device by the pass that last
  // wrote the gradient.
  enum class SumSq { kUnknown, kZero, kInSlot } owned_ss = SumSq::kUnknown;
  DeviceBuffer reduced;  // stage 1: fp32 averaged shard after the boundary reduce-scatter, or none

  size_t owned() const { return replicated ? numel : shard; }
  // This rank's working copy: the whole unit or its shard (params), or the node's (shared).
  void* working() const { return shared ? shared : params.data(); }
};

// A gradient reduction in flight (overlap_comm): its buffers live until it completes.
struct Engine::PendingReduce {
  int unit;
  CommRequest req;
  DeviceBuffer send;                 // fp32 whole-unit gradient being reduced
  DeviceBuffer recv;                 // fp32 shard (reduce-scatter) or empty (all-reduce in place)
  bool shard_of_all_reduce = false;  // reduce_scatter false: recv is cut from send
  bool boundary = false;             // of the step's last micro-batch: its result is final
};

Engine::Engine(const ParamLayout& layout, Backend* be, Communicator* comm, const EngineOptions& opt,
               std::unique_ptr<OptimizerState> optimizer, std::unique_ptr<ParamStore> params)
    : layout_(layout),
      be_(be),
      comm_(comm),
      opt_(opt),
      units_(layout.num_units()),
      optimizer_(optimizer ? std::move(optimizer)
                           : make_device_optimizer_state(be, opt.optimizer.kind)),
      params_(std::move(params)) {
  rank_ = comm->rank();
  world_ = comm->world_size();
  if (opt.loss_scaling) scaler_.emplace(opt.loss_scaler);
  const int stage = opt.zero.stage;
  ZT_CHECK(stage >= 0 && stage <= 3);
  ZT_CHECK(!params_ || stage == 3);
  host_grads_ = stage >= 2 && optimizer_->keeps_gradients();
  // The delayed update needs an offloaded state (it reads host snapshots, writes host staging).
  ZT_CHECK(opt.delayed_update_after < 0 || optimizer_->host_tracker() != nullptr);
  // Muon's passes are collective (the all-gather of u): not from the delayed update's thread.
  ZT_CHECK(opt.delayed_update_after < 0 || opt.optimizer.kind != OptimizerKind::kMuon);
  if (opt.optimizer.kind == OptimizerKind::kMuon) muon_ = std::make_unique<MuonUpdate>(be, comm);
  const size_t pbytes = dtype_size(opt.param_dtype), gbytes = dtype_size(opt.grad_dtype);
  const bool fp32_params = opt.param_dtype == DType::kF32;
  std::vector<int64_t> numels;
  for (const auto& unit : layout.units()) numels.push_back((int64_t)unit.numel);
  partition_ =
      plan_partition(numels, {.stage = stage,
                              .world = world_,
                              .persistence_threshold = opt.zero.stage3_param_persistence_threshold,
                              .host_grads = host_grads_,
                              .offload_param = params_ != nullptr,
                              .param_host_elems = params_ ? params_->host_elems() : 0});
  for (int u = 0; u < layout.num_units(); ++u) {
    const UnitPartition& p = partition_[u];
    UnitState& s = units_[u];
    s.numel = (size_t)p.numel;
    s.replicated = p.replicated;
    s.sharded_params = p.sharded_params;
    s.shard = (size_t)p.shard;
    s.padded = (size_t)p.padded;
    s.host_grads = p.host_grads;
  }
  // First, before any allocation that could fail on one rank alone: it is collective.
  if (opt.node_shared_params) map_shared_params();
  norm_ss_ = DeviceBuffer(be, units_.size() * sizeof(double), MemCategory::kWorkspace);
  for (int u = 0; u < layout.num_units(); ++u) {
    UnitState& s = units_[u];
    const UnitPartition& p = partition_[u];
    if (p.params != ParamHome::kDevice) {
      s.store = params_->add(s.shard * pbytes, p.params == ParamHome::kDrive);
    } else if (!s.shared) {
      const size_t param_elems = s.sharded_params ? s.shard : s.padded;
      s.params = DeviceBuffer(be, param_elems * pbytes, MemCategory::kParams);
      be->zero(s.params.data(), s.params.bytes());
    }
    if (!s.host_grads) {
      s.grads = DeviceBuffer(be, (size_t)p.grad_numel() * gbytes, MemCategory::kGrads);
      be->zero(s.grads.data(), s.grads.bytes());
    }
    const bool alias = fp32_params && s.store < 0;  // an fp32 device working copy is the master
    optimizer_->add_unit(s.owned(), alias ? static_cast<float*>(owned_working(s)) : nullptr);
    if (s.host_grads) optimizer_->add_gradient(u, opt.grad_dtype);
  }
  std::vector<ParamGatherer::Shard> shards(units_.size());
  for (size_t u = 0; u < units_.size(); ++u)
    shards[u] = {units_[u].store < 0 ? units_[u].params.data() : nullptr, units_[u].store};
  const ZeroOptions& z = opt.zero;
  gatherer_ = std::make_unique<ParamGatherer>(
      be, comm, params_.get(), opt.param_dtype, z.stage3_prefetch_bucket_size,
      z.stage3_max_live_parameters, z.stage3_max_reuse_distance, z.overlap_comm, partition_,
      std::move(shards));
}

Engine::~Engine() {
  delayed_.reset();  // waits for an update still running
  // No buffer may go while the communication thread can still write into it.
  drain_reductions(0);
  gatherer_.reset();
  if (shared_) be_->tracker().on_free(MemCategory::kParams, shared_tracked_);
}

// Stages 1-2: the units whose working copy every rank keeps whole get one copy per node, in
// shared memory laid out unit after unit (one of 2 MiB or more from a 2 MiB boundary,
// staggered as alloc_streaming staggers; a smaller one 64-byte aligned). Falls back to a copy
// per rank, saying why, where it cannot.
void Engine::map_shared_params() {
  const int stage = opt_.zero.stage;
  const char* why = nullptr;
  if (stage != 1 && stage != 2)
    why =
        "it applies to stages 1-2 (stage 0 updates every parameter on every rank, stage 3 "
        "keeps only shards)";
  else if (!be_->host_addressable())
    why = "other processes cannot map GPU memory";
  if (why) {  // the same on every rank
    if (rank_ == 0)
      std::fprintf(stderr, "warning: zerotrain.node_shared_params has no effect: %s\n", why);
    return;
  }
  std::vector<size_t> offset(units_.size(), 0);
  size_t end = 0, k = 0, used = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = units_[u];
    if (s.replicated || s.sharded_params) continue;
    const size_t bytes = s.padded * dtype_size(opt_.param_dtype);
    const bool huge = bytes >= kHugePageBytes;
    const size_t align = huge ? kHugePageBytes : 64;
    offset[u] = (end + align - 1) / align * align + (huge ? k++ % kStaggers * kStaggerBytes : 0);
    end = offset[u] + bytes;
    used += bytes;
  }
  if (world_ == 1 || end == 0) {  // the same on every rank
    if (rank_ == 0)
      std::fprintf(stderr, "warning: zerotrain.node_shared_params has no effect: %s\n",
                   world_ == 1 ? "one rank has no copy to share" : "every unit is replicated");
    return;
  }
  absl::StatusOr<SharedMemory> mem = map_node_shared(*comm_, end);
  if (!mem.ok()) {  // rank 0 says why, and any rank with an error of its own
    const absl::StatusCode code = mem.status().code();
    if (rank_ == 0 ||
        (code != absl::StatusCode::kAborted && code != absl::StatusCode::kFailedPrecondition))
      std::fprintf(stderr,
                   "warning: rank %d: zerotrain.node_shared_params: %s; each rank keeps its own "
                   "copy of the parameters and all-gathers them after each step\n",
                   rank_, std::string(mem.status().message()).c_str());
    return;
  }
  // Counted as the private copies would be (the layout's gaps are not, as alloc_streaming's).
  check_memory_limit(be_->tracker(), be_->memory_limit(), used, MemCategory::kParams);
  shared_.emplace(*std::move(mem));
  shared_tracked_ = used;
  be_->tracker().on_alloc(MemCategory::kParams, used);
  if (rank_ == 0)
    std::fprintf(stderr,
                 "zerotrain.node_shared_params: the %d ranks share one %s working copy of the "
                 "parameters in /dev/shm; a barrier replaces the all-gather after each step\n",
                 world_, format_bytes((int64_t)used).c_str());
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    if (!s.replicated && !s.sharded_params)
      s.shared = static_cast<char*>(shared_->data()) + offset[u];
  }
}

Engine::UnitState& Engine::unit(int u) { return units_[u]; }
double* Engine::norm_slot(const UnitState& s) {
  return static_cast<double*>(norm_ss_.data()) + (&s - units_.data());
}

size_t Engine::host_bytes(MemCategory c, bool peak) const {
  size_t b = 0;
  for (const MemoryTracker* t :
       {optimizer_->host_tracker(), params_ ? &params_->host_tracker() : nullptr,
        delayed_ ? &delayed_->host_tracker() : nullptr})
    if (t) b += peak ? t->peak(c) : t->current(c);
  return b;
}
OffloadTimes Engine::offload_times() const {
  return optimizer_->times() + (params_ ? params_->times() : OffloadTimes{});
}
int64_t Engine::bytes_to_host() const {
  return optimizer_->bytes_to_host() + (delayed_ ? delayed_->bytes_to_host() : 0);
}
int64_t Engine::bytes_to_device() const {
  return optimizer_->bytes_to_device() + (params_ ? params_->bytes_to_device() : 0) +
         delayed_to_device_;
}

size_t Engine::shard_numel(int u) const { return units_[u].shard; }
size_t Engine::padded_numel(int u) const { return units_[u].padded; }

// The working copy of the owned elements: all of params (replicated units, stage-3 shards) or
// this rank's slice of the whole unit (stages 1-2).
void* Engine::owned_working(UnitState& s) {
  if (s.replicated || s.sharded_params) return s.params.data();
  return static_cast<char*>(s.working()) + (size_t)rank_ * s.shard * dtype_size(opt_.param_dtype);
}

void Engine::set_unit_params(int u, std::span<const float> host) {
  finish_delayed_update();
  UnitState& s = unit(u);
  ZT_CHECK(host.size() == s.numel);
  // This rank's owned slice (zero past the end of the unit: padding).
  std::vector<float> owned(s.owned(), 0.f);
  const size_t begin = s.replicated ? 0 : (size_t)rank_ * s.shard;
  for (size_t i = 0; i < owned.size() && begin + i < s.numel; ++i) owned[i] = host[begin + i];
  optimizer_->set_master(u, owned.data());
  if (s.store >= 0) {
    convert(owned.data(), DType::kF32, params_->begin_write(s.store), opt_.param_dtype, s.owned());
    params_->end_write(s.store);
    return;
  }
  if (s.sharded_params || s.replicated) {
    if (!optimizer_->master_is_working_copy(u)) {
      std::vector<uint8_t> working(s.owned() * dtype_size(opt_.param_dtype));
      convert(owned.data(), DType::kF32, working.data(), opt_.param_dtype, s.owned());
      be_->copy_to_device(s.params.data(), working.data(), working.size());
    }
    return;
  }
  // Stages 1-2: the whole working unit on every rank.
  std::vector<float> whole(s.padded, 0.f);
  std::copy(host.begin(), host.end(), whole.begin());
  DeviceBuffer tmp(be_, s.padded * 4, MemCategory::kWorkspace);
  be_->copy_to_device(tmp.data(), whole.data(), s.padded * 4);
  // Node-shared: every rank writes the same values, so a rank reading after its own write
  // reads them whatever the others are doing (engine.h says what callers must order).
  be_->convert(tmp.data(), DType::kF32, s.working(), opt_.param_dtype, s.padded);
}

std::pair<size_t, size_t> Engine::saved_range(int u) const {
  const UnitState& s = units_[u];
  if (s.replicated) return {0, rank_ == 0 ? s.numel : 0};
  const size_t begin = std::min(s.numel, (size_t)rank_ * s.shard);
  return {begin, std::min(s.numel, begin + s.shard)};
}

void Engine::get_saved_state(int u, float* master, float* const* states) {
  finish_delayed_update();
  const auto [begin, end] = saved_range(u);
  if (begin == end) return;
  UnitState& s = unit(u);
  const int k = optimizer_info(opt_.optimizer.kind).num_states;
  std::vector<float> a(s.owned());
  std::vector<std::vector<float>> st(k, std::vector<float>(s.owned()));
  float* ptr[kMaxOptimizerStates] = {};
  for (int i = 0; i < k; ++i) ptr[i] = st[i].data();
  optimizer_->get_master(u, a.data());
  optimizer_->get_states(u, ptr);
  const size_t n = end - begin;  // the owned slice starts at `begin`: drop its padding
  std::copy_n(a.begin(), n, master);
  for (int i = 0; i < k; ++i) std::copy_n(st[i].begin(), n, states[i]);
}

void Engine::set_unit_state(int u, std::span<const float> master,
                            std::span<const std::span<const float>> states) {
  set_unit_params(u, master);
  UnitState& s = unit(u);
  const int k = optimizer_info(opt_.optimizer.kind).num_states;
  ZT_CHECK((int)states.size() == k);
  std::vector<std::vector<float>> owned(k, std::vector<float>(s.owned(), 0.f));
  const float* ptr[kMaxOptimizerStates] = {};
  const size_t begin = s.replicated ? 0 : (size_t)rank_ * s.shard;
  for (int j = 0; j < k; ++j) {
    ZT_CHECK(states[j].size() == s.numel);
    for (size_t i = 0; i < s.owned() && begin + i < s.numel; ++i)
      owned[j][i] = states[j][begin + i];
    ptr[j] = owned[j].data();
  }
  optimizer_->set_states(u, ptr);
}

void Engine::get_unit_params(int u, std::span<float> host) {
  finish_delayed_update();
  UnitState& s = unit(u);
  ZT_CHECK(host.size() == s.numel);
  if (s.replicated) {
    optimizer_->get_master(u, host.data());
    return;
  }
  std::vector<float> owned(s.shard);
  optimizer_->get_master(u, owned.data());
  DeviceBuffer shard(be_, s.shard * 4, MemCategory::kWorkspace);
  be_->copy_to_device(shard.data(), owned.data(), s.shard * 4);
  gather_to_host(s, shard.data(), host);
}

// Every rank's fp32 shard of unit s (this rank's is `shard`, on the device) into host (numel).
void Engine::gather_to_host(UnitState& s, const void* shard, std::span<float> host) {
  DeviceBuffer whole(be_, s.padded * 4, MemCategory::kWorkspace);
  comm_->all_gather(shard, whole.data(), s.shard, DType::kF32).wait();
  be_->copy_to_host(host.data(), whole.data(), s.numel * 4);
}

void Engine::get_unit_grads(int u, std::span<float> host) {
  drain_reductions(0);
  UnitState& s = unit(u);
  settle_stale(s);
  ZT_CHECK(host.size() == s.numel);
  if (s.replicated) {
    DeviceBuffer whole(be_, s.numel * 4, MemCategory::kWorkspace);
    be_->convert(s.grads.data(), opt_.grad_dtype, whole.data(), DType::kF32, s.numel);
    be_->copy_to_host(host.data(), whole.data(), s.numel * 4);
    return;
  }
  if (opt_.zero.stage == 1) {
    ZT_CHECK(s.reduced.data());
    return gather_to_host(s, s.reduced.data(), host);
  }
  DeviceBuffer shard(be_, s.shard * 4, MemCategory::kWorkspace);
  if (s.host_grads) {
    std::vector<float> h(s.shard);
    optimizer_->get_gradient(u, h.data());
    be_->copy_to_device(shard.data(), h.data(), s.shard * 4);
  } else {
    be_->convert(s.grads.data(), opt_.grad_dtype, shard.data(), DType::kF32, s.shard);
  }
  gather_to_host(s, shard.data(), host);
}

// ---- the transformer's calls ----

const void* Engine::fetch_stored(int u, DType* t) {
  const void* gathered = gatherer_->fetch(u);  // stage 3: the whole unit, gathered
  *t = opt_.param_dtype;
  return gathered ? gathered : unit(u).working();
}

TensorView Engine::fetch(int u) {
  DType t;
  const void* p = fetch_stored(u, &t);
  if (be_->weight_dtype(t) == t) return {p, t};
  UnitState& s = unit(u);
  if (!s.fetched.data()) {  // one fp32 view while the unit is live, however often fetched
    s.fetched = DeviceBuffer(be_, s.padded * 4, MemCategory::kWorkspace);
    be_->convert(p, t, s.fetched.data(), DType::kF32, s.padded);
  }
  return TensorView(s.fetched.f32());
}

void Engine::release(int u) {
  if (gatherer_->release(u)) unit(u).fetched.reset();
}

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
    const bool final = world_ == 1 && s.replicated && boundary_;
    be_->scale_add(s.grads.data(), opt_.grad_dtype, s.scratch.f32(), 1.f, s.holds_values(),
                   s.padded, final ? norm_slot(s) : nullptr);
    s.owned_ss = final ? UnitState::SumSq::kInSlot : UnitState::SumSq::kUnknown;
    s.mark_written();
    s.scratch.reset();
  }
  if (world_ == 1 && whole) return;
  if (whole && !boundary_) return;  // stages 0-1 reduce once per step
  PendingReduce p{u, {}, {}, {}};
  p.boundary = boundary_;
  if (whole) {
    settle_stale(s);  // no micro-step wrote it: zeros
    // The stored gradient in fp32 (MPI reduces fp32), reduced in place.
    p.send = DeviceBuffer(be_, s.padded * 4, MemCategory::kCommBuffers);
    be_->convert(s.grads.data(), opt_.grad_dtype, p.send.data(), DType::kF32, s.padded);
    if (s.replicated) {
      p.req = comm_->all_reduce(p.send.data(), s.padded, DType::kF32);
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
  p.req = p.shard_of_all_reduce
              ? comm_->all_reduce(p.send.data(), s.padded, DType::kF32)
              : comm_->reduce_scatter(p.send.data(), p.recv.data(), s.shard, DType::kF32);
}

void Engine::finish_reduce(PendingReduce& p) {
  Timer t;
  p.req.wait();
  comm_wait_ms_ += t.ms();
  if (p.shard_of_all_reduce)
    be_->copy(p.recv.data(), p.send.f32() + (size_t)rank_ * unit(p.unit).shard,
              unit(p.unit).shard * 4);
  UnitState& s = unit(p.unit);
  const float mean = 1.f / (float)world_;  // gradient_allreduce_op: mean
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

// ---- the optimizer step ----

void Engine::begin_pass() { gatherer_->begin_pass(); }

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

absl::StatusOr<StepStats> Engine::step(float lr) {
  drain_reductions(0);
  finish_delayed_update();  // the previous step's update, if it ran in the background
  StepStats st;
  st.loss_scale = loss_scale();
  // Global norm: every rank sums the squares of what it owns; replicated units count once.
  // Each unit's Σ g² is in its norm slot on the device (or the offloaded state's, on the host),
  // so the host waits for the device once, then adds them in unit order.
  auto counted = [&](const UnitState& s) { return !s.replicated || rank_ == 0; };
  std::vector<double> host_ss(units_.size(), 0.0);  // offloaded units' (zero where kZero)
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    if (!counted(s)) continue;
    // owned_grad settles a stale gradient (no backward since the last step), offloaded too.
    const OwnedGrad g = owned_grad(s);
    if (s.host_grads) {
      host_ss[u] = optimizer_->gradient_sum_squares((int)u);
    } else if (s.owned_ss == UnitState::SumSq::kUnknown) {
      be_->sum_squares(g.data, g.dtype, s.owned(), norm_slot(s));
      s.owned_ss = UnitState::SumSq::kInSlot;
    }
  }
  std::vector<double> slots(units_.size());
  be_->copy_to_host(slots.data(), norm_ss_.data(), norm_ss_.bytes());
  double ss = 0;
  for (size_t u = 0; u < units_.size(); ++u)  // kInSlot is never set for an offloaded gradient
    if (counted(units_[u]))
      ss += units_[u].owned_ss == UnitState::SumSq::kInSlot ? slots[u] : host_ss[u];
  if (world_ > 1) comm_->all_reduce_scalars(&ss, 1, ScalarOp::kSum);
  // A non-finite gradient anywhere makes the sum non-finite on every rank.
  st.grad_norm = std::sqrt(ss) / st.loss_scale;
  const bool forced = forced_overflow();  // tests only (common/fault.h)
  if (scaler_) {
    ZT_ASSIGN_OR_RETURN(st.skipped, scaler_->update(forced || !std::isfinite(st.grad_norm)));
    if (st.skipped) {
      finish_step();
      st.step = t_;
      return st;
    }
  }
  if (opt_.gradient_clipping > 0 && st.grad_norm > opt_.gradient_clipping)
    st.clip_coef = opt_.gradient_clipping / (st.grad_norm + 1e-6);
  ++t_;
  const OptimizerParams& a = opt_.optimizer;
  OptimizerStep as{.lr = lr,
                   .beta1 = a.beta1,
                   .beta2 = a.beta2,
                   .eps = a.eps,
                   .weight_decay = a.weight_decay,
                   .t = t_,
                   .grad_scale = st.clip_coef / st.loss_scale,
                   .adam_w_mode = a.adam_w_mode,
                   .bias_correction = a.bias_correction,
                   .kind = a.kind,
                   .lr_decay = a.lr_decay,
                   .momentum = a.momentum};
  if (opt_.delayed_update_after >= 0 && t_ > opt_.delayed_update_after) {  // t_ counts this one
    start_delayed_update(as);
    finish_step();
    st.step = t_;
    return st;
  }
  const DType pt = opt_.param_dtype;
  std::vector<UnitState*> gather_units;
  for (int u = 0; u < (int)units_.size(); ++u) {
    UnitState& s = units_[u];
    const OwnedGrad g = owned_grad(s);
    // One pass: unscale and clip the gradient, AdamW on the master, the working copy of the
    // owned elements (unless the master is it), and the gradient zeroed for the next step
    // where the backward accumulates into it (elsewhere its next writer overwrites it).
    as.zero_grad = g.stored && (direct_grads(s) || s.stored == UnitState::Stored::kKernelsAdd);
    if (g.stored) s.stored = as.zero_grad ? UnitState::Stored::kZero : UnitState::Stored::kStale;
    OptimizerState::Io io{.grad = g.data, .grad_t = g.dtype, .out_t = pt};
    if (s.store >= 0) {  // stage-3 parameter offload: the update goes to the host shard
      io.out = params_->begin_write(s.store);
      io.out_on_host = true;
    } else if (!optimizer_->master_is_working_copy(u)) {
      io.out = owned_working(s);
    }
    if (muon_)
      muon_->update(*optimizer_, u, layout_.hidden_matrices(u), s.replicated ? 0 : rank_ * s.shard,
                    s.owned(), !s.replicated, io, as);
    else
      optimizer_->update(u, io, as);
    if (s.store >= 0) params_->end_write(s.store);
    // Stages 1-2: the updated slice then goes to every rank (all-gather in place).
    if (!s.replicated && !s.sharded_params) gather_units.push_back(&s);
  }
  optimizer_->flush();  // NVMe write-behind: errors surface in this step
  gather_owned_slices(gather_units);
  finish_step();
  st.step = t_;
  return st;
}

// The all-gathers go out after every update: issued between updates they would share the
// cores and memory bandwidth with them (the communication thread copies while Adam streams).
// Node-shared parameters need no gather: every rank wrote its slice in place, and a barrier
// orders those writes before any rank's next read.
void Engine::gather_owned_slices(const std::vector<UnitState*>& units) {
  std::vector<CommRequest> gathers;
  bool shared = false;
  for (UnitState* s : units) {
    shared |= s->shared != nullptr;
    if (!s->shared)
      gathers.push_back(
          comm_->all_gather(owned_working(*s), s->params.data(), s->shard, opt_.param_dtype));
  }
  Timer t;
  for (CommRequest& g : gathers) g.wait();
  if (shared) shared_barrier();
  comm_wait_ms_ += t.ms();
}

void Engine::shared_barrier() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  comm_->barrier();
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Snapshots every owned gradient as the step would read it (the stored ones are then zeroed by
// finish_step) and starts the update on them in the background (zero/delayed_update.h).
void Engine::start_delayed_update(const OptimizerStep& as) {
  if (!delayed_) {
    std::vector<DelayedUpdate::Slice> slices;
    for (const UnitState& s : units_) {
      const bool reduced = !s.replicated && opt_.zero.stage == 1;  // the fp32 reduced shard
      slices.push_back({s.owned(), reduced ? DType::kF32 : opt_.grad_dtype});
    }
    delayed_ =
        std::make_unique<DelayedUpdate>(be_, optimizer_.get(), std::move(slices), opt_.param_dtype);
  }
  delayed_->start(
      [&](int u) -> const void* {
        UnitState& s = units_[u];
        const OwnedGrad g = owned_grad(s);
        return s.host_grads ? nullptr : g.data;  // null: the state's host store has it
      },
      as);
}

void Engine::finish_delayed_update() {
  if (!delayed_ || !delayed_->running()) return;
  delayed_->wait();
  // Node-shared: other ranks may still be reading the parameters in this step's backward.
  if (shared_) shared_barrier();
  std::vector<UnitState*> gather_units;
  delayed_->for_each_result([&](int u, const void* out, size_t bytes) {
    UnitState& s = units_[u];
    if (s.store >= 0) {
      std::memcpy(params_->begin_write(s.store), out, bytes);
      params_->end_write(s.store);
    } else {
      be_->copy_to_device(owned_working(s), out, bytes);
      delayed_to_device_ += (int64_t)bytes;
    }
    if (!s.replicated && !s.sharded_params) gather_units.push_back(&s);
  });
  gather_owned_slices(gather_units);
}

void Engine::drop_gathered() { gatherer_->drop_gathered(); }

void Engine::finish_step() {
  for (UnitState& s : units_) {
    if (s.holds_values()) {
      if (direct_grads(s)) {
        be_->zero(s.grads.data(), s.grads.bytes());
        s.stored = UnitState::Stored::kZero;
      } else {
        s.stored = UnitState::Stored::kStale;  // its next writer overwrites it
      }
    }
    s.owned_ss = UnitState::SumSq::kUnknown;
    s.reduced.reset();
  }
  gatherer_->end_step();  // stage 3: the trace for the next step; nothing stays gathered
}

}  // namespace zt

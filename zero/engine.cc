#include "zero/engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "common/status.h"
#include "zero/engine_unit.h"
#include "zero/param_gatherer.h"
#include "zero/partition.h"

namespace zt {

Engine::Engine(const ParamLayout& layout, Backend* be, Communicator* comm, const EngineOptions& opt,
               std::unique_ptr<OptimizerState> optimizer, std::unique_ptr<ParamStore> params)
    : layout_(layout),
      be_(be),
      comm_(comm),
      opt_(opt),
      world_comm_(comm),
      units_(layout.num_units()),
      optimizer_(optimizer ? std::move(optimizer)
                           : make_device_optimizer_state(be, optimizer_kind(opt.optimizer))),
      params_(std::move(params)) {
  const int stage = opt.zero.stage;
  ZT_CHECK(stage >= 0 && stage <= 3);
  dp_ = comm->world_size();
  // ZeRO++'s and MiCS's groups (checked: check_zeropp). Under MiCS the engine shards over its
  // group: comm_, rank_ and world_ are the group's from here on.
  if (stage > 0) zeropp_ = make_zeropp_groups(opt.zero.zeropp, *comm);
  if (zeropp_.mics) comm_ = zeropp_.mics.get();
  rank_ = comm_->rank();
  world_ = comm_->world_size();
  if (opt.loss_scaling) scaler_.emplace(opt.loss_scaler);
  ZT_CHECK(!params_ || stage == 3);
  // Offloaded, the sharded units' gradients go to host memory (zero/gradients.h).
  const bool host_grads = stage >= 2 && optimizer_->host_tracker() != nullptr;
  // The delayed update needs an offloaded state (it reads host gradients, runs the CPU step).
  // (The offload pipeline applies only where one is: pipelined().)
  ZT_CHECK(opt.delayed_update_after < 0 || optimizer_->host_tracker() != nullptr);
  rule_ = make_optimizer_rule(opt.optimizer, opt.second_group_lr, layout, be, comm_);
  // A collective rule's update needs every rank on the training thread, not the delayed one's.
  ZT_CHECK(opt.delayed_update_after < 0 || !rule_->collective());
  const size_t pbytes = dtype_size(opt.param_dtype);
  const bool fp32_params = opt.param_dtype == DType::kF32;
  std::vector<int64_t> numels;
  for (const auto& unit : layout.units()) numels.push_back((int64_t)unit.numel);
  partition_ =
      plan_partition(numels, {.stage = stage,
                              .world = world_,
                              .persistence_threshold = opt.zero.stage3_param_persistence_threshold,
                              .host_grads = host_grads,
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
  }
  const ZeroppOptions& zo = opt.zero.zeropp;
  if (stage == 3 && rank_ == 0 && dp_ == world_ &&
      (zo.quantized_weights || zo.hpz_partition_size > 1 || zo.quantized_gradients) &&
      std::none_of(partition_.begin(), partition_.end(),
                   [](const UnitPartition& p) { return p.sharded_params; }))
    std::fprintf(stderr,
                 "warning: ZeRO++ changes nothing here: no unit is sharded (one rank, or every "
                 "unit at or under stage3_param_persistence_threshold, %lld), so there are no "
                 "gathers to quantize or keep in groups\n",
                 (long long)opt.zero.stage3_param_persistence_threshold);
  // First, before any allocation that could fail on one rank alone: it is collective.
  if (opt.node_shared_params) map_shared_params();
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
    if (opt.delayed_update_after >= 0 && swaps_params(s))  // beside the copy it doubles
      s.next_params = DeviceBuffer(be, s.params.bytes(), MemCategory::kParams);
    const bool alias = fp32_params && s.store < 0;  // an fp32 device working copy is the master
    optimizer_->add_unit(s.owned(), alias ? static_cast<float*>(owned_working(s)) : nullptr);
  }
  grads_ = std::make_unique<Gradients>(
      be, comm_, world_comm_, zeropp_, partition_,
      Gradients::Options{.grad_dtype = opt.grad_dtype,
                         .overlap_comm = opt.zero.overlap_comm,
                         .reduce_scatter = opt.zero.reduce_scatter,
                         .pin_with = opt.pin_host_gradients ? be : nullptr,
                         .land_on_host = optimizer_->host_tracker() &&
                                         (pipelined() || opt.delayed_update_after >= 0)},
      [this](double ms) { note_comm_wait(ms); });
  std::vector<ParamGatherer::Shard> shards(units_.size());
  for (size_t u = 0; u < units_.size(); ++u)
    shards[u] = {units_[u].store < 0 ? units_[u].params.data() : nullptr, units_[u].store};
  const ZeroOptions& z = opt.zero;
  gatherer_ = std::make_unique<ParamGatherer>(
      be, comm_, params_.get(), opt.param_dtype, z.stage3_prefetch_bucket_size,
      z.stage3_max_live_parameters, z.stage3_max_reuse_distance, z.overlap_comm, partition_,
      std::move(shards), z.stage == 3 && z.zeropp.quantized_weights, zeropp_.hpz.get(),
      world_comm_);
  gatherer_->set_before_read([this](int v) { publish(v); });
}

Engine::~Engine() {
  pipeline_.reset();  // waits for an update still running and the copies reading its staging
  grads_.reset();     // waits for the reductions in flight
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

size_t Engine::host_bytes(MemCategory c, bool peak) const {
  size_t b = 0;
  for (const MemoryTracker* t :
       {optimizer_->host_tracker(), params_ ? &params_->host_tracker() : nullptr,
        pipeline_ ? &pipeline_->host_tracker() : nullptr, &grads_->host_tracker()})
    if (t) b += peak ? t->peak(c) : t->current(c);
  return b;
}
OffloadTimes Engine::offload_times() const {
  // An update still running off the training thread counts once done, whole, in the step whose
  // forward (pipeline) or step (delayed update) waited for it: until then the state's times as
  // that update started (everything before it) stand for the state's.
  const OffloadTimes state =
      pipeline_ && pipeline_->running() ? pipeline_->state_times_at_start() : optimizer_->times();
  return state + (params_ ? params_->times() : OffloadTimes{}) + pipeline_clock_.times() +
         grads_->times();
}

void Engine::note_comm_wait(double ms) {
  comm_wait_ms_ += ms;
  trace_elapsed(Track::kCompute, "wait for communication", ms);
}
int64_t Engine::bytes_to_host() const {
  return optimizer_->bytes_to_host() + grads_->bytes_to_host();
}
int64_t Engine::bytes_to_device() const {
  return optimizer_->bytes_to_device() + (params_ ? params_->bytes_to_device() : 0) +
         published_to_device_;
}

size_t Engine::shard_numel(int u) const { return units_[u].shard; }
size_t Engine::padded_numel(int u) const { return units_[u].padded; }

// The working copy of the owned elements: all of params (replicated units, stage-3 shards) or
// this rank's slice of the whole unit (stages 1-2).
void* Engine::owned_working(UnitState& s) {
  if (s.replicated || s.sharded_params) return s.params.data();
  return static_cast<char*>(s.working()) + (size_t)rank_ * s.shard * dtype_size(opt_.param_dtype);
}

// ---- the transformer's calls ----

const void* Engine::fetch_stored(int u, DType* t) {
  publish(u);  // its pipelined update (a gather of a later unit publishes that one first)
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

void Engine::begin_pass() { gatherer_->begin_pass(); }

void Engine::shared_barrier() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  comm_->barrier();
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Engine::drop_gathered() { gatherer_->drop_gathered(); }

float* Engine::grads(int u) {
  publish(u);  // its pipelined update has read the gradient this backward overwrites
  return grads_->backward_target(u);
}

TensorRef Engine::grads_stored(int u) {
  publish(u);
  return grads_->kernels_target(u);
}

void Engine::reduce_gradients(int u) { grads_->reduce(u, boundary_); }

}  // namespace zt

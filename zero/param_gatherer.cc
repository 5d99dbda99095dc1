#include "zero/param_gatherer.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/timer.h"
#include "common/trace.h"

namespace zt {

ParamGatherer::ParamGatherer(Backend* be, Communicator* comm, ParamStore* store, DType param_dtype,
                             int64_t prefetch_bucket_size, int64_t max_live_parameters,
                             int64_t max_reuse_distance, bool overlap_comm,
                             const std::vector<UnitPartition>& plan, std::vector<Shard> shards,
                             bool quantized_weights, Communicator* hpz, Communicator* world)
    : be_(be),
      comm_(comm),
      store_(store),
      dtype_(param_dtype),
      prefetch_bucket_size_(prefetch_bucket_size),
      max_live_(max_live_parameters),
      max_reuse_distance_(max_reuse_distance),
      overlap_comm_(overlap_comm),
      quantized_weights_(quantized_weights),
      hpz_(hpz),
      world_comm_(world ? world : comm),
      rank_(comm->rank()),
      world_(comm->world_size()),
      units_(plan.size()) {
  ZT_CHECK(shards.size() == plan.size());
  for (size_t u = 0; u < plan.size(); ++u) {
    Unit& s = units_[u];
    s.numel = plan[u].numel;
    s.shard = plan[u].shard;
    s.padded = plan[u].padded;
    s.sharded = plan[u].sharded_params;
    s.home = shards[u];
  }
}

ParamGatherer::~ParamGatherer() {
  // Waited for, not finished (wait_gathered may allocate hpZ's secondary, and throw).
  for (Unit& s : units_) {
    s.req.wait();
    s.qwz.wait();
  }
}

void ParamGatherer::check_unit_sequence(int u) {
  // Ranks that would run different unit sequences would post mismatched all-gathers and hang;
  // agree on the unit first (a scalar reduction, outside the volume accounting).
  double v[2] = {(double)u, (double)-u};
  world_comm_->all_reduce_scalars(v, 2, ScalarOp::kMax);
  // Every rank sees the mismatch, so each ends with the error and none is left waiting.
  if (v[0] != u || -v[1] != u)
    throw std::runtime_error(
        absl::StrCat("rank ", rank_,
                     ": ZeRO stage 3 ranks are executing different unit sequences (this rank "
                     "fetches unit ",
                     u,
                     ", another rank a different one); every rank must run the same "
                     "model and batch shape"));
}

void ParamGatherer::gather(int u, bool backward) {
  Unit& s = units_[u];
  if (s.gathered.data()) return;
  if (before_read_) before_read_(u);
  // Checked while the sequence is being learnt (first step, or after it changed); afterwards
  // every rank follows the same validated sequence, and a blocking check here would stall the
  // prefetches queued ahead of it.
  if (!trace_valid_) check_unit_sequence(u);
  make_room(s.padded);
  const size_t pbytes = dtype_size(dtype_);
  s.gathered = DeviceBuffer(be_, (size_t)s.padded * pbytes, MemCategory::kWorkspace);
  s.pending = true;
  gathered_ += s.padded;
  peak_gathered_ = std::max(peak_gathered_, gathered_);
  if (hpz_ && backward && s.secondary.data()) {  // hpZ: within the group, from the secondaries
    s.req = hpz_->all_gather(s.secondary.data(), s.gathered.data(), secondary_numel(s), dtype_);
    return;
  }
  const void* shard = s.home.device;
  if (s.home.store >= 0) {  // offloaded: into this rank's slice, then gathered in place
    char* own = static_cast<char*>(s.gathered.data()) + (size_t)rank_ * s.shard * pbytes;
    const uint64_t copy = store_->load(s.home.store, own);
    // A communicator reading device memory from the host (MPI) reads the slice at once; on a
    // GPU the collective's stream is ordered after the copy instead (qwZ's quantization runs
    // on the compute stream, so it waits for the copy).
    if (be_->host_addressable() || quantized_weights_) be_->wait_copy(copy);
    shard = own;
  }
  s.refresh_secondary = hpz_ != nullptr;
  if (quantized_weights_)
    s.qwz = QuantizedAllGather(be_, comm_, shard, (size_t)s.shard, dtype_);
  else
    s.req = comm_->all_gather(shard, s.gathered.data(), (size_t)s.shard, dtype_);
}

size_t ParamGatherer::secondary_numel(const Unit& s) const {
  return (size_t)s.padded / (size_t)hpz_->world_size();
}

void ParamGatherer::wait_gathered(Unit& s) {
  if (!s.pending) return;
  Timer t;
  s.req.wait();
  if (s.qwz.active()) s.qwz.finish(s.gathered.data());
  if (s.refresh_secondary) {  // hpZ: keep our 1/H of the unit for the backward's gathers
    const size_t pbytes = dtype_size(dtype_), n = secondary_numel(s);
    if (!s.secondary.data()) s.secondary = DeviceBuffer(be_, n * pbytes, MemCategory::kParams);
    be_->copy(s.secondary.data(),
              static_cast<const char*>(s.gathered.data()) + hpz_->rank() * n * pbytes,
              n * pbytes);
    s.refresh_secondary = false;
  }
  const double waited = t.ms();
  comm_wait_ms_ += waited;
  trace_elapsed(Track::kCompute, "wait for communication", waited);
  s.pending = false;
}

void ParamGatherer::free_gathered(Unit& s) {
  wait_gathered(s);
  s.gathered.reset();
  gathered_ -= s.padded;
}

void ParamGatherer::make_room(int64_t numel) {
  for (Unit& s : units_) {
    if (gathered_ + numel <= max_live_) return;
    if (s.gathered.data() && s.live == 0) free_gathered(s);
  }
}

// Keep a released unit when it is fetched again with fewer than stage3_max_reuse_distance
// parameters used in between (0 disables reuse). As DeepSpeed 0.19's
// partitioned_param_coordinator: it counts the parameters' numel (not padded) and stops once
// they reach the limit.
bool ParamGatherer::keep_for_reuse(int u) const {
  if (!trace_valid_) return false;
  int64_t between = 0;
  for (size_t i = recording_.size(); i < trace_.size(); ++i) {
    if (trace_[i] == u) return between < max_reuse_distance_;
    between += units_[trace_[i]].numel;
  }
  return false;  // not used again this step
}

void ParamGatherer::prefetch_after(size_t cursor) {
  int64_t budget = prefetch_bucket_size_;
  for (size_t i = cursor; i < trace_.size() && budget > 0; ++i) {
    const Unit& s = units_[trace_[i]];
    if (!s.sharded) continue;
    if (s.gathered.data()) {
      // Gathered and in use now, but its release will free it (no reuse): it is gathered again
      // at this fetch, within the bucket. Skipping it free would run one unit further ahead for
      // the rest of the pass (the last block at the forward/backward turn, reuse distance 0).
      if (s.live > 0 && !keep_for_reuse(trace_[i])) budget -= s.padded;
      continue;
    }
    if (gathered_ + s.padded > max_live_) return;
    if (!in_host_memory_soon(trace_[i])) return;  // its fetch waits for the drive, not this
    budget -= s.padded;
    gather(trace_[i], trace_backward_[i]);
  }
}

// Parameter offload: the store starts reading the shards the trace gathers after the cursor
// (beyond those gathered already), as many as it has buffers for, so the drive works while
// this unit computes.
void ParamGatherer::read_ahead(size_t cursor) {
  if (!store_ || !store_->reads_ahead() || !trace_valid_) return;
  read_at_.resize(units_.size(), -1);
  for (size_t i = cursor; i < trace_.size(); ++i) {
    const int u = trace_[i];
    const Unit& s = units_[u];
    if (s.home.store < 0 || s.gathered.data()) continue;
    const bool on_drive = store_->place(s.home.store) == ParamStore::Place::kDrive;
    if (on_drive && before_read_) before_read_(u);  // the drive holds what it will read
    if (!store_->prefetch(s.home.store)) return;
    if (on_drive) read_at_[u] = fetches_;
  }
}

// Whether the prefetcher may gather unit u now: its shard is in host memory, or on its way.
// With one rank, on its way means its read has landed. With several, a gather starts a
// collective, and every rank must start them in the same order, so the decision may not
// depend on a read's progress: on its way means its read began at an earlier fetch (a unit's
// compute ago; the load waits for the rest). Without reads ahead every shard qualifies (the
// load reads it there and then).
bool ParamGatherer::in_host_memory_soon(int u) const {
  const Unit& s = units_[u];
  if (s.home.store < 0 || !store_->reads_ahead()) return true;
  switch (store_->place(s.home.store)) {
    case ParamStore::Place::kHost: return true;
    case ParamStore::Place::kReading:
      if (world_ == 1) return store_->read_done(s.home.store);
      return (size_t)u < read_at_.size() && read_at_[u] >= 0 && read_at_[u] < fetches_;
    case ParamStore::Place::kDrive: return false;
  }
  return false;
}

// The predicted order restarts (a new pass, the next step) or broke: reads ahead begin again
// from the trace's start.
void ParamGatherer::restart_reads_ahead() {
  if (!store_ || !store_->reads_ahead()) return;
  store_->forget_reads_ahead();
  read_ahead(0);
}

const void* ParamGatherer::fetch(int u) {
  Unit& s = units_[u];
  ++s.live;
  if (!s.sharded) return nullptr;
  if (trace_valid_ && (recording_.size() >= trace_.size() || trace_[recording_.size()] != u)) {
    trace_valid_ = false;  // the sequence changed (e.g. evaluation): stop predicting
    if (store_) store_->forget_reads_ahead();
  }
  const bool backward = std::find(recording_.begin(), recording_.end(), u) != recording_.end();
  recording_.push_back(u);
  recording_backward_.push_back(backward);
  ++fetches_;
  gather(u, backward);
  wait_gathered(s);
  read_ahead(recording_.size());
  if (overlap_comm_ && trace_valid_) prefetch_after(recording_.size());
  read_ahead(recording_.size());  // into the buffers the prefetcher's loads left
  return s.gathered.data();
}

bool ParamGatherer::release(int u) {
  Unit& s = units_[u];
  ZT_CHECK(s.live > 0);
  if (--s.live > 0) return false;
  if (s.sharded && !keep_for_reuse(u)) free_gathered(s);
  return true;
}

void ParamGatherer::begin_pass() {
  recording_.clear();
  recording_backward_.clear();
  restart_reads_ahead();
}

void ParamGatherer::drop_gathered() {
  for (Unit& s : units_)
    if (s.gathered.data() && s.live == 0) free_gathered(s);
}

void ParamGatherer::end_step() {
  // The recorded sequence drives prefetch and reuse from the next step on.
  if (!recording_.empty()) {
    trace_ = std::move(recording_);
    trace_backward_ = std::move(recording_backward_);
    trace_valid_ = true;
    recording_.clear();
    recording_backward_.clear();
  }
  drop_gathered();        // nothing stays gathered across steps: parameters changed
  for (Unit& s : units_) s.secondary.reset();  // nor do hpZ's secondary shards
  restart_reads_ahead();  // the next step's first shards
}

}  // namespace zt

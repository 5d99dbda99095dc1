// The engine's optimizer step: norm, clipping, the update per unit, the update off the training
// thread (the offload pipeline, the delayed update).
#include <cmath>
#include <cstring>
#include <vector>

#include "common/fault.h"
#include "common/status.h"
#include "common/timer.h"
#include "common/trace.h"
#include "zero/engine_unit.h"
#include "zero/param_gatherer.h"

namespace zt {

absl::StatusOr<StepStats> Engine::step(float lr) {
  grads_->drain(0);
  collect_update();  // the previous step's update, if it ran in the background
  StepStats st;
  st.loss_scale = loss_scale();
  // Global norm: every rank sums the squares of what it owns; replicated units count once.
  double ss = grads_->owned_sum_squares([&](int u) { return !units_[u].replicated || rank_ == 0; });
  if (world_ > 1) {
    Timer t;
    comm_->all_reduce_scalars(&ss, 1, ScalarOp::kSum);
    note_comm_wait(t.ms());
  }
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
  OptimizerStep as = rule_->step(lr, t_, st.clip_coef / st.loss_scale);
  // Off the training thread: the delayed update (t_ counts this step), or the offload
  // pipeline. The worker reads host gradients (the delayed update takes them over:
  // Gradients::hand_off); finish_step then settles the stored gradients (zeroed or stale), so
  // the update zeroes none as it reads.
  const bool delayed = opt_.delayed_update_after >= 0 && t_ > opt_.delayed_update_after;
  if (delayed || pipelined()) {
    start_update_pipeline(as, delayed);
    finish_step();
    st.step = t_;
    return st;
  }
  const DType pt = opt_.param_dtype;
  std::vector<UnitState*> gather_units;
  for (int u = 0; u < (int)units_.size(); ++u) {
    UnitState& s = units_[u];
    const Gradients::View g = grads_->owned(u);
    // One pass: unscale and clip the gradient, the optimizer on the master, the working copy of
    // the owned elements (unless the master is it), and the gradient zeroed for the next step
    // where the backward accumulates into it (elsewhere its next writer overwrites it).
    as.zero_grad = grads_->zero_as_read(u);
    grads_->read(u, as.zero_grad);
    OptimizerState::Io io{.grad = g.data, .grad_t = g.dtype, .grad_on_host = g.host, .out_t = pt};
    if (s.store >= 0) {  // stage-3 parameter offload: the update goes to the host shard
      io.out = params_->begin_write(s.store);
      io.out_on_host = true;
    } else if (!optimizer_->master_is_working_copy(u)) {
      io.out = owned_working(s);
    }
    rule_->update(*optimizer_,
                  {.unit = u,
                   .owned_begin = s.replicated ? 0 : rank_ * s.shard,
                   .owned = s.owned(),
                   .sharded = !s.replicated},
                  io, as);
    if (s.store >= 0) params_->end_write(s.store);
    // Stages 1-2: the updated slice then goes to every rank (all-gather in place).
    if (!s.replicated && !s.sharded_params) gather_units.push_back(&s);
  }
  optimizer_->flush();  // NVMe write-behind: errors surface in this step
  rule_->end_step();
  gather_owned_slices(gather_units);
  finish_step();
  st.step = t_;
  return st;
}

// The all-gathers go out after every update: issued between updates they would share the
// cores and memory bandwidth with them (the communication thread copies while the optimizer
// streams). Node-shared parameters need no gather: every rank wrote its slice in place, and a
// barrier orders those writes before any rank's next read.
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
  note_comm_wait(t.ms());
}

bool Engine::pipelined() const {
  return opt_.offload_pipeline && optimizer_->host_tracker() && !rule_->collective();
}

// Every unit's update runs on the worker, on the host gradients (zero/gradients.h: the shards
// of stages 2-3, and the device's gradients landed there by the backward, land_on_host). It
// reads them in place (the next backward writes a unit's gradient only after publish(u) has
// waited for its update), except the delayed update, which takes them over
// (Gradients::hand_off: the next backward writes a second buffer).
// Delayed: every unit's weights go to a second working copy (swaps_params) or to staging, put
// in place by the next step (collect_update) and published by each unit's next fetch.
// Pipelined: straight into the working copy where the backend's memory is the host's, else into
// staging; each unit waited for, put in place and published by its next fetch.
void Engine::start_update_pipeline(const OptimizerStep& as, bool delayed) {
  if (!pipeline_) {
    std::vector<UpdatePipeline::Slice> slices;
    for (int u = 0; u < (int)units_.size(); ++u)
      slices.push_back({units_[u].owned(), grads_->owned_dtype(u)});
    optimizer_->prepare_staging();  // here: the worker thread has no GPU device of its own
    // Staging a GPU copies from: page-locked (offload_optimizer.pin_memory).
    const bool pin = opt_.pin_host_gradients && !be_->host_addressable();
    pipeline_ = std::make_unique<UpdatePipeline>(
        optimizer_.get(), std::move(slices), opt_.param_dtype, opt_.optimizer_threads, be_, pin);
  }
  pipeline_->start(
      [&](int u) {
        UnitState& s = units_[u];
        UpdatePipeline::Source src;
        const Gradients::View g = grads_->owned(u);
        // The delayed update's next backward writes the host gradient: it takes this buffer
        // and the backward the other one (Gradients::hand_off).
        ZT_CHECK(g.host);  // land_on_host
        src.grad = delayed ? grads_->hand_off(u).data : g.data;
        if (delayed && swaps_params(s)) src.out = s.next_params.data();
        if (!delayed) {
          s.update_pending = true;
          // The working copy, as the serial update.
          if (UpdatePipeline::writes_working_copy(partition_[u], be_->host_addressable())) {
            src.out = owned_working(s);
            published_to_device_ += (int64_t)(s.owned() * dtype_size(opt_.param_dtype));
          }
        }
        return src;
      },
      as, delayed ? (int)units_.size() : UpdatePipeline::kStagingSlots);
  delayed_running_ = delayed;
  publish_next_ = 0;  // (delayed: the units collect_update put in place just before)
}

void Engine::publish(int u) {
  // In forward order: a later unit's update may be waiting for an earlier one's staging slot,
  // and at stages 1-2 every rank all-gathers the slices in the same order.
  while (publish_next_ <= u) publish_unit(units_[publish_next_++]);
}

void Engine::publish_unit(UnitState& s) {
  if (s.update_pending) {  // the pipeline's: wait for it, put its weights in place
    s.update_pending = false;
    Timer waited;
    pipeline_->wait(int(&s - units_.data()));
    // The part of the CPU step that compute did not hide: exposed optimizer time.
    trace_elapsed(Track::kOptimizer, "wait for optimizer", waited.ms());
    Timer copied;
    if (put_staged(s)) pipeline_clock_.add(OffloadClock::kParamIn, copied.ms());
    s.publish_pending = true;
  }
  if (!s.publish_pending) return;
  s.publish_pending = false;
  if (s.copy_in) be_->join_copy(s.copy_in);  // the kernels queued from here on see the weights
  s.copy_in = 0;
  if (!s.replicated && !s.sharded_params) gather_owned_slices({&s});
}

bool Engine::swaps_params(const UnitState& s) const {
  const UnitPartition& p = partition_[&s - units_.data()];
  return !s.shared && UpdatePipeline::swaps_working_copy(p, be_->host_addressable());
}

bool Engine::put_staged(UnitState& s) {
  const int u = int(&s - units_.data());
  const std::span<const uint8_t> out = pipeline_->take(u);
  if (out.empty()) return false;
  if (s.store >= 0) {
    std::memcpy(params_->begin_write(s.store), out.data(), out.size());
    params_->end_write(s.store);
    pipeline_->release(u, 0);
  } else {
    // On the copy stream, from page-locked staging: no host wait. The kernels see the weights
    // from the unit's publication on (join_copy); the worker waits for the copy before it
    // writes the slot again.
    s.copy_in = be_->copy_to_device_unjoined(owned_working(s), out.data(), out.size());
    pipeline_->release(u, s.copy_in);
    published_to_device_ += (int64_t)out.size();
  }
  return true;
}

void Engine::finish_update() {
  collect_update();
  publish((int)units_.size() - 1);
}

void Engine::collect_update() {
  if (!pipeline_ || !pipeline_->running()) return;
  if (!delayed_running_) {
    publish((int)units_.size() - 1);
    pipeline_->wait_all();
    return;
  }
  Timer waited;
  pipeline_->wait_all();
  // The part of the background step that compute did not hide: exposed optimizer time (the
  // breakdown's cpu_step_ms already holds the whole step, from the worker's clock).
  trace_elapsed(Track::kOptimizer, "wait for delayed update", waited.ms());
  // Node-shared: other ranks may still be reading the parameters in this step's backward.
  if (shared_) {
    Timer b;
    shared_barrier();
    note_comm_wait(b.ms());
  }
  // Every unit's weights in place now (their copies queued, not joined), each published by its
  // next fetch: on a GPU the forward of unit 0 waits for its own copy, not for every unit's.
  Timer copied;
  for (UnitState& s : units_) {
    if (swaps_params(s)) {
      std::swap(s.params, s.next_params);
      published_to_device_ += (int64_t)s.params.bytes();
    } else if (!put_staged(s)) {
      continue;
    }
    s.publish_pending = true;
  }
  pipeline_clock_.add(OffloadClock::kParamIn, copied.ms());
  publish_next_ = 0;
}

void Engine::finish_step() {
  grads_->end_step();
  gatherer_->end_step();  // stage 3: the trace for the next step; nothing stays gathered
}

}  // namespace zt

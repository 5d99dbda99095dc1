// The ZeRO engine (docs/architecture.md "ZeRO engine"; Rajbhandari et al., SC20): owns parameters,
// gradients and optimizer state per unit and implements the transformer's calls (fetch /
// release / grads / reduce_gradients) plus step(). The stage decides what each call does:
//
// clang-format off
// | stage | kept per rank                  | reduce_gradients           | step
// |-------|--------------------------------|----------------------------|-------------------------
// | 0     | params, grads, optimizer       | all-reduce at the boundary | update all
// | 1     | params, grads, optimizer shard | reduce-scatter at boundary | update shard, all-gather
// | 2     | params, grad shard, opt. shard | reduce-scatter every micro | update shard, all-gather
// | 3     | param shard, grad shard, shard | reduce-scatter every micro | update shard
// clang-format on
//
// Each unit's flat buffer is padded to a multiple of N_d and split into equal contiguous shards;
// rank r owns elements [r*s, (r+1)*s): the partition plan (zero/partition.h, partition())
// says, unit by unit. Stage 3 gathers a unit at fetch() and frees it at release(), except
// units of at most stage3_param_persistence_threshold elements (replicated: kept whole on every
// rank, gradients all-reduced, updated in full, so they cost no all-gather after the first
// step); the gathers, prefetch and reuse are zero/param_gatherer.h's. With overlap_comm,
// gradient reduction of a unit runs while the next unit's backward computes.
//
// Bytes per parameter: working params dtype_size(param_dtype), grads dtype_size(grad_dtype),
// optimizer K = optimizer_bytes_per_param (the fp32 master, unless the fp32 working copy is it,
// and 4 bytes per optimizer state).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/dtype.h"
#include "model/backend.h"
#include "model/layout.h"
#include "model/unit_engine.h"
#include "zero/comm.h"
#include "zero/deepspeed_defaults.h"
#include "zero/gradients.h"
#include "zero/loss_scaler.h"
#include "zero/optimizer_rule.h"
#include "zero/optimizer_state.h"
#include "zero/param_gatherer.h"
#include "zero/param_store.h"
#include "zero/partition.h"
#include "zero/update_pipeline.h"
#include "zero/zeropp.h"

namespace zt {

// The zero_optimization keys the engine uses (DeepSpeed names and defaults).
struct ZeroOptions {
  int stage = 0;
  bool overlap_comm = false;
  bool reduce_scatter = true;  // false: stages 1-3 all-reduce gradients and keep their shard
  int64_t stage3_prefetch_bucket_size = ds_default::kStage3PrefetchBucketSize;
  int64_t stage3_param_persistence_threshold = ds_default::kStage3ParamPersistenceThreshold;
  int64_t stage3_max_live_parameters = ds_default::kStage3MaxLiveParameters;
  int64_t stage3_max_reuse_distance = ds_default::kStage3MaxReuseDistance;
  ZeroppOptions zeropp;  // ZeRO++ at stage 3 (zero/zeropp.h); all off by default
};

struct EngineOptions {
  DType param_dtype = DType::kF32;  // working parameters
  DType grad_dtype = DType::kF32;   // stored (accumulated) gradients
  // The optimizer (DeepSpeed's "optimizer" section; the lr comes per step from the schedule),
  // and its second parameter group's scheduled rate (zero/optimizer_rule.h; null: the step's).
  OptimizerParams optimizer;
  GroupLr second_group_lr;
  float gradient_clipping = 0.f;  // max global L2 norm; 0 disables
  ZeroOptions zero;
  // fp16: the loss is scaled by loss_scale() (the caller multiplies its seed gradient), and an
  // overflow on any rank skips the step on every rank (DeepSpeed's DynamicLossScaler).
  bool loss_scaling = false;
  LossScalerConfig loss_scaler;
  // Delayed parameter update (DPU; Ren et al., "ZeRO-Offload", USENIX ATC 2021, Section 5.2):
  // after delayed_update_after ordinary steps (< 0: never), an offloaded optimizer's step runs
  // in the background while the next forward and backward run on the parameters as they were
  // before it (one step stale); the next step() waits for it and puts its weights in place, each
  // unit's published by the unit's next fetch (Engine::publish). With
  // D = delayed_update_after and w_k the weights after step k, the gradient of step k > D + 1
  // is taken at w_{k-2} and applied to w_{k-1}. Needs an offloaded optimizer state (its update
  // reads host gradients the next backward does not write, and writes a second working copy or
  // host staging: docs/offload.md "Delayed parameter update").
  int delayed_update_after = -1;
  // The offload pipeline (docs/offload.md "The offload pipeline"): with an offloaded optimizer
  // state, step() starts the update of every unit on a worker thread and returns; the next
  // fetch of a unit (its forward, a stage-3 gather or read ahead) waits for that unit's update
  // alone and publishes its weights. Bitwise the serial update. Not with a collective rule
  // (zero/optimizer_rule.h): that updates serially. Node-shared parameters: each rank's worker
  // writes its slice in place (every rank has left the backward: the norm's all-reduce came
  // first), and the unit's publication ends in a node barrier, so no rank reads a unit before
  // every rank's update of it is done.
  bool offload_pipeline = false;
  // OpenMP threads of the update off the training thread (the pipeline, the delayed update).
  int optimizer_threads = 1;
  // offload_optimizer.pin_memory: the host gradients of an offloaded state page-locked.
  bool pin_host_gradients = true;
  // Stages 1-2 on a backend whose memory is host memory (the CPU), every rank on one node: the
  // working copy of the sharded units is one per node, in shared memory (zero/comm.h
  // map_node_shared), not one per rank. Each rank's update writes its slice in place and a
  // barrier replaces the all-gather: (N_d - 1)/N_d of the working copy is neither sent nor
  // stored again, and the node holds 2Ψ (bf16) or 4Ψ (fp32) of it, not N_d times that. Each
  // rank's memory report still counts the whole copy (it reads all of it). Where it cannot
  // apply (more than one node, a GPU, /dev/shm too small) it says so on stderr and all-gathers.
  bool node_shared_params = false;
};

struct StepStats {
  double grad_norm = 0;   // global L2 norm before clipping (averaged, unscaled gradients)
  double clip_coef = 1;   // factor applied to the gradients (<= 1)
  int step = 0;           // optimizer steps taken, after this one
  bool skipped = false;   // fp16 overflow: no update this time
  double loss_scale = 1;  // the scale this step's gradients carried
};

class Engine final : public UnitEngine {
 public:
  // comm must outlive the engine; its world size is N_d. optimizer: where the master weights and
  // moments live (zero/optimizer_state.h); null keeps them on the device. Offloaded, the sharded
  // units' gradients (stages 2-3) go to host memory too (zero/gradients.h). params (stage 3):
  // where the parameter shards live between gathers (zero/param_store.h); null: the device.
  // With either offload, a single rank still shards (into one shard) so that the offloaded
  // state leaves the device. Collective where node_shared_params applies (every rank constructs
  // its engine at the same point, after agreeing that setup went well).
  Engine(const ParamLayout& layout, Backend* be, Communicator* comm, const EngineOptions& opt,
         std::unique_ptr<OptimizerState> optimizer = nullptr,
         std::unique_ptr<ParamStore> params = nullptr);
  ~Engine() override;

  // Host fp32 values of a whole unit (numel elements, layout order). set: every rank passes
  // the same values and keeps what it owns. Node-shared, every rank writes the whole unit (the
  // same bytes): a caller that sets a unit again with other values must first make sure no
  // rank still writes or reads the old ones (a collective between, as the trainer's agreement
  // after each setup phase). get: collective in stages 1-3 (every rank calls).
  void set_unit_params(int u, std::span<const float> host);
  void get_unit_params(int u, std::span<float> host);
  // The averaged gradient the next step() will use, as fp32 (collective in stages 1-3).
  void get_unit_grads(int u, std::span<float> host);

  // ---- checkpoints (trainer/checkpoint.h), unit by unit: no collectives, except that
  // get_saved_state and set_unit_state first finish a delayed update (an all-gather, or a
  // barrier where node-shared), which
  // save_checkpoint does on every rank beforehand ----
  // The elements [first, second) of unit u that this rank saves: its owned slice without the
  // padding; a replicated unit (stage 0, small stage-3 units) on rank 0 only, empty elsewhere.
  std::pair<size_t, size_t> saved_range(int u) const;
  // The fp32 master weights and optimizer states of those elements (second - first each;
  // states: optimizer_info(kind).num_states arrays), after finishing a delayed update.
  void get_saved_state(int u, float* master, float* const* states);
  // Restores unit u from its whole state (numel each, the same on every rank): each rank keeps
  // its owned slice of master and states, the working copy is the master rounded to the
  // working dtype (as after a step). Any stage and world size: the shards re-slice here.
  void set_unit_state(int u, std::span<const float> master,
                      std::span<const std::span<const float>> states);
  // Optimizer steps taken (bias correction, a learning rate decay) and the fp16 loss scaler, as
  // saved.
  void set_steps_taken(int t) { t_ = t; }
  std::optional<LossScaler::State> loss_scaler_state() const {
    return scaler_ ? std::optional(scaler_->state()) : std::nullopt;
  }
  void restore_loss_scaler(const LossScaler::State& s) {
    if (scaler_) scaler_->restore(s);
  }

  TensorView fetch(int unit) override;
  const void* fetch_stored(int unit, DType* t) override;
  void release(int unit) override;
  float* grads(int unit) override;
  TensorRef grads_stored(int unit) override;
  void reduce_gradients(int unit) override;

  // Starts a forward(/backward) pass: stage 3 matches its unit sequence against the recorded
  // one from the start (call before each micro-step and each evaluation batch).
  void begin_pass();
  // Stage 3: frees units still gathered (kept for reuse or prefetched) by passes that ended,
  // e.g. after evaluation, so the next step's traffic is its own.
  void drop_gathered();
  // DeepSpeed's is_gradient_accumulation_boundary: true for the last micro-batch of a step.
  void set_gradient_accumulation_boundary(bool last) { boundary_ = last; }
  // One optimizer step at learning rate lr: finish gradient communication, global grad norm
  // (assembled from shards; an fp16 overflow skips the step), clipping (DeepSpeed: coef = clip /
  // (norm + 1e-6) when norm > clip), the optimizer on the owned fp32 master weights, refresh of the
  // working parameters, zeroed gradients. Errors: an fp16 overflow at min_loss_scale (DeepSpeed
  // stops the run there too). A second parameter group's rate comes from the rule.
  absl::StatusOr<StepStats> step(float lr);
  int steps_taken() const { return t_; }
  // Waits for an update still running off the training thread (the offload pipeline's, the
  // delayed update's) and publishes its weights, so parameters and optimizer state are current
  // (before reading parameters, saving, at the end of a run); also publishes weights a step()
  // put in place that no fetch has published yet. No-op when neither is pending. Collective at
  // stages 1-2 (the all-gather of the new slices). Throws std::runtime_error with the update's
  // error (e.g. NVMe).
  void finish_update();
  // Multiply the loss's seed gradient by this (1 without loss scaling).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }

  // Measurement: milliseconds spent waiting for communication (gathers, reductions) since the
  // last reset; the most parameters (elements) gathered at once in stage 3, and now.
  double comm_wait_ms() const { return comm_wait_ms_ + gatherer_->comm_wait_ms(); }
  void reset_comm_wait() {
    comm_wait_ms_ = 0;
    gatherer_->reset_comm_wait();
  }
  int64_t peak_gathered_numel() const { return gatherer_->peak_gathered_numel(); }
  // Whether the working copy is node-shared (node_shared_params asked for and possible).
  bool node_shared() const { return shared_.has_value(); }
  // Whether the offload pipeline runs (EngineOptions::offload_pipeline, where it applies).
  bool pipelined() const;
  int64_t gathered_numel() const { return gatherer_->gathered_numel(); }
  // Shard size and padded size of unit u (elements).
  size_t shard_numel(int u) const;
  size_t padded_numel(int u) const;
  // The partition plan this engine allocated by (zero/partition.h), a row per unit.
  const std::vector<UnitPartition>& partition() const { return partition_; }
  // Where the master weights and moments live (device or offloaded), for reports: host bytes
  // and device<->host traffic.
  const OptimizerState& optimizer() const { return *optimizer_; }
  // Where stage-3 parameter shards live when offloaded (null: on the device).
  const ParamStore* param_store() const { return params_.get(); }
  // Offload, for reports: whether anything lives in host memory; its bytes by category
  // (optimizer state plus parameter store; NVMe bytes as kNvme), now or at their peaks; and
  // the bytes copied device -> host and host -> device since construction.
  bool offloaded() const { return optimizer_->host_tracker() || params_; }
  size_t host_bytes(MemCategory c, bool peak = false) const;
  int64_t bytes_to_host() const;
  int64_t bytes_to_device() const;
  OffloadTimes offload_times() const;

 private:
  struct UnitState;
  // Every unit's update on the pipeline's worker: delayed, from gradients handed over, put in
  // place by the next collect_update(); otherwise each waited for by publish(u). Either way
  // each unit is published by publish(u) when first needed.
  void start_update_pipeline(const OptimizerStep& as, bool delayed);
  // finish_update() but the publication: the delayed update's weights are put in place (their
  // copies queued, not joined) and published unit by unit by the next fetches.
  void collect_update();
  // Unit u and those before it: waits for a pipelined update and puts its weights in place,
  // then publishes them (the kernels queued from here see them: Backend::join_copy; stages 1-2
  // then all-gather the slice, every rank in the same unit order). No-op when none waits.
  void publish(int u);
  void publish_unit(UnitState& s);  // one unit of publish()
  // Whether the delayed update writes unit s's weights into a second working copy that its
  // publication swaps in (no staging, no copy): UpdatePipeline::swaps_working_copy, the rule the
  // estimator reads too, and not node-shared parameters.
  bool swaps_params(const UnitState& s) const;
  // Puts unit s's staged weights (UpdatePipeline::take) into its working copy (a copy queued
  // on the copy stream, not joined: s.copy_in) or parameter store, and gives the slot back to
  // the worker; false when none were staged.
  bool put_staged(UnitState& s);
  void gather_owned_slices(const std::vector<UnitState*>& units);  // stages 1-2, after updates
  void map_shared_params();  // EngineOptions::node_shared_params, at construction
  void shared_barrier();     // node-shared parameters: every rank's writes before any next read
  UnitState& unit(int u);
  void* owned_working(UnitState& s);  // the working copy of this rank's owned elements
  void gather_to_host(UnitState& s, const void* shard, std::span<float> host);
  void finish_step();  // zero gradients, keep the unit sequence, free gathers

  const ParamLayout& layout_;
  Backend* be_;
  // The ranks the states are sharded over: the world, or under MiCS this rank's group
  // (zeropp_.mics); rank_ and world_ are this rank's place in it and its size.
  Communicator* comm_;
  EngineOptions opt_;
  int rank_ = 0, world_ = 1;
  int dp_ = 1;                            // N_d: every rank, the gradient mean's denominator
  Communicator* world_comm_;              // every rank: replicated units' all-reduce
  std::vector<UnitPartition> partition_;  // the plan units_ were allocated by
  std::vector<UnitState> units_;
  std::unique_ptr<OptimizerState> optimizer_;
  std::unique_ptr<ParamStore> params_;
  std::optional<SharedMemory> shared_;  // node-shared working copies (node_shared_params)
  size_t shared_tracked_ = 0;           // its bytes, counted as kParams in the backend's tracker
  // The update off the training thread (pipeline, DPU): made at its first step.
  std::unique_ptr<UpdatePipeline> pipeline_;
  bool delayed_running_ = false;     // the running update is the delayed one
  int publish_next_ = 0;             // publish(): the units before it are published
  int64_t published_to_device_ = 0;  // weights the pipeline's staging published to the device
  OffloadClock pipeline_clock_;      // the training thread's copy-backs around it
  bool boundary_ = true;
  std::optional<LossScaler> scaler_;
  int t_ = 0;
  double comm_wait_ms_ = 0;  // waiting for reductions (the gatherer counts its own)
  // The training thread waited `ms` for communication: the breakdown's and the trace's.
  void note_comm_wait(double ms);
  ZeroppGroups zeropp_;  // ZeRO++'s and MiCS's groups; before the gatherer, which uses them
  std::unique_ptr<OptimizerRule> rule_;  // the optimizer: each step's scalars, a unit's update
  std::unique_ptr<Gradients> grads_;  // every unit's gradient, backward to update
  // Stage 3's gathers, prefetch and reuse; every unit's users. Last: destroyed first, so no
  // all-gather still writes when the buffers go.
  std::unique_ptr<ParamGatherer> gatherer_;
};

}  // namespace zt

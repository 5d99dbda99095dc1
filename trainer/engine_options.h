// The ds_config -> ZeRO engine mapping, in one place: the EngineOptions a validated DsConfig
// asks for, and where its optimizer state lives (device, or offload_optimizer's host memory).
#pragma once

#include <memory>
#include <string>

#include "model/backend.h"
#include "model/config.h"
#include "trainer/ds_config.h"
#include "zero/engine.h"
#include "zero/estimator.h"
#include "zero/optimizer_state.h"
#include "zero/param_store.h"
#include "zero/step_time.h"

namespace zt {

// Precision (bf16 / fp16 with DeepSpeed's loss scaler), optimizer.params, gradient_clipping and
// the zero_optimization keys the engine honours.
EngineOptions engine_options(const DsConfig& ds);
// Whether the offload pipeline's worker has units to update (docs/offload.md "The offload
// pipeline"): zerotrain.offload_pipeline, the optimizer state offloaded (stages 1-3), not Muon
// (its passes are collective). Engine::pipelined() applies the same rule to the engine it runs.
bool offload_pipeline_runs(const DsConfig& ds);
// Whether an optimizer update runs off the training thread (the offload pipeline, or the
// delayed parameter update with an offloaded state): the rank's cores are then split between
// the kernels and the update (trainer/device.h split_threads).
bool update_runs_off_the_training_thread(const DsConfig& ds);
// zero_optimization.offload_optimizer.device "cpu": host memory and CPU Adam with pin_memory
// and sub_group_size; "none": on the device behind `be`.
// "nvme": the same with the state in files under offload_optimizer.nvme_path (the "aio" keys).
// Errors: nvme_path missing or not writable, io_uring unavailable.
absl::StatusOr<std::unique_ptr<OptimizerState>> optimizer_state(const DsConfig& ds, Backend* be);
// zero_optimization.offload_param.device "cpu" / "nvme" (stage 3): where the parameter shards
// of `world` ranks of `model` live (offload/param_offload.h); null for "none". Errors, before
// anything is allocated: an nvme buffer_size below the largest shard that goes to the drive,
// buffer_count x buffer_size past this machine's memory (both only when some shard goes to
// the drive), nvme_path missing or not writable. read_ahead: the NVMe store reads the next
// shards ahead (TrainOptions::param_read_ahead).
absl::StatusOr<std::unique_ptr<ParamStore>> param_store(const DsConfig& ds,
                                                        const ModelConfig& model, int world,
                                                        Backend* be, bool read_ahead = true);
// Activation checkpointing: every how many blocks model/transformer.h keeps an input (0: off,
// when zerotrain.gradient_checkpointing is false): 1, or ceil(L / number_checkpoints).
// Errors: number_checkpoints above the model's layer count.
absl::StatusOr<int> checkpoint_every(const DsConfig& ds, const ModelConfig& model);
// The estimator's input for this run: `world` ranks, `ranks_per_node` of them a node (qgZ's
// buffers depend on it), at micro-batch B and sequence length T, on backend `be` (the dtypes its
// kernels keep activations in and read weights in; null: the CPU backend's, fp32 for both).
EstimateInput estimate_input(const DsConfig& ds, const ModelConfig& model, int world,
                             int ranks_per_node, int B, int T, const Backend* be = nullptr);
// Counts activations as a GPU keeps them: in the working dtype, weights read without an fp32
// view, the CUDA backend's logits rows (padded to 128) and (an upper bound: its chunk is a
// sixteenth of the device's memory) the whole micro-batch's rows at once.
void use_gpu_activations(EstimateInput& in);
// The step-time model's input (zero/step_time.h) for this run on `world` ranks at sequence T.
StepTimeInput step_time_input(const DsConfig& ds, const ModelConfig& model, int world, int T);
// What to try when the run does not fit `limit` device bytes, by the estimator: the first of
// optimizer offload to CPU, a higher stage, both, or a smaller micro-batch that fits, with its
// predicted bytes; or, if none fits, the smallest it found.
std::string fit_suggestion(const DsConfig& ds, const ModelConfig& model, int world,
                           int ranks_per_node, int B, int T, int64_t limit,
                           const Backend* be = nullptr);

}  // namespace zt

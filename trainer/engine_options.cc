#include "trainer/engine_options.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/memory.h"
#include "common/status.h"
#include "offload/cpu_optimizer.h"
#include "offload/param_offload.h"
#include "trainer/lr_schedule.h"
#include "zero/partition.h"

namespace zt {

EngineOptions engine_options(const DsConfig& ds) {
  EngineOptions eo;
  if (ds.bf16.enabled) eo.param_dtype = eo.grad_dtype = DType::kBF16;
  if (ds.fp16.enabled) {  // fp16 weights and gradients, DeepSpeed's loss scaler
    eo.param_dtype = eo.grad_dtype = DType::kF16;
    eo.loss_scaling = true;
    const Fp16Config& f = ds.fp16;
    eo.loss_scaler = {f.loss_scale,      (int)f.initial_scale_power, (int)f.loss_scale_window,
                      (int)f.hysteresis, f.consecutive_hysteresis,   (double)f.min_loss_scale};
  }
  eo.optimizer = ds.optimizer.params;
  if (ds.optimizer.kind() == OptimizerKind::kMuon) {
    // Its AdamW half from its own base rate, scheduled as DeepSpeed schedules each param group
    // (the rate rounded to fp32, as the step's own).
    eo.second_group_lr = [sched = ds.scheduler, base = ds.optimizer.adam_lr](int applied) {
      return (double)static_cast<float>(lr_at(sched, base, applied));
    };
  }
  eo.gradient_clipping = static_cast<float>(ds.gradient_clipping);
  const ZeroConfig& z = ds.zero;
  eo.zero.stage = z.stage;
  eo.zero.overlap_comm = z.overlap_comm;
  eo.zero.reduce_scatter = z.reduce_scatter;
  eo.zero.stage3_prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  eo.zero.stage3_param_persistence_threshold = z.stage3_param_persistence_threshold;
  eo.zero.stage3_max_live_parameters = z.stage3_max_live_parameters;
  eo.zero.stage3_max_reuse_distance = z.stage3_max_reuse_distance;
  eo.zero.zeropp = {z.zero_quantized_weights, (int)z.zero_hpz_partition_size,
                    z.zero_quantized_gradients, (int)z.mics_shard_size};
  if (ds.zerotrain.delayed_param_update)
    eo.delayed_update_after = (int)ds.zerotrain.delayed_param_update_warmup;
  eo.node_shared_params = ds.zerotrain.node_shared_params;
  eo.offload_pipeline = ds.zerotrain.offload_pipeline;
  eo.pin_host_gradients = ds.zero.offload_optimizer.pin_memory;
  eo.optimizer_threads = (int)std::max<int64_t>(1, ds.zerotrain.optimizer_threads);
  return eo;
}

bool offload_pipeline_runs(const DsConfig& ds) {
  return ds.zerotrain.offload_pipeline &&
         ds.zero.offload_optimizer.device != OffloadDevice::kNone && ds.zero.stage >= 1 &&
         !optimizer_info(ds.optimizer.kind()).whole_matrices;
}

bool update_runs_off_the_training_thread(const DsConfig& ds) {
  return offload_pipeline_runs(ds) || (ds.zero.offload_optimizer.device != OffloadDevice::kNone &&
                                       ds.zerotrain.delayed_param_update);
}

namespace {

// A swapper under `nvme_path` with the "aio" keys; errors name `key` (the config path).
absl::StatusOr<std::unique_ptr<NvmeSwapper>> open_swapper(const DsConfig& ds,
                                                          const std::string& nvme_path,
                                                          const char* key) {
  AioOptions aio{ds.aio.block_size, ds.aio.queue_depth, ds.aio.single_submit};
  auto swapper = NvmeSwapper::open(nvme_path, aio);
  if (!swapper.ok()) return prefixed(swapper.status(), key);
  return swapper;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OptimizerState>> optimizer_state(const DsConfig& ds, Backend* be) {
  const OffloadOptimizerConfig& o = ds.zero.offload_optimizer;
  const OptimizerKind kind = ds.optimizer.kind();
  const CpuOffloadOptions host{o.pin_memory, ds.zero.sub_group_size, o.pipeline_read,
                               o.pipeline_write, kind};
  switch (o.device) {
    case OffloadDevice::kNone: return make_device_optimizer_state(be, kind);
    case OffloadDevice::kCpu: return make_cpu_optimizer_state(be, host);
    case OffloadDevice::kNvme: {
      ZT_ASSIGN_OR_RETURN(
          auto swapper,
          open_swapper(ds, o.nvme_path, "zero_optimization.offload_optimizer.nvme_path"));
      return make_nvme_optimizer_state(be, host, std::move(swapper));
    }
  }
  return make_device_optimizer_state(be, kind);
}

absl::StatusOr<std::unique_ptr<ParamStore>> param_store(const DsConfig& ds,
                                                        const ModelConfig& model, int world,
                                                        Backend* be, bool read_ahead) {
  const OffloadParamConfig& o = ds.zero.offload_param;
  if (o.device == OffloadDevice::kNone) return nullptr;
  const bool pin = o.pin_memory;
  if (o.device == OffloadDevice::kCpu) return make_host_param_store(be, pin);
  const ParamOffloadOptions po{pin, o.buffer_count, o.buffer_size, o.max_in_cpu, read_ahead};
  // The largest shard the partition plan puts on the drive: the buffers are only needed when
  // there is one.
  const EstimateInput in = estimate_input(ds, model, world, world, 0, 0, nullptr);
  int64_t largest = 0;
  for (const UnitPartition& u : plan_partition(in.unit_numel, partition_options(in)))
    if (u.params == ParamHome::kDrive) largest = std::max(largest, u.shard);
  const size_t elem = dtype_size(engine_options(ds).param_dtype);
  if (largest > 0)
    ZT_RETURN_IF_ERROR(check_param_buffers(po, largest, elem, physical_memory_bytes()));
  ZT_ASSIGN_OR_RETURN(auto swapper,
                      open_swapper(ds, o.nvme_path, "zero_optimization.offload_param.nvme_path"));
  return make_nvme_param_store(be, po, std::move(swapper));
}

absl::StatusOr<int> checkpoint_every(const DsConfig& ds, const ModelConfig& model) {
  if (!ds.zerotrain.gradient_checkpointing) return 0;
  const int64_t n = ds.activation_checkpointing.number_checkpoints, L = model.n_layer;
  if (n > L)
    return absl::InvalidArgumentError(absl::StrCat(
        "activation_checkpointing.number_checkpoints ", n, " is more than the model's ", L,
        " layers (one checkpoint per block at most); set it to ", L, " or less, or null"));
  return n == 0 ? 1 : (int)((L + n - 1) / n);
}

EstimateInput estimate_input(const DsConfig& ds, const ModelConfig& model, int world,
                             int ranks_per_node, int B, int T, const Backend* be) {
  EstimateInput in;
  for (int64_t n : unit_numels(model)) in.unit_numel.push_back(n);
  in.stage = ds.zero.stage;
  const EngineOptions eo = engine_options(ds);
  const ZeroppOptions& zpp = eo.zero.zeropp;
  in.dp = sharding_group_size(zpp, world);         // MiCS: its group, not the world
  in.hpz_partition_size = zpp.hpz_partition_size;  // > 1 at stage 3 only
  in.quantized_weights = zpp.quantized_weights;
  // qgZ replaces the reduce-scatter only (with reduce_scatter false the engine all-reduces).
  in.quantized_gradients = zpp.quantized_gradients && eo.zero.reduce_scatter;
  in.ranks_per_node = ranks_per_node;
  in.param_dtype = eo.param_dtype;
  in.grad_dtype = eo.grad_dtype;
  in.optimizer = optimizer_kind(eo.optimizer);
  in.stage3_param_persistence_threshold = ds.zero.stage3_param_persistence_threshold;
  in.offload_optimizer = ds.zero.offload_optimizer.device;
  in.offload_param = ds.zero.offload_param.device;
  in.param_max_in_cpu = ds.zero.offload_param.max_in_cpu;
  in.param_buffer_count = ds.zero.offload_param.buffer_count;
  in.sub_group_size = ds.zero.sub_group_size;
  in.nvme_pipeline =
      ds.zero.offload_optimizer.pipeline_read || ds.zero.offload_optimizer.pipeline_write;
  in.overlap_comm = ds.zero.overlap_comm;
  // The stage-3 prefetcher runs with overlap_comm; a tied head fetches the embedding too.
  in.live_units = ds.zero.overlap_comm || model.tied_embeddings ? 2 : 1;
  in.delayed_update = ds.zerotrain.delayed_param_update;
  in.offload_pipeline = offload_pipeline_runs(ds);
  in.device_host_addressable = be && be->host_addressable();
  in.model = model;
  in.micro_batch = B;
  in.seq_len = T;
  in.checkpoint_every = checkpoint_every(ds, model).value_or(0);
  in.cpu_checkpointing = ds.activation_checkpointing.cpu_checkpointing;
  if (be) {
    in.activation_dtype = be->activation_dtype(in.param_dtype);
    in.logits_ld = be->logits_row_stride(model.vocab_size);
    in.classifier_chunk_bytes = (int64_t)be->classifier_chunk_bytes();
    in.weight_dtype = be->weight_dtype(in.param_dtype);
  }
  return in;
}

std::string fit_suggestion(const DsConfig& ds, const ModelConfig& model, int world,
                           int ranks_per_node, int B, int T, int64_t limit, const Backend* be) {
  struct Try {
    std::string what;
    EstimateInput in;
  };
  const EstimateInput base = estimate_input(ds, model, world, ranks_per_node, B, T, be);
  std::vector<Try> tries;
  // ckpt: 0 as configured, 1 activation checkpointing every block, 2 also cpu_checkpointing.
  auto add = [&](int stage, bool offload, int micro_batch, int ckpt = 0) {
    EstimateInput in = base;
    in.stage = stage;
    if (offload) in.offload_optimizer = OffloadDevice::kCpu;
    in.micro_batch = micro_batch;
    if (ckpt > 0 && in.checkpoint_every == 0) {  // what --gradient_checkpointing would give
      DsConfig on = ds;
      on.zerotrain.gradient_checkpointing = true;
      in.checkpoint_every = checkpoint_every(on, model).value_or(1);
    }
    if (ckpt > 1) in.cpu_checkpointing = true;
    std::string what = absl::StrCat("zero_optimization.stage ", stage);
    if (offload) absl::StrAppend(&what, " with offload_optimizer.device \"cpu\"");
    if (micro_batch != B)
      absl::StrAppend(&what, " at train_micro_batch_size_per_gpu ", micro_batch,
                      " (raise gradient_accumulation_steps to keep the global batch)");
    if (in.checkpoint_every != base.checkpoint_every ||
        in.cpu_checkpointing != base.cpu_checkpointing)
      absl::StrAppend(
          &what, " and --gradient_checkpointing",
          in.cpu_checkpointing ? " with activation_checkpointing.cpu_checkpointing" : "");
    auto same = [&](const EstimateInput& o) {
      return o.stage == stage && o.offload_optimizer == in.offload_optimizer &&
             o.micro_batch == micro_batch && o.checkpoint_every == in.checkpoint_every &&
             o.cpu_checkpointing == in.cpu_checkpointing;
    };
    if (same(base)) return;  // what is running now
    for (const Try& t : tries)
      if (same(t.in)) return;  // already a candidate
    tries.push_back({what, in});
  };
  const bool offloaded = base.offload_optimizer != OffloadDevice::kNone;
  if (!offloaded && base.stage >= 1) add(base.stage, true, B);
  for (int s = base.stage + 1; s <= 3; ++s) add(s, offloaded, B);
  for (int s = std::max(base.stage, 1); s <= 3; ++s) add(s, true, B);
  // Then activation checkpointing, at the configured stage and offload first.
  for (int ckpt : {1, 2}) {
    add(base.stage, offloaded, B, ckpt);
    for (int s = std::max(base.stage, 1); s <= 3; ++s) add(s, true, B, ckpt);
  }
  for (int b = B / 2; b >= 1; b /= 2) add(3, true, b);
  const Try* smallest = nullptr;
  int64_t smallest_bytes = 0;
  for (const Try& t : tries) {
    auto e = estimate_memory(t.in);
    if (!e.ok()) continue;
    if (e->device_total() <= limit)
      return absl::StrCat("The estimator (zerotrain estimate) predicts ",
                          format_bytes(e->device_total()), " on the device with ", t.what,
                          ": try that, or raise the limit");
    if (!smallest || e->device_total() < smallest_bytes)
      smallest = &t, smallest_bytes = e->device_total();
  }
  if (!smallest) return "Raise the limit or use a smaller model";
  return absl::StrCat("The estimator finds nothing that fits; the least is ",
                      format_bytes(smallest_bytes), " with ", smallest->what,
                      ": raise the limit, shorten --seq_len or use a smaller model");
}

}  // namespace zt

namespace zt {

void use_gpu_activations(EstimateInput& in) {
  in.activation_dtype = in.weight_dtype = in.param_dtype;
  if (in.model) in.logits_ld = gpu_logits_row_stride(in.model->vocab_size);
  in.classifier_chunk_bytes = std::numeric_limits<int64_t>::max();
}

StepTimeInput step_time_input(const DsConfig& ds, const ModelConfig& model, int world, int T) {
  const ZeroConfig& z = ds.zero;
  const int bytes = ds.bf16.enabled || ds.fp16.enabled ? 2 : 4;
  return {.model = model,
          .micro_batch = (int)ds.batch.train_micro_batch_size_per_gpu,
          .seq_len = T,
          .gradient_accumulation = (int)ds.batch.gradient_accumulation_steps,
          .stage = z.stage,
          .ranks = world,
          .zeropp = engine_options(ds).zero.zeropp,
          .offload_optimizer = z.offload_optimizer.device,
          .offload_param = z.offload_param.device,
          .checkpointing = ds.zerotrain.gradient_checkpointing,
          .overlap_comm = z.overlap_comm,
          .delayed_update = ds.zerotrain.delayed_param_update,
          .reduce_scatter = z.reduce_scatter,
          .param_bytes = bytes,
          .grad_bytes = bytes,
          .optimizer = ds.optimizer.kind(),
          .offload_pipeline = offload_pipeline_runs(ds),
          .optimizer_threads = (int)ds.zerotrain.optimizer_threads};
}

}  // namespace zt

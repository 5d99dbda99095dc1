// ds_config.json parsing: one parser per section over an ObjectReader (trainer/ds_reader.h)
// that records the keys it was asked for, so a section's known keys are exactly the ones its
// parser reads, and any other key is reported with the closest known one. The optimizer and
// scheduler sections are parsed in trainer/ds_optimizer.cc.
#include "trainer/ds_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "common/memory.h"
#include "common/status.h"
#include "model/backend.h"
#include "trainer/ds_reader.h"

namespace zt {
namespace {

using namespace ds;  // NOLINT: the reader and its helpers, in every section's parser

// ---------------------------------------------------------------------------------------
// Not implemented in this build: (path, predicate, message). Checked after the whole file
// parsed and validated. Lift a rule here when its feature lands.
struct NotImplementedRule {
  const char* path;                  // JSON path the message names
  bool (*applies)(const DsConfig&);  // true -> the config needs the missing feature
  const char* what;                  // what to change
};

constexpr NotImplementedRule kNotImplementedRules[] = {
    {"prescale_gradients", [](const DsConfig& c) { return c.prescale_gradients; },
     "prescale_gradients is known but not implemented in this build; set it to false"},
    {"gradient_predivide_factor",
     [](const DsConfig& c) { return c.gradient_predivide_factor != 1.0; },
     "gradient_predivide_factor is known but not implemented in this build; set it to 1.0"},
};
// ---------------------------------------------------------------------------------------

// ----- batch ----------------------------------------------------------------------------

// DeepSpeed's rule: tbs = micro × gas × W; any two give the third; only tbs -> gas 1;
// only micro -> gas 1; otherwise an error.
absl::Status resolve_batch(ObjectReader& top, const std::string& src, int64_t world,
                           BatchConfig* b) {
  // Bounds keep every product below int64 overflow and every derived count an int.
  constexpr int64_t kMaxBatch = 1 << 24;
  ZT_ASSIGN_OR_RETURN(auto tbs, top.get_opt_int({"train_batch_size"}, 1, int64_t{1} << 40));
  ZT_ASSIGN_OR_RETURN(auto micro,
                      top.get_opt_int({"train_micro_batch_size_per_gpu"}, 1, kMaxBatch));
  ZT_ASSIGN_OR_RETURN(auto gas, top.get_opt_int({"gradient_accumulation_steps"}, 1, kMaxBatch));
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": batch size: ", msg));
  };
  // `what`: the factors of `divisor` in words; `product`: more than one ("a x world size 4").
  auto not_divisible = [&](const char* derived, int64_t divisor, const std::string& what,
                           bool product = true) {
    return err(absl::StrCat("train_batch_size ", *tbs, " is not divisible by ", what,
                            product ? absl::StrCat(" = ", divisor) : "", ", so ", derived,
                            " cannot be derived; change "
                            "train_batch_size to a multiple of ",
                            divisor));
  };
  if (tbs && micro && gas) {
    int64_t product = *micro * *gas * world;
    if (product != *tbs) {
      return err(absl::StrCat("train_batch_size ", *tbs, " != train_micro_batch_size_per_gpu ",
                              *micro, " x gradient_accumulation_steps ", *gas, " x world size ",
                              world, " = ", product, "; change train_batch_size to ", product,
                              ", or give only two of the three keys and let the third be "
                              "derived"));
    }
  } else if (tbs && micro) {
    int64_t d = *micro * world;
    if (*tbs % d != 0) {
      return not_divisible(
          "gradient_accumulation_steps", d,
          absl::StrCat("train_micro_batch_size_per_gpu ", *micro, " x world size ", world));
    }
    gas = *tbs / d;
  } else if (tbs && gas) {
    int64_t d = *gas * world;
    if (*tbs % d != 0) {
      return not_divisible(
          "train_micro_batch_size_per_gpu", d,
          absl::StrCat("gradient_accumulation_steps ", *gas, " x world size ", world));
    }
    micro = *tbs / d;
  } else if (micro && gas) {
    tbs = *micro * *gas * world;
  } else if (tbs) {
    if (*tbs % world != 0) {
      return not_divisible("train_micro_batch_size_per_gpu", world,
                           absl::StrCat("world size ", world), /*product=*/false);
    }
    gas = 1;
    micro = *tbs / world;
  } else if (micro) {
    gas = 1;
    tbs = *micro * world;
  } else {
    return err(
        "give train_batch_size or train_micro_batch_size_per_gpu (or both, optionally "
        "with gradient_accumulation_steps); train_batch_size = "
        "train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size");
  }
  if (*micro > kMaxBatch || *gas > kMaxBatch)
    return err(absl::StrCat("train_batch_size ", *tbs, " gives train_micro_batch_size_per_gpu ",
                            *micro, " and gradient_accumulation_steps ", *gas,
                            "; each must be at "
                            "most ",
                            kMaxBatch, ", so give a smaller train_batch_size"));
  b->train_batch_size = *tbs;
  b->train_micro_batch_size_per_gpu = *micro;
  b->gradient_accumulation_steps = *gas;
  return absl::OkStatus();
}

// ----- precision ------------------------------------------------------------------------

absl::Status parse_fp16(const std::string& src, const json& v, Fp16Config* f) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "fp16"));
  ZT_RETURN_IF_ERROR(r.get_bool({"enabled"}, &f->enabled));
  ZT_RETURN_IF_ERROR(r.get_double({"loss_scale"}, &f->loss_scale, 0.0));
  ZT_RETURN_IF_ERROR(r.get_int({"initial_scale_power"}, &f->initial_scale_power, 0, 126));
  ZT_RETURN_IF_ERROR(r.get_int({"loss_scale_window"}, &f->loss_scale_window, 1));
  ZT_RETURN_IF_ERROR(r.get_int({"hysteresis"}, &f->hysteresis, 1));
  ZT_RETURN_IF_ERROR(r.get_bool({"consecutive_hysteresis"}, &f->consecutive_hysteresis));
  ZT_RETURN_IF_ERROR(r.get_int({"min_loss_scale"}, &f->min_loss_scale, 1));
  r.unsupported("auto_cast", false);
  r.unsupported("fp16_master_weights_and_grads", false);
  return r.finish();
}

absl::Status parse_bf16(const std::string& src, const json& v, const std::string& path,
                        Bf16Config* b) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, path));
  ZT_RETURN_IF_ERROR(r.get_bool({"enabled"}, &b->enabled));
  r.unsupported("immediate_grad_update", true);
  r.unsupported("check_grad_overflow", false);
  r.unsupported("bf16_master_weights_and_grads", false);
  r.unsupported("bf16_optimizer_states", false);
  return r.finish();
}

// ----- zero_optimization ----------------------------------------------------------------

absl::Status parse_device(ObjectReader& r, OffloadDevice* d) {
  std::string s = "none";
  ZT_RETURN_IF_ERROR(r.get_choice({"device"}, {"none", "cpu", "nvme"}, false, &s));
  *d = s == "none" ? OffloadDevice::kNone : s == "cpu" ? OffloadDevice::kCpu : OffloadDevice::kNvme;
  return absl::OkStatus();
}

absl::Status require_nvme_path(ObjectReader& r, OffloadDevice d, const std::string& path) {
  if (d == OffloadDevice::kNvme && path.empty()) {
    return r.error("nvme_path",
                   "required when device is \"nvme\"; give a directory on the NVMe drive");
  }
  return absl::OkStatus();
}

absl::Status parse_offload_param(const std::string& src, const json& v, OffloadParamConfig* o) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r,
                      ObjectReader::make(&src, v, "zero_optimization.offload_param"));
  ZT_RETURN_IF_ERROR(parse_device(r, &o->device));
  ZT_RETURN_IF_ERROR(r.get_string({"nvme_path"}, &o->nvme_path));
  ZT_RETURN_IF_ERROR(r.get_int({"buffer_count"}, &o->buffer_count, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"buffer_size"}, &o->buffer_size, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"max_in_cpu"}, &o->max_in_cpu, 0));
  ZT_RETURN_IF_ERROR(r.get_bool({"pin_memory"}, &o->pin_memory));
  ZT_RETURN_IF_ERROR(r.finish());
  return require_nvme_path(r, o->device, o->nvme_path);
}

absl::Status parse_offload_optimizer(const std::string& src, const json& v,
                                     OffloadOptimizerConfig* o) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r,
                      ObjectReader::make(&src, v, "zero_optimization.offload_optimizer"));
  ZT_RETURN_IF_ERROR(parse_device(r, &o->device));
  ZT_RETURN_IF_ERROR(r.get_string({"nvme_path"}, &o->nvme_path));
  ZT_RETURN_IF_ERROR(r.get_int({"buffer_count"}, &o->buffer_count, 0));
  ZT_RETURN_IF_ERROR(r.get_bool({"pin_memory"}, &o->pin_memory));
  ZT_RETURN_IF_ERROR(r.get_bool({"pipeline_read"}, &o->pipeline_read));
  ZT_RETURN_IF_ERROR(r.get_bool({"pipeline_write"}, &o->pipeline_write));
  ZT_RETURN_IF_ERROR(r.get_bool({"fast_init"}, &o->fast_init));
  r.unsupported("ratio", 1.0);
  r.unsupported("super_offload", false);
  r.unsupported("cpuadam_cores_perc", 0.8);
  ZT_RETURN_IF_ERROR(r.finish());
  return require_nvme_path(r, o->device, o->nvme_path);
}

absl::Status parse_zero(const std::string& src, const json& v, ZeroConfig* z) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "zero_optimization"));
  int64_t stage = 0;
  ZT_RETURN_IF_ERROR(r.get_int({"stage"}, &stage, 0, 3));
  z->stage = static_cast<int>(stage);
  ZT_RETURN_IF_ERROR(r.get_bool({"contiguous_gradients"}, &z->contiguous_gradients));
  ZT_ASSIGN_OR_RETURN(const json* overlap, r.raw({"overlap_comm"}));
  z->overlap_comm = z->stage == 3;  // DeepSpeed: None -> stage == 3
  if (overlap && !overlap->is_null())
    ZT_RETURN_IF_ERROR(r.get_bool({"overlap_comm"}, &z->overlap_comm));
  ZT_RETURN_IF_ERROR(r.get_bool({"reduce_scatter"}, &z->reduce_scatter));
  ZT_RETURN_IF_ERROR(r.get_int({"reduce_bucket_size"}, &z->reduce_bucket_size, 1));
  ZT_RETURN_IF_ERROR(r.get_bool({"allgather_partitions"}, &z->allgather_partitions));
  ZT_RETURN_IF_ERROR(r.get_int({"allgather_bucket_size"}, &z->allgather_bucket_size, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"sub_group_size"}, &z->sub_group_size, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
                               &z->stage3_prefetch_bucket_size, 0));
  ZT_RETURN_IF_ERROR(
      r.get_int({"stage3_param_persistence_threshold", "param_persistence_threshold"},
                &z->stage3_param_persistence_threshold, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"stage3_max_live_parameters", "max_live_parameters"},
                               &z->stage3_max_live_parameters, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"stage3_max_reuse_distance", "max_reuse_distance"},
                               &z->stage3_max_reuse_distance, 0));
  ZT_RETURN_IF_ERROR(
      r.get_bool({"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                  "stage3_gather_fp16_weights_on_model_save"},
                 &z->stage3_gather_16bit_weights_on_model_save));
  ZT_RETURN_IF_ERROR(r.get_bool({"round_robin_gradients"}, &z->round_robin_gradients));
  ZT_ASSIGN_OR_RETURN(const json* op, section(r, {"offload_param"}));
  if (op) ZT_RETURN_IF_ERROR(parse_offload_param(src, *op, &z->offload_param));
  ZT_ASSIGN_OR_RETURN(const json* oo, section(r, {"offload_optimizer"}));
  if (oo) ZT_RETURN_IF_ERROR(parse_offload_optimizer(src, *oo, &z->offload_optimizer));
  // DeepSpeed keys with no counterpart here: fine at their defaults, an error otherwise.
  r.unsupported("load_from_fp32_weights", true);
  r.unsupported("ignore_unused_parameters", true);
  r.unsupported("use_multi_rank_bucket_allreduce", true);
  r.unsupported("compute_grad_norm", true);
  r.unsupported("elastic_checkpoint", false);
  r.unsupported("legacy_stage1", false);
  r.unsupported("parameter_alignment", false);
  r.unsupported("memory_efficient_linear", true);
  ZT_RETURN_IF_ERROR(r.get_bool({"zero_quantized_weights"}, &z->zero_quantized_weights));
  ZT_RETURN_IF_ERROR(
      r.get_int({"zero_hpz_partition_size"}, &z->zero_hpz_partition_size, 1, 1 << 20));
  ZT_RETURN_IF_ERROR(r.get_bool({"zero_quantized_gradients"}, &z->zero_quantized_gradients));
  r.unsupported("zero_quantized_nontrainable_weights", false);
  r.unsupported("stage3_module_granularity_threshold", 0);
  r.unsupported("stage3_use_all_reduce_for_fetch_params", false);
  r.unsupported("stage3_allgather_sequential", false);
  r.unsupported("pipeline_loading_checkpoint", false);
  r.unsupported("override_module_apply", true);
  r.unsupported("log_trace_cache_warnings", false);
  r.unsupported("enable_sanity_checks", false);
  ZT_RETURN_IF_ERROR(r.get_int({"mics_shard_size"}, &z->mics_shard_size, -1, 1 << 20));
  if (z->mics_shard_size == 0 || (z->mics_shard_size > 0 && z->stage == 0))
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": zero_optimization.mics_shard_size: ", z->mics_shard_size,
        z->stage == 0 ? " needs stage 1-3 (it shards the states within groups of ranks)"
                      : " shards nothing; use -1 (off) or the ranks per group (>= 2)"));
  r.unsupported("mics_hierarchical_params_gather", false);
  r.unsupported("cpu_offload");  // deprecated DeepSpeed names: use offload_* instead
  r.unsupported("cpu_offload_param");
  r.unsupported("cpu_offload_use_pin_memory");
  r.unsupported("stage3_model_persistence_threshold");
  r.unsupported("zenflow");
  r.unsupported("leaf_module");
  ZT_RETURN_IF_ERROR(r.finish());
  // DeepSpeed reads the ZeRO++ keys in stage 3 only and ignores them elsewhere; we say so.
  if (z->stage != 3 && (z->zero_quantized_weights || z->zero_hpz_partition_size > 1 ||
                        z->zero_quantized_gradients)) {
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": zero_optimization: ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, "
             "zero_quantized_gradients) works on stage 3's gathers and reductions, but stage is ",
        z->stage, "; set \"stage\": 3 or remove the ZeRO++ keys"));
  }
  // DeepSpeed silently ignores offload at stages that cannot use it; we say so.
  if (z->offload_param.device != OffloadDevice::kNone && z->stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        src,
        ": zero_optimization.offload_param.device: parameter offload needs stage 3, but "
        "stage is ",
        z->stage, "; set stage to 3 or device to \"none\""));
  }
  if (z->offload_optimizer.device != OffloadDevice::kNone && z->stage == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        src,
        ": zero_optimization.offload_optimizer.device: optimizer offload needs stage 1, "
        "2 or 3, but stage is 0; raise stage or set device to \"none\""));
  }
  return absl::OkStatus();
}

absl::Status parse_aio(const std::string& src, const json& v, AioConfig* a) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "aio"));
  ZT_RETURN_IF_ERROR(r.get_int({"block_size"}, &a->block_size, 1));
  ZT_RETURN_IF_ERROR(r.get_int({"queue_depth"}, &a->queue_depth, 1));
  ZT_RETURN_IF_ERROR(
      r.get_int({"intra_op_parallelism", "thread_count"}, &a->intra_op_parallelism, 1));
  ZT_RETURN_IF_ERROR(r.get_bool({"single_submit"}, &a->single_submit));
  ZT_RETURN_IF_ERROR(r.get_bool({"overlap_events"}, &a->overlap_events));
  r.unsupported("use_gds", false);
  return r.finish();
}

absl::Status parse_activation_checkpointing(const std::string& src, const json& v, DsConfig* c) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "activation_checkpointing"));
  ActivationCheckpointingConfig& a = c->activation_checkpointing;
  a.given = true;
  ZT_ASSIGN_OR_RETURN(const json* n, r.raw({"number_checkpoints"}));
  if (n && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1)
      return r.error("number_checkpoints",
                     absl::StrCat("expected a whole number of checkpoints >= 1 (or null: every "
                                  "block), got ", show(*n)));
    a.number_checkpoints = n->get<int64_t>();
  }
  ZT_RETURN_IF_ERROR(r.get_bool({"partition_activations"}, &a.partition_activations));
  ZT_RETURN_IF_ERROR(r.get_bool({"cpu_checkpointing"}, &a.cpu_checkpointing));
  ZT_RETURN_IF_ERROR(
      r.get_bool({"contiguous_memory_optimization"}, &a.contiguous_memory_optimization));
  ZT_RETURN_IF_ERROR(
      r.get_bool({"synchronize_checkpoint_boundary"}, &a.synchronize_checkpoint_boundary));
  ZT_RETURN_IF_ERROR(r.get_bool({"profile"}, &a.profile));
  ZT_RETURN_IF_ERROR(r.finish());
  const char* prefix = "notice: activation_checkpointing.";
  if (a.partition_activations)
    c->notices.push_back(absl::StrCat(prefix, "partition_activations splits checkpoints across "
                                              "model-parallel ranks; zerotrain has none, so it "
                                              "has no effect"));
  if (a.contiguous_memory_optimization)
    c->notices.push_back(absl::StrCat(prefix, "contiguous_memory_optimization: zerotrain "
                                              "preallocates its checkpoints once anyway"));
  if (a.synchronize_checkpoint_boundary)
    c->notices.push_back(absl::StrCat(prefix, "synchronize_checkpoint_boundary has no effect "
                                              "in this build"));
  return absl::OkStatus();
}

// A memory cap: bytes (an integer >= 0) or a size with a unit ("8GiB"); absent or null: 0.
absl::Status parse_memory_limit(ObjectReader& r, const char* key, int64_t* out) {
  ZT_ASSIGN_OR_RETURN(const json* limit, r.raw({key}));
  if (!limit || limit->is_null()) return absl::OkStatus();
  if (limit->is_number_unsigned() || (limit->is_number_integer() && limit->get<int64_t>() >= 0)) {
    if (!limit->is_number_integer() || limit->get<uint64_t>() > uint64_t{9'000'000'000'000'000'000})
      return r.error(key, absl::StrCat(show(*limit), " bytes is more than the 9e18 bytes allowed"));
    *out = limit->get<int64_t>();
  } else if (limit->is_string()) {
    auto bytes = parse_byte_size(limit->get<std::string>());
    if (!bytes.ok()) return r.error(key, std::string(bytes.status().message()));
    *out = *bytes;
  } else {
    return r.error(key, absl::StrCat("expected bytes (an integer >= 0) or a size such as \"8GiB\", "
                                     "got ",
                                     show(*limit)));
  }
  return absl::OkStatus();
}

absl::Status parse_zerotrain(const std::string& src, const json& v, ZerotrainConfig* z) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "zerotrain"));
  ZT_RETURN_IF_ERROR(parse_memory_limit(r, "device_memory_limit", &z->device_memory_limit));
  ZT_RETURN_IF_ERROR(parse_memory_limit(r, "host_memory_limit", &z->host_memory_limit));
  ZT_RETURN_IF_ERROR(r.get_double({"collective_timeout"}, &z->collective_timeout, 0.0, true));
  ZT_RETURN_IF_ERROR(
      r.get_double({"collective_report_interval"}, &z->collective_report_interval, 0.0, true));
  ZT_ASSIGN_OR_RETURN(const json* dpu, section(r, {"delayed_param_update"}));
  if (dpu) {
    ZT_ASSIGN_OR_RETURN(ObjectReader d,
                        ObjectReader::make(&src, *dpu, "zerotrain.delayed_param_update"));
    ZT_RETURN_IF_ERROR(d.get_bool({"enabled"}, &z->delayed_param_update));
    ZT_RETURN_IF_ERROR(d.get_int({"warmup_steps"}, &z->delayed_param_update_warmup, 0));
    ZT_RETURN_IF_ERROR(d.finish());
  }
  ZT_RETURN_IF_ERROR(r.get_bool({"offload_pipeline"}, &z->offload_pipeline));
  ZT_RETURN_IF_ERROR(r.get_int({"optimizer_threads"}, &z->optimizer_threads, 0));
  ZT_ASSIGN_OR_RETURN(const json* trace, section(r, {"trace"}));
  if (trace) {
    ZT_ASSIGN_OR_RETURN(ObjectReader t, ObjectReader::make(&src, *trace, "zerotrain.trace"));
    ZT_RETURN_IF_ERROR(t.get_bool({"enabled"}, &z->trace.enabled));
    ZT_RETURN_IF_ERROR(t.get_string({"output_path"}, &z->trace.output_path));
    ZT_ASSIGN_OR_RETURN(const json* steps, t.raw({"steps"}));
    if (steps) {
      const bool ok = steps->is_array() && steps->size() == 2 && (*steps)[0].is_number_integer() &&
                      (*steps)[1].is_number_integer() && (*steps)[0].get<int64_t>() >= 1 &&
                      (*steps)[1].get<int64_t>() >= (*steps)[0].get<int64_t>();
      if (!ok)
        return t.error("steps", absl::StrCat("must be [first, last], whole steps with 1 <= first "
                                             "<= last, got ",
                                             show(*steps)));
      z->trace.first_step = (*steps)[0].get<int64_t>();
      z->trace.last_step = (*steps)[1].get<int64_t>();
    }
    ZT_RETURN_IF_ERROR(t.finish());
  }
  ZT_RETURN_IF_ERROR(r.get_string({"attention"}, &z->attention));
  if (!z->attention.empty())
    if (const auto a = parse_attention(z->attention); !a.ok())
      return r.error("attention", std::string(a.status().message()));
  ZT_RETURN_IF_ERROR(r.get_bool({"gradient_checkpointing"}, &z->gradient_checkpointing));
  ZT_RETURN_IF_ERROR(r.get_bool({"node_shared_params"}, &z->node_shared_params));
  ZT_RETURN_IF_ERROR(r.get_string({"save_dir"}, &z->save_dir));
  ZT_RETURN_IF_ERROR(r.get_int({"save_interval"}, &z->save_interval, 0));
  ZT_RETURN_IF_ERROR(r.get_int({"keep_last"}, &z->keep_last, 0));
  return r.finish();
}

// ----- reporting ------------------------------------------------------------------------

// The top level's reporting sections: flops_profiler, the monitors (csv_monitor, tensorboard;
// W&B and Comet refused when enabled) and comms_logger.
absl::Status parse_reporting(const std::string& src, ObjectReader& r, DsConfig* c) {
  ZT_ASSIGN_OR_RETURN(const json* fp, section(r, {"flops_profiler"}));
  if (fp) {
    ZT_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::make(&src, *fp, "flops_profiler"));
    FlopsProfilerConfig& f = c->flops_profiler;
    ZT_RETURN_IF_ERROR(p.get_bool({"enabled"}, &f.enabled));
    ZT_RETURN_IF_ERROR(p.get_int({"profile_step"}, &f.profile_step, 1));
    ZT_RETURN_IF_ERROR(p.get_string({"output_file"}, &f.output_file));
    int64_t ignored = 0;  // per module in DeepSpeed; the table here is per op
    bool detailed = true;
    ZT_RETURN_IF_ERROR(p.get_int({"module_depth"}, &ignored, -1));
    ZT_RETURN_IF_ERROR(p.get_int({"top_modules"}, &ignored, 1));
    ZT_RETURN_IF_ERROR(p.get_bool({"detailed"}, &detailed));
    ZT_RETURN_IF_ERROR(p.finish());
  }
  for (auto [name, m] :
       {std::pair{"csv_monitor", &c->csv_monitor}, std::pair{"tensorboard", &c->tensorboard}}) {
    ZT_ASSIGN_OR_RETURN(const json* v, section(r, {name}));
    if (!v) continue;
    ZT_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::make(&src, *v, name));
    ZT_RETURN_IF_ERROR(p.get_bool({"enabled"}, &m->enabled));
    ZT_RETURN_IF_ERROR(p.get_string({"output_path"}, &m->output_path));
    ZT_RETURN_IF_ERROR(p.get_string({"job_name"}, &m->job_name));
    ZT_RETURN_IF_ERROR(p.finish());
    if (m->enabled && m->job_name.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": ", name,
          ".job_name is empty: it names the directory the monitor writes in (DeepSpeed's "
          "default \"DeepSpeedJobName\")"));
  }
  ZT_ASSIGN_OR_RETURN(const json* comms, section(r, {"comms_logger"}));
  if (comms) {
    ZT_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::make(&src, *comms, "comms_logger"));
    CommsLoggerOptions& o = c->comms_logger_options;
    bool debug = false;
    ZT_RETURN_IF_ERROR(p.get_bool({"enabled"}, &c->comms_logger));
    ZT_RETURN_IF_ERROR(p.get_bool({"verbose"}, &o.verbose));
    ZT_RETURN_IF_ERROR(p.get_bool({"prof_all"}, &o.prof_all));
    ZT_RETURN_IF_ERROR(p.get_bool({"debug"}, &debug));
    ZT_ASSIGN_OR_RETURN(const json* ops, p.raw({"prof_ops"}));
    if (ops) {
      if (!ops->is_array())
        return p.error("prof_ops",
                       absl::StrCat("expected a list of operation names, got ", show(*ops)));
      for (const json& op : *ops) {
        if (!op.is_string())
          return p.error("prof_ops", absl::StrCat("expected operation names, got ", show(op)));
        o.prof_ops.insert(op.get<std::string>());
      }
    }
    ZT_RETURN_IF_ERROR(p.finish());
  }
  // W&B and Comet log to their services, which a trainer without Python cannot reach: a
  // disabled section (DeepSpeed's keys only) is accepted, an enabled one refused with the way
  // to the same curves.
  for (const auto& [name, keys] :
       {std::pair{"wandb", std::vector<const char*>{"group", "team", "project"}},
        std::pair{"comet", std::vector<const char*>{"samples_log_interval", "project", "workspace",
                                                    "api_key", "experiment_name", "experiment_key",
                                                    "online", "mode"}}}) {
    ZT_ASSIGN_OR_RETURN(const json* v, section(r, {name}));
    if (!v) continue;
    ZT_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::make(&src, *v, name));
    bool enabled = false;
    ZT_RETURN_IF_ERROR(p.get_bool({"enabled"}, &enabled));
    for (const char* k : keys) ZT_RETURN_IF_ERROR(p.raw({k}).status());
    ZT_RETURN_IF_ERROR(p.finish());
    if (enabled)
      return absl::UnimplementedError(absl::StrCat(
          src, ": ", name, ".enabled: ", name,
          " logs to its service, which zerotrain does not reach; use \"tensorboard\" or "
          "\"csv_monitor\" (W&B and Comet import both) and the run's metrics.jsonl, or set "
          "enabled to false"));
  }
  return absl::OkStatus();
}

// ----- top level ------------------------------------------------------------------------

absl::Status parse_top(const std::string& src, const json& root, int world, DsConfig* c) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, root, ""));
  ZT_RETURN_IF_ERROR(resolve_batch(r, src, world, &c->batch));
  ZT_ASSIGN_OR_RETURN(const json* opt, section(r, {"optimizer"}));
  if (opt) ZT_RETURN_IF_ERROR(parse_optimizer(src, *opt, &c->optimizer));
  ZT_ASSIGN_OR_RETURN(const json* sched, section(r, {"scheduler"}));
  if (sched) ZT_RETURN_IF_ERROR(parse_scheduler(src, *sched, &c->scheduler));
  ZT_RETURN_IF_ERROR(r.get_double({"gradient_clipping"}, &c->gradient_clipping, 0.0));
  ZT_ASSIGN_OR_RETURN(const json* fp16, section(r, {"fp16"}));
  if (fp16) ZT_RETURN_IF_ERROR(parse_fp16(src, *fp16, &c->fp16));
  ZT_ASSIGN_OR_RETURN(const json* bf16, r.raw({"bf16", "bfloat16"}));
  if (bf16 && !bf16->is_null()) {
    std::string name = root.contains("bf16") ? "bf16" : "bfloat16";
    ZT_RETURN_IF_ERROR(parse_bf16(src, *bf16, name, &c->bf16));
  }
  if (c->fp16.enabled && c->bf16.enabled) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": fp16.enabled and bf16.enabled: both are true; enable at most one"));
  }
  ZT_ASSIGN_OR_RETURN(const json* spp, r.raw({"steps_per_print"}));
  if (spp && spp->is_null()) {
    c->steps_per_print = 0;
  } else {
    ZT_RETURN_IF_ERROR(r.get_int({"steps_per_print"}, &c->steps_per_print, 1));
  }
  ZT_RETURN_IF_ERROR(r.get_bool({"wall_clock_breakdown"}, &c->wall_clock_breakdown));
  ZT_RETURN_IF_ERROR(r.get_bool({"prescale_gradients"}, &c->prescale_gradients));
  ZT_RETURN_IF_ERROR(r.get_double({"gradient_predivide_factor"}, &c->gradient_predivide_factor, 0.0,
                                  /*lo_open=*/true));
  ZT_ASSIGN_OR_RETURN(const json* zero, section(r, {"zero_optimization"}));
  if (zero) ZT_RETURN_IF_ERROR(parse_zero(src, *zero, &c->zero));
  ZT_ASSIGN_OR_RETURN(const json* aio, section(r, {"aio"}));
  if (aio) ZT_RETURN_IF_ERROR(parse_aio(src, *aio, &c->aio));
  ZT_ASSIGN_OR_RETURN(const json* zt, section(r, {"zerotrain"}));
  if (zt) ZT_RETURN_IF_ERROR(parse_zerotrain(src, *zt, &c->zerotrain));
  if (c->zerotrain.delayed_param_update &&
      c->zero.offload_optimizer.device == OffloadDevice::kNone)
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": zerotrain.delayed_param_update.enabled: the delayed parameter update overlaps "
             "the CPU optimizer step with the next forward and backward, so it needs "
             "zero_optimization.offload_optimizer.device \"cpu\" or \"nvme\"; set one, or "
             "set enabled to false"));
  if (c->zerotrain.node_shared_params && c->zero.mics_shard_size > 0)
    return absl::UnimplementedError(absl::StrCat(
        src, ": zerotrain.node_shared_params: not with zero_optimization.mics_shard_size in this "
             "build (MiCS's groups each own the whole model, so ranks of a node would write the "
             "same slices); drop one of the two"));
  if (c->zerotrain.delayed_param_update && optimizer_info(c->optimizer.kind()).whole_matrices)
    return absl::UnimplementedError(absl::StrCat(
        src,
        ": zerotrain.delayed_param_update.enabled: not with optimizer.type \"Muon\" in "
        "this build (its orthogonalisation gathers each matrix across ranks, which the "
        "background update cannot do); set enabled to false or pick another optimizer"));
  // DeepSpeed sections and keys this build does not implement: allowed only at defaults
  // where a default is given.
  ZT_ASSIGN_OR_RETURN(const json* ac, section(r, {"activation_checkpointing"}));
  if (ac) ZT_RETURN_IF_ERROR(parse_activation_checkpointing(src, *ac, c));
  ZT_RETURN_IF_ERROR(parse_reporting(src, r, c));
  for (const char* k :
       {"autotuning", "data_efficiency", "curriculum_learning", "compression_training",
        "elasticity", "amp", "sparse_attention", "pipeline", "checkpoint", "data_types",
        "communication_data_type", "seq_parallel_communication_data_type", "torch_autocast",
        "nebula", "hybrid_engine", "compile", "weight_quantization", "timers",
        "dataloader_drop_last"}) {
    r.unsupported(k);
  }
  r.unsupported("zero_allow_untested_optimizer", false);
  r.unsupported("zero_force_ds_cpu_optimizer", true);
  r.unsupported("memory_breakdown", false);
  r.unsupported("dump_state", false);
  r.unsupported("sparse_gradients", false);
  r.unsupported("disable_allgather", false);
  return r.finish();
}

}  // namespace

absl::StatusOr<DsConfig> parse_ds_config(std::string_view json_text, int world_size,
                                         std::string_view source_name) {
  std::string src(source_name);
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": world size ", world_size, " must be >= 1"));
  }
  // A key given twice is an error, as DeepSpeed's "Duplicate keys in DeepSpeed config".
  ZT_ASSIGN_OR_RETURN(const json root, parse_json(json_text, src));
  DsConfig c;
  try {
    ZT_RETURN_IF_ERROR(parse_top(src, root, world_size, &c));
  } catch (const json::exception& e) {  // defensive: readers check types before get<>()
    return absl::InvalidArgumentError(absl::StrCat(src, ": ", std::string(e.what())));
  }
  for (const NotImplementedRule& rule : kNotImplementedRules) {
    if (rule.applies(c)) {
      return absl::UnimplementedError(absl::StrCat(src, ": ", rule.path, ": ", rule.what));
    }
  }
  return c;
}

absl::StatusOr<DsConfig> load_ds_config(const std::string& path, int world_size) {
  ZT_ASSIGN_OR_RETURN(std::string text, read_file(path, "the DeepSpeed config (--deepspeed)"));
  return parse_ds_config(text, world_size, path);
}

}  // namespace zt

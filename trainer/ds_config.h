// DeepSpeed ds_config.json: parsed and validated as a whole into typed structs, one per
// section, defaults next to the fields as in DeepSpeed 0.19's pydantic models and
// constants (deepspeed/runtime/{config,constants,zero/config,zero/offload_config}.py).
//
// Unlike DeepSpeed, every key is checked: an unknown key anywhere is an error naming its JSON
// path and the closest valid key; DeepSpeed keys this build parses but does not implement are
// an error saying so (see the rule list kNotImplementedRules in ds_config.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/optimizer_params.h"
#include "nlohmann/json.hpp"
#include "zero/comm_logger.h"
#include "zero/deepspeed_defaults.h"
#include "zero/offload_device.h"

namespace zt {

// Batch sizes, resolved with DeepSpeed's rule (config.py _set_batch_related_parameters):
// train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world size.
// After parsing all three are set and consistent.
struct BatchConfig {
  int64_t train_batch_size = 0;                // samples per optimizer step, all ranks together
  int64_t train_micro_batch_size_per_gpu = 0;  // samples per forward/backward on one rank
  int64_t gradient_accumulation_steps = 0;     // micro-batches per optimizer step
};

// "optimizer": {"type": ..., "params": {...}}. DeepSpeed lower-cases the type name. Absent
// section -> specified = false and these defaults (AdamW), which the trainer may override
// from its flags. Each type reads its own params with DeepSpeed's defaults
// (model/optimizer_params.h); a key another type takes is an error. "Adam" and "AdamW" are
// both AdamWParams, resolved as DeepSpeed's engine does: type AdamW, or Adam with adam_w_mode
// true (the default), decouples weight decay; Adam with adam_w_mode false adds the L2 term
// weight_decay·θ to the gradient instead (AdamWParams::adam_w_mode holds the resolved mode).
// params.torch_adam is accepted and has no effect here; params.amsgrad true is refused.
struct OptimizerConfig {
  bool specified = false;  // the file had an "optimizer" section
  // params.lr: learning rate (before any scheduler); Adagrad 1e-2; Muon: its matrices'
  // (params.muon_lr, else lr, else 0.02).
  double lr = 1e-3;
  // Muon: its AdamW half's base rate (params.adam_lr, else lr, else 3e-4), scheduled as lr is.
  double adam_lr = -1;
  std::string ns_method = "gram";  // params.ns_method (Muon): "gram" or "standard", both fp32
  OptimizerParams params;          // the type's hyper-parameters; its index is the kind
  OptimizerKind kind() const { return optimizer_kind(params); }
};

// LR schedules this build implements (deepspeed/runtime/lr_schedules.py).
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
// Warm-up curve: log, factor ln(t+1)/ln(W); linear, factor t/W.
enum class WarmupType { kLog, kLinear };

// "scheduler": {"type": ..., "params": {...}}, DeepSpeed's parameter names and defaults.
// Which fields apply depends on the type; the others keep their defaults.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;  // absent section -> constant lr
  // WarmupLR / WarmupDecayLR: lr at the start of warm-up, >= 0. Default 0.
  double warmup_min_lr = 0.0;
  // WarmupLR / WarmupDecayLR: lr at the end of warm-up, >= 0. DeepSpeed 0.19 defaults:
  // WarmupLR -> the optimizer's lr (nullopt here); WarmupDecayLR -> 0.001.
  std::optional<double> warmup_max_lr;
  // All three: warm-up length in scheduler steps, a positive integer (default 1000);
  // DeepSpeed uses max(2, warmup_num_steps).
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;  // "log" (default) or "linear"
  // WarmupDecayLR / WarmupCosineLR: total scheduler steps, required, >= 1.
  int64_t total_num_steps = 0;
  // WarmupCosineLR: start ratio of the warm-up (× optimizer lr), in [0, 1]. Default 0.
  double warmup_min_ratio = 0.0;
  // WarmupCosineLR: final ratio of the cosine decay, in [0, 1]. Default 1e-4.
  double cos_min_ratio = 1e-4;
};

// "fp16": {...}: DeepSpeed's dynamic loss scaler settings (precision_config.py).
struct Fp16Config {
  bool enabled = false;     // fp16 mixed precision
  double loss_scale = 0.0;  // 0 = dynamic scaling, > 0 = static scale
  // Dynamic: the initial scale 2^initial_scale_power (>= 0); clean steps before doubling it
  // (>= 1); overflows tolerated before halving it (>= 1), refilled on every clean step with
  // consecutive_hysteresis; its lower bound (>= 1).
  int64_t initial_scale_power = ds_default::kInitialScalePower;
  int64_t loss_scale_window = ds_default::kLossScaleWindow;
  int64_t hysteresis = ds_default::kHysteresis;
  bool consecutive_hysteresis = false;
  int64_t min_loss_scale = ds_default::kMinLossScale;
};

// "bf16" (old name "bfloat16"): {"enabled": bool}.
struct Bf16Config {
  bool enabled = false;  // bf16 mixed precision (no loss scaling)
};

// zero_optimization.offload_param (stage 3 only; offload_config.py).
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;  // "none" | "cpu" | "nvme"
  std::string nvme_path;                        // directory for nvme; required when nvme
  int64_t buffer_count = ds_default::kParamBufferCount;  // parameter buffers in the swapper, >= 0
  int64_t buffer_size = ds_default::kParamBufferSize;    // elements per buffer (1e8), >= 0
  int64_t max_in_cpu = ds_default::kParamMaxInCpu;       // elements kept in CPU memory (1e9), >= 0
  bool pin_memory = true;                       // page-locked host buffers
};

// zero_optimization.offload_optimizer (stages 1-3; offload_config.py).
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;  // "none" | "cpu" | "nvme"
  std::string nvme_path;                        // directory for nvme; required when nvme
  int64_t buffer_count = 4;                     // optimizer-state buffers in the swapper, >= 0
  bool pin_memory = true;                       // page-locked host buffers
  bool pipeline_read = false;                   // nvme: read the next sub-group ahead
  bool pipeline_write = false;                  // nvme: write the previous sub-group behind
  bool fast_init = false;                       // nvme: skip writing initial state
};

// "zero_optimization": {...} (zero/config.py DeepSpeedZeroConfig). Sizes are element counts.
struct ZeroConfig {
  int stage = 0;                                // 0 (DDP) .. 3
  bool contiguous_gradients = true;             // copy grads into one contiguous buffer
  bool overlap_comm = false;                    // resolved: given value, else true iff stage == 3
  bool reduce_scatter = true;                   // reduce-scatter (vs all-reduce) for gradients
  int64_t reduce_bucket_size = 500'000'000;     // elements per reduce bucket (5e8), > 0
  bool allgather_partitions = true;             // all-gather (vs broadcasts) of updated partitions
  int64_t allgather_bucket_size = 500'000'000;  // elements per all-gather bucket (5e8), >= 0
  // Elements per optimizer sub-group (>= 0); stage 3's prefetch bucket, persistence threshold,
  // live parameters and reuse distance (>= 0; each also accepted without the "stage3_" prefix,
  // as pydantic aliases allow). Defaults: zero/deepspeed_defaults.h.
  int64_t sub_group_size = ds_default::kSubGroupSize;
  int64_t stage3_prefetch_bucket_size = ds_default::kStage3PrefetchBucketSize;
  int64_t stage3_param_persistence_threshold = ds_default::kStage3ParamPersistenceThreshold;
  int64_t stage3_max_live_parameters = ds_default::kStage3MaxLiveParameters;
  int64_t stage3_max_reuse_distance = ds_default::kStage3MaxReuseDistance;
  bool stage3_gather_16bit_weights_on_model_save = false;  // also the old "..._fp16_..." name
  bool round_robin_gradients = false;  // stage 1/2 with CPU offload: round-robin grad copies
  // ZeRO++ (stage 3; zero/zeropp.h): int8 weight all-gathers (qwZ), a secondary weight
  // partition within groups of this many ranks for the backward's gathers (hpZ; 1: off), int4
  // hierarchical all-to-all gradient reduction (qgZ).
  bool zero_quantized_weights = false;
  int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_gradients = false;
  // MiCS (stages 1-3; zero/zeropp.h): shard the model states within groups of this many ranks,
  // replicated across the groups (-1: off).
  int64_t mics_shard_size = -1;
  OffloadParamConfig offload_param;
  OffloadOptimizerConfig offload_optimizer;
};

// "aio": {...}: asynchronous I/O for NVMe offload (swap_tensor/constants.py).
struct AioConfig {
  int64_t block_size = 1'048'576;    // bytes per I/O request (1 MiB), > 0
  int64_t queue_depth = 8;           // requests in flight, > 0
  int64_t intra_op_parallelism = 1;  // I/O threads, > 0 (old name "thread_count")
  bool single_submit = false;        // submit requests one at a time
  bool overlap_events = true;        // overlap submission and completion
};

// "zerotrain": {...}: zerotrain's own keys, in the same file so DeepSpeed users keep one
// config (DeepSpeed does not read the block).
struct ZerotrainConfig {
  // Cap on the device pool in bytes, of either backend; 0: none. Given as bytes or a string
  // with a unit ("8GiB", "7.5GB"). An allocation past it stops the run with the bytes in use
  // per category and what the estimator says would fit.
  int64_t device_memory_limit = 0;
  // Cap on this rank's host memory for model states and offload buffers (the host categories
  // of memory_report: optimizer state, gradients, parameters, pinned staging, cpu_checkpointing's
  // checkpoints; not NVMe), as device_memory_limit; 0: none. Checked at set-up against what the
  // run will hold (the estimator's figures, where above what is held) and after each step
  // against the peaks, so a run stops at most one step after passing it.
  int64_t host_memory_limit = 0;
  // Seconds a rank waits in one collective for ranks that have not joined it before it ends
  // every rank (exit 2), and between its lines on stderr saying which collective it waits in
  // (zero/comm.h Communicator::set_wait_limits); both > 0. 600 s is PyTorch's default timeout
  // of an NCCL process group (DeepSpeed's default_pg_timeout is 30 minutes).
  double collective_timeout = 600;
  double collective_report_interval = 60;
  // "delayed_param_update": {"enabled": bool, "warmup_steps": int >= 0}: the ZeRO-Offload
  // paper's one-step delayed parameter update (zero/engine.h EngineOptions::
  // delayed_update_after) after warmup_steps ordinary steps (default 10). Needs
  // zero_optimization.offload_optimizer on cpu or nvme.
  bool delayed_param_update = false;
  int64_t delayed_param_update_warmup = 10;
  // The offload pipeline (zero/engine.h EngineOptions::offload_pipeline; docs/offload.md): on
  // wherever the optimizer is offloaded; false runs the serial update (comparisons, tests).
  bool offload_pipeline = true;
  // OpenMP threads of the offloaded optimizer's update off the training thread (also
  // --optimizer_threads); 0: chosen from the cores per rank (trainer/device.h split_threads),
  // and the trainer writes the chosen number here.
  int64_t optimizer_threads = 0;
  // "trace": {"enabled": bool, "steps": [first, last], "output_path": dir} (also --trace_steps):
  // a Chrome trace of those steps, trace_rank<r>.json per rank in output_path (default: the
  // run directory), and each traced step's exposed communication, copy and optimizer time in
  // the log and metrics.jsonl (common/trace.h). Default steps [2, 3]: after the first step's
  // allocations.
  struct Trace {
    bool enabled = false;
    int64_t first_step = 2, last_step = 3;
    std::string output_path;
  } trace;
  // Stages 1-2 on the CPU backend with every rank on one node: one working copy of the
  // parameters per node, in shared memory, and a barrier instead of the all-gather after each
  // step (zero/engine.h EngineOptions::node_shared_params; elsewhere a warning, no effect).
  bool node_shared_params = false;
  // The GPU's attention (also --attention): "auto", "flash" or "cudnn" (trainer/device.h
  // parse_attention); empty when not given (auto).
  std::string attention;
  // Activation checkpointing (also --gradient_checkpointing), as activation_checkpointing says.
  bool gradient_checkpointing = false;
  // Checkpoints (trainer/checkpoint.h; also --save_dir, --save_interval, --keep_last): where,
  // every how many steps (0: at the end only), and how many to keep (0: all).
  std::string save_dir;
  int64_t save_interval = 0;
  int64_t keep_last = 0;
};

// "activation_checkpointing": {...} (DeepSpeed's section; the model decides where to
// checkpoint, so zerotrain turns checkpointing on with --gradient_checkpointing or
// zerotrain.gradient_checkpointing, and reads this section for how).
struct ActivationCheckpointingConfig {
  bool given = false;  // the section is in the file
  // Checkpoints kept in the forward: the input of every ceil(L / n)-th block. 0 (JSON null,
  // DeepSpeed's default): every block's input. Must not exceed the layer count (checked
  // against the model at start).
  int64_t number_checkpoints = 0;
  bool partition_activations = false;           // model parallelism only: no effect here
  bool cpu_checkpointing = false;               // checkpoints in host memory
  bool contiguous_memory_optimization = false;  // checkpoints are always preallocated here
  bool synchronize_checkpoint_boundary = false;  // a CUDA sync: no effect on the CPU backend
  bool profile = false;  // wall_clock_breakdown adds the backward's recompute time
};

// "flops_profiler" (DeepSpeed's keys and defaults): at step profile_step the trainer times every
// backend op and counts its FLOPs (model/profiling_backend.h), and prints one table per op and
// shape, slowest first, with the share of the step no op accounts for. DeepSpeed profiles by
// module; module_depth, top_modules and detailed are accepted and change nothing here.
struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;  // >= 1: the global step profiled (none when a resume starts past it)
  std::string output_file;   // the table goes here too (empty: stdout only)
};

// "csv_monitor" and "tensorboard": {...} (DeepSpeed's monitor/config.py CSVConfig and
// TensorBoardConfig, the same keys): rank 0 writes the run's scalars into output_path/job_name,
// one CSV per tag or one TensorBoard event file (trainer/metrics.h make_csv_sink,
// make_tensorboard_sink).
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;                    // "" : job_name relative to the working directory
  std::string job_name = "DeepSpeedJobName";  // the directory inside output_path
  std::string dir() const { return output_path.empty() ? job_name : output_path + "/" + job_name; }
};

// The whole ds_config.json.
struct DsConfig {
  BatchConfig batch;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  // Clip the global gradient L2 norm to this value; 0 disables. DeepSpeed 0.19 default 1.0
  // (0.0 in releases before 0.15). Must be >= 0.
  double gradient_clipping = 1.0;
  Fp16Config fp16;
  Bf16Config bf16;
  // Print progress every this many optimizer steps; 0 never (JSON null). Our default 10;
  // DeepSpeed 0.19's default is None (never).
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;       // time forward/backward/step separately
  bool prescale_gradients = false;         // divide grads before the all-reduce
  double gradient_predivide_factor = 1.0;  // pre-divide factor for the all-reduce, > 0
  ZeroConfig zero;
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;
  FlopsProfilerConfig flops_profiler;
  MonitorConfig csv_monitor;
  MonitorConfig tensorboard;
  // "comms_logger": {"enabled", "verbose", "prof_all", "prof_ops", "debug"} (DeepSpeed's
  // CommsConfig; zero/comm_logger.h). debug is accepted without effect.
  bool comms_logger = false;
  CommsLoggerOptions comms_logger_options;
  ZerotrainConfig zerotrain;
  // One line each for keys accepted without effect in this build (printed once at start).
  std::vector<std::string> notices;
};

// Parses `json_text` (a whole ds_config.json) for `world_size` ranks (>= 1), validates every
// key and value, resolves the batch triple and the dynamic defaults, and applies this build's
// not-implemented rules. `source_name` (a path or "<string>") starts every error message.
// Errors: InvalidArgument for bad JSON, keys, types or values; Unimplemented for DeepSpeed
// features this build does not have.
absl::StatusOr<DsConfig> parse_ds_config(std::string_view json_text, int world_size,
                                         std::string_view source_name);

// Reads the file at `path` and parses it as parse_ds_config does. Missing or unreadable
// file -> NotFound / InvalidArgument naming the path.
absl::StatusOr<DsConfig> load_ds_config(const std::string& path, int world_size);

// The ds_config's resolved values that change the numbers (defaults applied, under DeepSpeed's
// key paths), so a config that writes a default out, or "Adam" for "AdamW" with adam_w_mode's
// default, is the same run. Not zero_optimization, the batch split, offload, zerotrain or the
// reporting keys, which a resume may change.
nlohmann::json numeric_ds_config(const DsConfig& ds);

}  // namespace zt

// Memory estimator (docs/architecture.md "Floors": zero/ holds the memory/communication estimator).
// Three things, all analytic:
//  1. estimate_memory(): per-rank bytes by memory category (common/memory.h), with the same
//     accounting the ZeRO engine uses when it allocates (per-unit flat buffers padded to a
//     multiple of N_d, K = 12 or 8 optimizer bytes per parameter, stage decides what is sharded).
//  2. zero_paper_table(): Table 1 and the Figure 1 example of the ZeRO paper (Rajbhandari et
//     al., SC20), printed the way the paper prints its cells.
//  3. deepspeed_zero{2,3}_estimates(): DeepSpeed 0.19's estimate_zero{2,3}_model_states_mem_needs
//     formulas, byte for byte, so users can compare with numbers they know.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/memory.h"
#include "model/config.h"
#include "model/optimizer_math.h"
#include "zero/deepspeed_defaults.h"
#include "zero/offload_device.h"
#include "zero/partition.h"

namespace zt {

struct EstimateInput {
  // Ψ. When unit_numel is given, Ψ is its sum and this field is ignored.
  int64_t psi = 0;
  // Parameters of each unit (embedding, blocks, head; ParamLayout order), so per-unit padding
  // to a multiple of N_d is predicted exactly. Empty: one unit of psi elements.
  std::vector<int64_t> unit_numel;
  int stage = 0;  // ZeRO stage 0-3
  int dp = 1;     // N_d, data-parallel degree
  // ZeRO++'s hpZ (zero/zeropp.h): each sharded unit's secondary partition, padded / this many
  // elements a rank, held from its forward to the step's end (1: off).
  int hpz_partition_size = 1;
  // ZeRO++'s qwZ and qgZ: their int8 / int4 collective buffers (kCommBuffers), qgZ's for
  // ranks_per_node ranks a node (L; 0: every rank on one node).
  bool quantized_weights = false;
  bool quantized_gradients = false;
  int ranks_per_node = 0;
  // Stage 3: units with fewer parameters stay whole on every rank, as the engine keeps them
  // (DeepSpeed's stage3_param_persistence_threshold). 0: every unit is sharded.
  int64_t stage3_param_persistence_threshold = 0;
  DType param_dtype = DType::kBF16;  // working parameters
  DType grad_dtype = DType::kBF16;   // stored gradients
  // The optimizer holds an fp32 master copy when params are not fp32 (K = 12: master, m, v).
  // With fp32 params the params are the master (K = 8: m, v). false: K = 8 always.
  bool fp32_master = true;
  // The optimizer: K = optimizer_bytes_per_param (12 / 8 with two states, 8 / 4 with one).
  OptimizerKind optimizer{};  // the first kind: two states
  OffloadDevice offload_optimizer = OffloadDevice::kNone;
  OffloadDevice offload_param = OffloadDevice::kNone;  // stage 3 only
  // offload_param nvme: shards kept in host memory (elements, in unit order), and the host
  // buffers the others are read through (offload/param_offload.h).
  int64_t param_max_in_cpu = ds_default::kParamMaxInCpu;
  int64_t param_buffer_count = ds_default::kParamBufferCount;
  // zero_optimization.sub_group_size: elements the CPU optimizer takes at once (sizes its staging).
  int64_t sub_group_size = ds_default::kSubGroupSize;
  // offload_optimizer nvme with pipeline_read or pipeline_write: two host windows, not one.
  bool nvme_pipeline = false;
  // zerotrain.delayed_param_update: a second host buffer of the owned gradient (kGrads: G bytes
  // per owned element; the gradients the device keeps, 4 at stage 1 with N_d > 1 for the
  // reduced fp32 shard, land in host memory first: two buffers, zero/gradients.h) and
  // a second owned working copy (kParams: P bytes; on the device where the host can address it
  // and the owned slice is the whole unit, else host staging).
  bool delayed_update = false;
  // zerotrain.offload_pipeline: every unit is updated off the training thread, its new weights
  // staged in host memory (kParams: P bytes per element of the two largest units that share a
  // staging slot, UpdatePipeline::kStagingSlots) unless they go straight into a working copy
  // the host can address (device_host_addressable: the CPU backend) on the device; a gradient
  // the device keeps (stage 1, units kept whole) lands in a host buffer (Gradients'
  // land_on_host). The delayed update's staging covers it when both are on.
  bool offload_pipeline = false;
  bool device_host_addressable = false;
  // zero_optimization.overlap_comm: one gradient reduction stays in flight behind the next
  // unit's backward, so two sets of communication buffers can be live.
  bool overlap_comm = false;
  // Stage 3: units gathered at once (the one in use, and one prefetched with overlap_comm);
  // sizes the workspace estimate. Units kept gathered for reuse (stage3_max_reuse_distance)
  // are not modelled: set it to 0 for the estimate to hold.
  int live_units = 2;
  // Activations: the engine's Transformer at micro-batch B, sequence T (all three optional;
  // no model -> activations 0), with activation checkpointing every checkpoint_every blocks
  // (0: none).
  std::optional<ModelConfig> model;
  int micro_batch = 0;
  int seq_len = 0;
  int checkpoint_every = 0;
  bool cpu_checkpointing = false;  // activation_checkpointing.cpu_checkpointing
  // The dtype the activations are kept in (Backend::activation_dtype): fp32 on the CPU
  // backend, the working dtype on a GPU.
  DType activation_dtype = DType::kF32;
  // How the backend keeps the classifier's logits (Backend::logits_row_stride,
  // classifier_chunk_bytes); 0: the CPU's (V, 32 MiB).
  int logits_ld = 0;
  int64_t classifier_chunk_bytes = 0;
  // The dtype fetch() gives weights in (Backend::weight_dtype): fp32 on the CPU backend, which
  // then reads the decoding step's head (and the tied embedding) through an fp32 copy made at
  // fetch (workspace; training widens a block of rows per thread, less); the working dtype on
  // a GPU, which makes none.
  DType weight_dtype = DType::kF32;
};

// Bytes per memory category on the device (GPU, or the CPU backend's device pool) and on the
// host (pinned host buffers; host[kNvme] counts bytes on NVMe). One rank.
struct MemoryEstimate {
  std::array<int64_t, kNumMemCategories> device{};
  std::array<int64_t, kNumMemCategories> host{};
  int64_t& dev(MemCategory c) { return device[static_cast<size_t>(c)]; }
  int64_t& hst(MemCategory c) { return host[static_cast<size_t>(c)]; }
  int64_t dev(MemCategory c) const { return device[static_cast<size_t>(c)]; }
  int64_t hst(MemCategory c) const { return host[static_cast<size_t>(c)]; }
  // Device model states: params + grads + optimizer.
  int64_t device_model_states() const;
  int64_t device_total() const;  // every device category
  int64_t host_total() const;    // every host category except nvme
  int64_t nvme() const { return hst(MemCategory::kNvme); }
  int64_t psi = 0;         // Ψ (unpadded)
  int64_t padded_psi = 0;  // Σ over units of N_d * ceil(numel / N_d)
  int optimizer_k = 12;    // K, optimizer bytes per parameter
};

// Per-rank bytes by category. Model states, per unit u with shard s_u = ceil(numel_u / N_d) and
// padded p_u = N_d s_u (stage 0: p_u = s_u = numel_u, nothing is sharded):
//   stage | params          | grads           | optimizer
//   0     | numel_u * P     | numel_u * G     | numel_u * K
//   1     | p_u * P         | p_u * G         | s_u * K
//   2     | p_u * P         | s_u * G         | s_u * K
//   3     | s_u * P         | s_u * G         | s_u * K
// P = dtype_size(param_dtype), G = dtype_size(grad_dtype), K = optimizer_bytes_per_param: 12
// (fp32 master + two states) or 8, with one state 8 (master + state) or 4.
// With bf16 P, G and K = 12 this is the paper's (2+2+K)Ψ, 4Ψ + KΨ/N_d, 2Ψ + (2+K)Ψ/N_d,
// (2+2+K)Ψ/N_d (up to padding).
// Offload (offload/cpu_optimizer.h): offload_optimizer cpu moves the optimizer state (K with a
// master: the host keeps its own fp32 master even when params are fp32) to host memory (kOptimizer
// on the host) plus two staging buffers of min(sub_group_size, largest owned unit) fp32 elements
// (kPinnedHost); at stages 2-3 the sharded units' gradients move to the host as well (kGrads,
// s_u * G, ZeRO-Offload's 2Ψ/N_d partition). nvme puts the optimizer state on NVMe (K bytes
// per element, in whole sub-groups of a multiple of 1024 elements: nvme_state_bytes in
// zero/optimizer_state.h) and adds a host window of master and states for one sub-group (two
// with nvme_pipeline).
// offload_param (stage 3) moves the sharded units' parameter shards (s_u * P) to host memory
// (cpu: kParams on the host) or NVMe (each shard rounded up to 4 KiB, kNvme), except the first
// shards adding up to at most param_max_in_cpu elements, which stay in host memory, plus
// param_buffer_count host buffers of the largest NVMe shard (kPinnedHost). Either offload
// shards every unit even at N_d = 1 (a single rank then also reduces into a shard).
// Only units above stage3_param_persistence_threshold are sharded; the others stay
// whole on the device with their gradients.
// Workspace (an estimate of the transient peak, not a model state): live_units x the largest
// unit gathered in param_dtype (stage 3), plus the fp32 view of the one in use when params are
// not fp32, plus
// an fp32 gradient accumulator of the largest unit when grads are not fp32 or the stage is
// 2-3; at stages 1-2 with N_d > 1 at least the fp32 copy of the largest unit that loading
// parameters goes through; with a whole-matrix optimizer, at least its step's u, update,
// gathered u and Newton-Schulz matrices (fp32; needs model). Only with unit_numel (a bare Ψ has
// no unit structure: workspace 0).
// Communication buffers (N_d > 1): the fp32 gradient being reduced (stages 0-1: the whole unit,
// sent from a copy) and the fp32 shard it reduces to (stages 1-3), for the largest unit, twice
// with overlap_comm; stage 1 also keeps every unit's reduced fp32 shard until the step (4 bytes
// per owned element).
// Activations: transformer_activation_bytes(*model, micro_batch, seq_len).
// Every size is counted in saturating int64 (common/checked.h).
// Errors: stage not in 0-3, dp < 1, psi <= 0, a unit over 2^53 parameters, offload_param without
// stage 3; a category or total past int64 bytes (8 EiB, no machine holds it: InvalidArgument
// naming it and what to reduce, never a wrapped negative size).
absl::StatusOr<MemoryEstimate> estimate_memory(const EstimateInput& in);

// The partition plan's options for `in` (zero/partition.h): what the estimator counts by and the
// trainer sizes the parameter store by, the same plan the engine allocates by.
PartitionOptions partition_options(const EstimateInput& in);

// Bytes the Transformer (model/transformer.cc) allocates as MemCategory::kActivations for
// micro-batches up to (B, T), N = B T, C hidden, L layers. Tensors are in the activation dtype
// `activations` (2 or 4 bytes), except the statistics (mean/rstd, lse), the logits chunk and the
// losses (fp32) and tokens/targets (int32):
//   tokens, targets (N) int32
//   x[0..L] (N,C): residual stream into each block and out of the last
//   per layer: ln1 (N,C), ln1 mean/rstd (N) x2, qkv (N,qkv_dim), lse (B,NH,T), atty (N,C),
//              resid_mid (N,C), ln2 (N,C), ln2 mean/rstd (N) x2, fc (N, I or 2I for SwiGLU),
//              act (N,I)
//   lnf (N,C), lnf mean/rstd (N) x2, logits chunk (chunk, ld) in the activation dtype with
//   ld = logits_ld (0: V) and chunk = logits_chunk_rows(ld, classifier_chunk_bytes (0: the
//   CPU's 32 MiB), activations, N), losses (N), dlnf (N,C)
//   backward scratch: dx, dresid, dln, datty (N,C) x4, dqkv (N,qkv_dim), dact (N,I), dfc (N,fcw)
// kSizeOverflow (common/checked.h) when the bytes pass int64 (N = B T up to 2^62 tokens).
// With activation checkpointing every k blocks (k >= 1): the per-layer set exists k times,
// not L, and x[] holds ceil(L/k) + k buffers instead of L + 1 (the checkpointed block inputs,
// a segment's k - 1 inner inputs, the head's input); with cpu_checkpointing the checkpoints
// move to host memory (transformer_host_activation_bytes) and two device buffers take turns
// holding the one in use: min(2, ceil(L/k)) + k.
int64_t transformer_activation_bytes(const ModelConfig& c, int B, int T, int checkpoint_every = 0,
                                     bool cpu_checkpointing = false,
                                     DType activations = DType::kF32, int logits_ld = 0,
                                     int64_t classifier_chunk_bytes = 0);
// Host bytes of cpu_checkpointing's checkpoints: ceil(L/k) x (B T, C) in the activation dtype
// (0 without; kSizeOverflow past int64).
int64_t transformer_host_activation_bytes(const ModelConfig& c, int B, int T, int checkpoint_every,
                                          bool cpu_checkpointing, DType activations = DType::kF32);

// The parameter counts of c's units in ParamLayout order.
std::vector<int64_t> unit_numels(const ModelConfig& c);

// ---- ZeRO paper (SC20) ----

// Model-state bytes per device, K = 12, bf16/fp16 params and grads:
// stage 1 (P_os) 4Ψ + KΨ/N_d, stage 2 (P_os+g) 2Ψ + (2+K)Ψ/N_d, stage 3 (P_os+g+p) (2+2+K)Ψ/N_d,
// stage 0 (baseline) (2+2+K)Ψ. Real-valued (no padding), as the paper computes.
double zero_paper_bytes(double psi, double n_d, int stage);
// A GB (1e9 bytes) value as the paper prints it: values >= 100 are truncated to an integer
// (4187.5 -> "4187", 257.75 -> "257"); smaller values are rounded half-up to 3 significant
// digits but at most 2 decimals (41.25 -> "41.3", 1.875 -> "1.88", 0.46875 -> "0.47"),
// without trailing zeros ("30", "7.5").
std::string format_paper_gb(double gb);
// Table 1 (Ψ = 7.5B, 128B, 1T; N_d = 1, 4, 16, 64, 256, 1024; os / os+g / os+g+p) followed by
// the Figure 1 example (Ψ = 7.5B, N_d = 64: baseline, P_os, P_os+g, P_os+g+p).
std::string zero_paper_table();
// The Figure 1 figures: baseline, P_os, P_os+g, P_os+g+p for Ψ = 7.5B, N_d = 64, printed as the
// figure does (one decimal: 120, 31.4, 16.6, 1.9).
std::array<std::string, 4> zero_paper_figure1();

// ---- DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, 0.19) ----

struct DeepSpeedRow {
  int64_t cpu_bytes = 0;  // per CPU (node)
  int64_t gpu_bytes = 0;  // per GPU
  std::string options;    // e.g. "offload_param=cpu , offload_optimizer=none, zero_init=1"
};
struct DeepSpeedSetup {
  int64_t total_params = 0;          // P
  int64_t largest_layer_params = 0;  // L (ZeRO-3 only)
  int gpus_per_node = 1;             // G
  int nodes = 1;                     // n
  double additional_buffer_factor = 1.5;
};
// A byte count past int64 (Python's ints have no bound) is kSizeOverflow (common/checked.h).
// ZeRO-2, rows in DeepSpeed's order: offload_optimizer=cpu, none.
//   cpu:  GPU 2P, CPU int(P * max(4 G n, 16) * f)
//   none: GPU 2P + int(18 P / (G n)), CPU int(4 P G f)
std::vector<DeepSpeedRow> deepspeed_zero2_estimates(const DeepSpeedSetup& s);
// ZeRO-3, rows in DeepSpeed's order: (param cpu, opt cpu, zero_init 1/0), (param none, opt cpu,
// 1/0), (none, none, 1/0). L_mem = 4L:
//   params+opt on CPU:  GPU L_mem;                CPU 18 P f / n  or P max(4G, 18/n) f
//   opt on CPU:         GPU L_mem + int(2P/(Gn)); CPU 16 P f / n  or P max(4G, 16/n) f
//   none:               GPU L_mem + int(18P/(Gn)); CPU 4 L G f    or 4 P G f
std::vector<DeepSpeedRow> deepspeed_zero3_estimates(const DeepSpeedSetup& s);
// DeepSpeed's printout of estimate_zero{2,3}_model_states_mem_needs_all_cold (GiB = 2^30,
// "{cpu:7.2f}GB | {gpu:6.2f}GB | options").
std::string deepspeed_report(int stage, const DeepSpeedSetup& s);
// DeepSpeed's "largest layer" for a model: the most parameters held directly by one
// nn.Module (model_to_params in stage3.py) of the Hugging Face model for c: the embedding
// (V x C) or lm_head for every preset; for tiny vocabularies a Conv1D/Linear with its bias.
int64_t deepspeed_largest_layer_params(const ModelConfig& c);
// DeepSpeed's total for a model: shared (tied) parameters counted once = ParamLayout total.
int64_t deepspeed_total_params(const ModelConfig& c);

}  // namespace zt

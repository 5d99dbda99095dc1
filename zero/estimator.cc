#include "zero/estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>

#include "common/checked.h"
#include "common/status.h"
#include "model/backend.h"
#include "model/hf_weights.h"
#include "model/layout.h"
#include "model/transformer.h"
#include "zero/gradients.h"
#include "zero/optimizer_state.h"
#include "zero/partition.h"
#include "zero/update_pipeline.h"
#include "zero/zeropp.h"

namespace zt {

constexpr int64_t kMaxUnitNumel = int64_t{1} << 53;

std::string_view offload_device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone: return "none";
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
  }
  return "?";
}

absl::StatusOr<OffloadDevice> parse_offload_device(std::string_view s) {
  if (s == "none" || s.empty()) return OffloadDevice::kNone;
  if (s == "cpu") return OffloadDevice::kCpu;
  if (s == "nvme") return OffloadDevice::kNvme;
  return absl::InvalidArgumentError("offload device '" + std::string(s) +
                                    "' is not one of none, cpu, nvme");
}

int64_t MemoryEstimate::device_model_states() const {
  return dev(MemCategory::kParams) + dev(MemCategory::kGrads) + dev(MemCategory::kOptimizer);
}
int64_t MemoryEstimate::device_total() const {
  Size t = 0;
  for (int64_t b : device) t += b;
  return t.v;
}
int64_t MemoryEstimate::host_total() const {
  Size t = 0;
  for (size_t c = 0; c < kNumMemCategories; ++c)
    if (c != static_cast<size_t>(MemCategory::kNvme)) t += host[c];
  return t.v;
}

// An error naming the first size of `e` past int64 (8 EiB) and what to reduce; ok when none is.
static absl::Status overflow_error(const MemoryEstimate& e, const EstimateInput& in) {
  auto reduce = [&](MemCategory c) -> std::string {
    if (c == MemCategory::kActivations)
      return absl::StrCat("the micro-batch x sequence length (", in.micro_batch, " x ", in.seq_len,
                          " tokens a rank; train_micro_batch_size_per_gpu, --micro_batch and "
                          "--seq_len) or checkpoint activations");
    return "the model (parameters a rank: more ranks, a smaller model) or the units in flight";
  };
  auto check = [&](const char* pool, MemCategory c, int64_t bytes) -> absl::Status {
    if (bytes != kSizeOverflow) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "the estimate of ", pool, " ", std::string(mem_category_name(c)),
        " passes 2^63 bytes (8 EiB), more than any machine holds: reduce ", reduce(c)));
  };
  for (size_t c = 0; c < kNumMemCategories; ++c) {
    ZT_RETURN_IF_ERROR(check("device", static_cast<MemCategory>(c), e.device[c]));
    ZT_RETURN_IF_ERROR(check("host", static_cast<MemCategory>(c), e.host[c]));
  }
  if (e.device_total() == kSizeOverflow || e.host_total() == kSizeOverflow)
    return absl::InvalidArgumentError(
        "the estimate's total a rank passes 2^63 bytes (8 EiB), more than any machine holds: "
        "reduce the micro-batch x sequence length or the model");
  return absl::OkStatus();
}

std::vector<int64_t> unit_numels(const ModelConfig& c) {
  const ParamLayout layout(c);
  std::vector<int64_t> v;
  for (const Unit& u : layout.units()) v.push_back(static_cast<int64_t>(u.numel));
  return v;
}

PartitionOptions partition_options(const EstimateInput& in) {
  const bool param_offload = in.offload_param != OffloadDevice::kNone;
  return {.stage = in.stage,
          .world = (int)in.dp,
          .persistence_threshold = in.stage3_param_persistence_threshold,
          // With the optimizer offloaded the sharded units' gradients go to host memory.
          .host_grads = in.offload_optimizer != OffloadDevice::kNone && in.stage >= 2,
          .offload_param = param_offload,
          .param_host_elems = in.offload_param == OffloadDevice::kNvme
                                  ? in.param_max_in_cpu
                                  : std::numeric_limits<int64_t>::max()};
}

// ZeRO++'s quantized buffers (zero/zeropp.cc), stage 3, for units of at most `shard` elements a
// rank, N ranks, L a node, M nodes. `reduce`: qgZ's, on top of the reduction's own, with
// `in_flight` reductions pending: each holds its node-local all-to-all's int4 send and receive
// pieces (N of them each; none with one rank a node), and the oldest one's finish adds this
// rank's M node sums in fp32 before those are freed; its cross-node hop (M pieces each way)
// comes after, so it adds to the peak only with one rank a node. `pending`: what one pending
// reduction holds besides its fp32 shard. `gather`: qwZ's, each gather in flight (live_units, as
// the workspace counts them) holding this rank's int8 piece and all N.
struct ZeroppBuffers {
  Size reduce = 0, pending = 0, gather = 0;
};
static ZeroppBuffers zeropp_buffers(const EstimateInput& in, int64_t shard, int64_t in_flight) {
  ZeroppBuffers b;
  if (in.stage != 3) return b;
  const int64_t N = in.dp;
  const int64_t L = in.ranks_per_node > 0 ? std::min<int64_t>(in.ranks_per_node, N) : N;
  const int64_t M = N / L;
  if (in.quantized_gradients) {
    const int64_t piece = (int64_t)quantized_piece_bytes((size_t)shard, kQgzBits, kQgzBlock);
    b.pending = L > 1 ? 2 * Size(piece) * N : 0;
    b.reduce = L > 1   ? in_flight * b.pending + 4 * Size(shard) * M
               : M > 1 ? 2 * Size(piece) * M
                       : 0;
  }
  if (in.quantized_weights) {
    const int64_t piece = (int64_t)quantized_piece_bytes((size_t)shard, kQwzBits, kQwzBlock);
    b.gather = Size(std::max(in.live_units, 1)) * (N + 1) * piece;
  }
  return b;
}

// The workspace of a whole-matrix optimizer's step (zero/muon_rule.h), when the forward's and
// backward's workspace is free: u and the update of a block unit's owned elements, its
// gathered u when sharded (padded), and Newton-Schulz on the largest hidden matrix (its
// output, two iterates, three Gram-sized matrices), all fp32, each at its largest over the
// blocks. 0 for an element-wise optimizer, or without the model.
static Size whole_matrix_workspace(const EstimateInput& in,
                                   const std::vector<UnitPartition>& plan) {
  if (!optimizer_info(in.optimizer).whole_matrices || !in.model ||
      plan.size() != (size_t)ParamLayout(*in.model).num_units())
    return 0;
  const ParamLayout layout(*in.model);
  int64_t owned = 0, gathered = 0, ns = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    if (layout.hidden_matrices(u).empty()) continue;
    owned = std::max(owned, plan[u].owned());
    if (!plan[u].replicated) gathered = std::max(gathered, plan[u].padded);
    for (const MatrixSlot& m : layout.hidden_matrices(u)) {
      const int64_t r = std::min(m.rows, m.cols);
      ns = std::max(ns, 3 * m.rows * m.cols + 3 * r * r + 2);  // + the norm's double
    }
  }
  return 4 * (2 * Size(owned) + gathered + ns);
}

// The input's errors (see estimate_memory), and its units: unit_numel, or one unit of psi.
static absl::StatusOr<std::vector<int64_t>> checked_units(const EstimateInput& in) {
  if (in.stage < 0 || in.stage > 3)
    return absl::InvalidArgumentError("stage " + std::to_string(in.stage) +
                                      " is not a ZeRO stage; use 0, 1, 2 or 3");
  if (in.dp < 1)
    return absl::InvalidArgumentError("data-parallel degree must be >= 1, got " +
                                      std::to_string(in.dp));
  if (in.offload_param != OffloadDevice::kNone && in.stage != 3)
    return absl::InvalidArgumentError("offload_param needs ZeRO stage 3 (DeepSpeed's rule)");
  if (in.live_units < 0) return absl::InvalidArgumentError("live_units must be >= 0");
  std::vector<int64_t> units = in.unit_numel;
  if (units.empty()) units.push_back(in.psi);
  for (int64_t n : units) {
    if (n <= 0) return absl::InvalidArgumentError("parameter counts must be > 0");
    // Past this, no machine holds the unit (16 PiB at two bytes a parameter); below it the
    // size_t helpers this counts by (offload/NVMe rounding) cannot wrap.
    if (n > kMaxUnitNumel)
      return absl::InvalidArgumentError(
          absl::StrCat("a unit of ", n,
                       " parameters is more than any machine holds (at most 2^53): reduce "
                       "the parameter count"));
  }

  return units;
}

// The communication buffers of a sharded run (N_d > 1 or offload; see estimate_memory): the
// largest unit's, whose padded size is largest_padded and shard largest_shard; owned_total:
// the rank's owned elements of every sharded unit.
static Size comm_buffer_bytes(const EstimateInput& in, int64_t largest_padded,
                              int64_t largest_shard, Size owned_total, bool host_grads) {
  const int64_t G = dtype_size(in.grad_dtype);
  const int64_t in_flight = in.overlap_comm ? 2 : 1;
  Size comm = 0;
  if (in.stage <= 1) comm += in_flight * Size(largest_padded) * 4;  // fp32 copy being reduced
  if (in.stage >= 2) comm += in_flight * Size(largest_shard) * 4;   // its reduced shard
  if (in.stage == 1) comm += owned_total * 4;       // every reduced shard, kept until the step
  if (host_grads) comm += Size(largest_shard) * G;  // the shard rounded to G on its way out
  // ZeRO++: the backward's reductions, with the gathers in flight beside them where the
  // backward gathers again through qwZ (no hpZ, overlap_comm's prefetcher); and the forward's
  // gathers, with one reduction still pending beside them where overlap_comm keeps the last
  // unit's into the next micro-batch (gradient accumulation). An upper bound: the two
  // overlaps need particular schedules.
  const ZeroppBuffers z = zeropp_buffers(in, largest_shard, in_flight);
  const bool regathers = in.overlap_comm && in.hpz_partition_size <= 1;
  const Size backward = comm + z.reduce + (regathers ? z.gather : 0);
  const Size forward = z.gather + (in.overlap_comm ? Size(largest_shard) * 4 + z.pending : 0);
  return std::max(backward, z.gather > 0 ? forward : 0);
}

// The device workspace (see estimate_memory): gathered units (stage 3), fp32 views of fetched
// units, the fp32 gradient accumulator, a whole-matrix optimizer's step; largest_padded: the
// largest unit's padded size. Needs unit sizes: with only Ψ there is no "largest unit" to
// speak of (0).
static Size workspace_bytes(const EstimateInput& in, const std::vector<UnitPartition>& plan,
                            int64_t largest_padded, bool shards) {
  const int64_t P = dtype_size(in.param_dtype);
  Size ws = 0;
  if (in.unit_numel.empty()) largest_padded = 0;
  if (in.stage == 3) ws += Size(in.live_units) * largest_padded * P;
  // The fp32 views of the units in use, where the kernels read fp32 weights from 16-bit
  // units: one, or the head and the embedding together when they are tied (counted at the
  // largest unit's size): the decoding step's. In training the CPU's GEMMs widen a 16-bit weight
  // and sum its gradient a block of about 4 MiB at a time per thread (plus up to 8 MiB of input
  // gradient), which this term bounds for any thread count a real model meets.
  const int64_t views = in.model && in.model->tied_embeddings ? 2 : 1;
  if (in.param_dtype != in.weight_dtype) ws += views * Size(largest_padded) * 4;
  // The engine's fp32 accumulator of a unit's gradient during its backward: whenever the
  // stored gradient is not a whole fp32 unit (low-precision grads, or stages 2-3).
  if (in.grad_dtype != DType::kF32 || in.stage >= 2) ws += Size(largest_padded) * 4;
  // Stages 1-2 load each unit's whole working copy through an fp32 buffer (set_unit_params),
  // before training: the workspace peak is at least that.
  if ((in.stage == 1 || in.stage == 2) && shards) ws = std::max(ws, Size(largest_padded) * 4);
  ws = std::max(ws, whole_matrix_workspace(in, plan));
  return ws;
}

absl::StatusOr<MemoryEstimate> estimate_memory(const EstimateInput& in) {
  ZT_ASSIGN_OR_RETURN(const std::vector<int64_t> units, checked_units(in));
  MemoryEstimate e;
  const int64_t N = in.dp;
  const int64_t P = dtype_size(in.param_dtype), G = dtype_size(in.grad_dtype);
  // An offloaded state keeps its own fp32 master even when the working params are fp32.
  const bool param_offload = in.offload_param != OffloadDevice::kNone;
  const bool master = in.fp32_master && master_apart(in.param_dtype == DType::kF32,
                                                     in.offload_optimizer, in.offload_param);
  const PartitionOptions po = partition_options(in);
  const bool host_grads = po.host_grads;
  // Offload shards even at N_d = 1; a sharded unit reduces into an fp32 shard buffer.
  const bool shards = N > 1 || host_grads || param_offload;
  const int64_t K = optimizer_bytes_per_param(in.optimizer, !master);
  const int64_t arrays = 1 + optimizer_info(in.optimizer).num_states;  // offloaded: master too
  e.optimizer_k = static_cast<int>(K);
  // Sums and products of sizes saturate (common/checked.h): checked once, at the end.
  Size params = 0, grads = 0, optim = 0, owned_total = 0, nvme_state = 0;
  Size host_grad_bytes = 0, host_params = 0, nvme_params = 0, largest_nvme = 0;
  int64_t largest_padded = 0, largest_shard = 0;
  int64_t accumulate_tile = 0;  // zero/gradients.h: the tile host gradients accumulate through
  int64_t granule = 0, nvme_granule = 0;  // the largest sub-group of any unit (offload)
  const std::vector<UnitPartition> plan = plan_partition(units, po);
  // The offload pipeline's staging slots (zero/update_pipeline.h): unit i's is slot i % slots,
  // as large as the largest unit it holds.
  int64_t slots[UpdatePipeline::kStagingSlots] = {};
  for (size_t i = 0; i < plan.size(); ++i) {
    const UnitPartition& u = plan[i];
    const int64_t n = u.numel, shard = u.shard, padded = u.padded;
    e.psi = checked_add(e.psi, n);
    e.padded_psi = checked_add(e.padded_psi, padded);
    largest_padded = std::max(largest_padded, padded);
    if (u.sharded_params && in.hpz_partition_size > 1)  // hpZ's secondary partition
      params += Size(padded / in.hpz_partition_size) * P;
    switch (u.params) {
      case ParamHome::kDevice: params += Size(u.sharded_params ? shard : padded) * P; break;
      case ParamHome::kHost: host_params += Size(shard) * P; break;
      case ParamHome::kDrive: {
        const Size file = (Size(shard) * P + 4095) / 4096 * 4096;
        nvme_params += file;
        largest_nvme = std::max(largest_nvme, file);
        break;
      }
    }
    (u.host_grads ? host_grad_bytes : grads) += Size(u.grad_numel()) * G;
    if (u.host_grads)
      accumulate_tile =
          std::max(accumulate_tile, std::min(shard, (int64_t)Gradients::kAccumulateTile));
    optim += Size(u.owned()) * K;
    if (u.stage >= 1) largest_shard = std::max(largest_shard, shard), owned_total += shard;
    const size_t owned = (size_t)u.owned();
    granule = std::max<int64_t>(granule, offload_granule(owned, in.sub_group_size));
    nvme_granule = std::max<int64_t>(nvme_granule, offload_granule(owned, in.sub_group_size, 1024));
    nvme_state += (int64_t)nvme_state_bytes(owned, in.sub_group_size, in.optimizer);
    // Off the training thread, a gradient the device keeps (stage 1's reduced fp32 shard, a
    // unit kept whole) lands in host memory, owned elements in its dtype (Gradients'
    // land_on_host).
    const Size landed = Size((int64_t)owned) * (u.whole_grads && !u.replicated ? 4 : G);
    if (in.delayed_update) {
      // The update reads the host gradient's second buffer (Gradients::hand_off); its weights
      // go to a second working copy where the host can address the device's and it is the
      // owned slice whole, else to staging (UpdatePipeline's rule).
      host_grad_bytes += landed * (u.host_grads ? 1 : 2);
      const bool swaps = UpdatePipeline::swaps_working_copy(u, in.device_host_addressable);
      (swaps ? params : host_params) += Size((int64_t)owned) * P;
    } else if (in.offload_pipeline) {
      if (!u.host_grads) host_grad_bytes += landed;
      if (!UpdatePipeline::writes_working_copy(u, in.device_host_addressable)) {
        int64_t& slot = slots[i % UpdatePipeline::kStagingSlots];
        slot = std::max(slot, (int64_t)owned);
      }
    }
  }
  for (int64_t slot : slots) host_params += Size(slot) * P;

  using M = MemCategory;
  // Parameters: stage-3 shards may live on the host or NVMe (offload/param_offload.h).
  Size pinned = 0;
  e.dev(M::kParams) = params.v;
  e.hst(M::kParams) = host_params.v;
  e.hst(M::kNvme) = nvme_params.v;
  if (largest_nvme > 0) pinned += std::max<int64_t>(in.param_buffer_count, 1) * largest_nvme;
  // Optimizer offload: the optimizer state leaves the device, and so do the sharded gradients.
  e.dev(M::kGrads) = grads.v;
  e.hst(M::kGrads) = host_grad_bytes.v;
  // Two fp32 staging buffers of the largest sub-group: the gradient and the working copy.
  const Size staging = 2 * 4 * Size((int64_t)staging_elems(granule)),
             nvme_staging = 2 * 4 * Size((int64_t)staging_elems(nvme_granule));
  switch (in.offload_optimizer) {
    case OffloadDevice::kNone: e.dev(M::kOptimizer) = optim.v; break;
    case OffloadDevice::kCpu:
      e.hst(M::kOptimizer) = optim.v;
      pinned += staging;
      break;
    case OffloadDevice::kNvme:  // plus the window of master and states a sub-group is updated in
      e.hst(M::kNvme) = (Size(e.hst(M::kNvme)) + nvme_state).v;  // an own master
      pinned += nvme_staging + (in.nvme_pipeline ? 2 : 1) * arrays * 4 * Size(nvme_granule);
      break;
  }
  pinned += 4 * Size(accumulate_tile);
  e.hst(M::kPinnedHost) = pinned.v;
  e.dev(M::kWorkspace) = workspace_bytes(in, plan, largest_padded, shards).v;
  if (shards && !in.unit_numel.empty())
    e.dev(M::kCommBuffers) =
        comm_buffer_bytes(in, largest_padded, largest_shard, owned_total, host_grads).v;
  if (in.model && in.micro_batch > 0 && in.seq_len > 0) {
    e.dev(M::kActivations) = transformer_activation_bytes(
        *in.model, in.micro_batch, in.seq_len, in.checkpoint_every, in.cpu_checkpointing,
        in.activation_dtype, in.logits_ld, in.classifier_chunk_bytes);
    e.hst(M::kActivations) = transformer_host_activation_bytes(
        *in.model, in.micro_batch, in.seq_len, in.checkpoint_every, in.cpu_checkpointing,
        in.activation_dtype);
  }
  ZT_RETURN_IF_ERROR(overflow_error(e, in));
  return e;
}

int64_t transformer_host_activation_bytes(const ModelConfig& c, int B, int T, int checkpoint_every,
                                          bool cpu_checkpointing, DType activations) {
  const int64_t k = std::min<int64_t>(checkpoint_every, c.n_layer);
  if (k == 0 || !cpu_checkpointing) return 0;
  return (Size((c.n_layer + k - 1) / k) * B * T * c.hidden * (int64_t)dtype_size(activations)).v;
}

int64_t transformer_activation_bytes(const ModelConfig& c, int B, int T, int checkpoint_every,
                                     bool cpu_checkpointing, DType activations, int logits_ld,
                                     int64_t classifier_chunk_bytes) {
  const Size N = Size(B) * T, C = c.hidden;
  const int64_t ld = logits_ld > 0 ? logits_ld : c.vocab_size;
  const int64_t k = std::min<int64_t>(checkpoint_every, c.n_layer);
  const int64_t L = k == 0 ? c.n_layer : k;  // per-layer sets kept
  const int64_t checkpoints = k == 0 ? 0 : (c.n_layer + k - 1) / k;
  const int64_t xs =
      k == 0 ? c.n_layer + 1
             : (cpu_checkpointing ? std::min<int64_t>(2, checkpoints) : checkpoints) + k;
  const int64_t I = c.intermediate, QKV = c.qkv_dim(), NH = c.n_head, A = c.attn_dim();
  const int64_t fcw = c.fc_dim();
  const int64_t chunk = logits_chunk_rows(
      (int)ld,
      classifier_chunk_bytes > 0 ? (size_t)classifier_chunk_bytes : kCpuClassifierChunkBytes,
      activations, N.v);
  Size acts = 0, floats = 0;  // elements in the activation dtype, and in fp32
  acts += xs * N * C;         // x[]
  acts += L * (N * C + N * QKV + N * A + 2 * N * C + N * fcw + N * I);  // ln1, qkv, atty,
                                                                        // resid_mid, ln2, fc, act
  floats += L * (2 * N + B * NH * Size(T) + 2 * N);             // ln1 stats, lse, ln2 stats
  acts += N * C;                                                // lnf
  acts += Size(chunk) * ld;                                     // logits chunk
  floats += 2 * N + N;                                          // lnf stats, losses
  acts += N * C;                                                // dlnf
  acts += 3 * N * C + N * A + N * QKV + N * I + N * fcw;        // backward scratch
  return (acts * (int64_t)dtype_size(activations) + floats * 4 +
          3 * N * 4)  // + tokens, targets, positions (int32)
      .v;
}

// ---- ZeRO paper ----

double zero_paper_bytes(double psi, double n_d, int stage) {
  constexpr double K = 12;
  switch (stage) {
    case 0: return (2 + 2 + K) * psi;
    case 1: return 4 * psi + K * psi / n_d;
    case 2: return 2 * psi + (2 + K) * psi / n_d;
    default: return (2 + 2 + K) * psi / n_d;
  }
}

// Rounds half-up to `decimals` places and prints without trailing zeros. The relative nudge
// keeps exact halves (41.25, 1.875) from falling below .5 through representation error.
static std::string fixed_trimmed(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  const double r = std::floor(v * scale * (1 + 1e-12) + 0.5) / scale;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, r);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::string format_paper_gb(double gb) {
  if (gb >= 100) return std::to_string(static_cast<int64_t>(std::floor(gb * (1 + 1e-12))));
  // 3 significant digits, at most 2 decimals.
  const int int_digits = gb >= 10 ? 2 : 1;
  return fixed_trimmed(gb, std::min(2, 3 - int_digits));
}

std::array<std::string, 4> zero_paper_figure1() {
  std::array<std::string, 4> r;
  for (int s = 0; s < 4; ++s) r[s] = fixed_trimmed(zero_paper_bytes(7.5e9, 64, s) / 1e9, 1);
  return r;
}

std::string zero_paper_table() {
  const double psis[] = {7.5e9, 128e9, 1e12};
  const int nds[] = {1, 4, 16, 64, 256, 1024};
  std::string out =
      "ZeRO paper (SC20) Table 1: model-state memory per device in GB (1e9 bytes), K = 12,\n"
      "mixed-precision Adam; columns os / os+g / os+g+p (ZeRO stages 1 / 2 / 3).\n"
      "Cells are printed as the paper prints them (>= 100 truncated to an integer; below,\n"
      "3 significant digits, at most 2 decimals).\n\n";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%6s | %-24s | %-24s | %s\n", "N_d", "7.5B", "128B", "1T");
  out += buf;
  out += std::string(6, '-') + "-+-" + std::string(24, '-') + "-+-" + std::string(24, '-') + "-+-" +
         std::string(21, '-') + "\n";
  for (int nd : nds) {
    std::snprintf(buf, sizeof buf, "%6d", nd);
    out += buf;
    for (double psi : psis) {
      std::string cell;
      for (int s = 1; s <= 3; ++s) {
        if (s > 1) cell += " / ";
        cell += format_paper_gb(zero_paper_bytes(psi, nd, s) / 1e9);
      }
      std::snprintf(buf, sizeof buf, " | %-24s", cell.c_str());
      out += buf;
    }
    while (out.back() == ' ') out.pop_back();
    out += "\n";
  }
  const auto f = zero_paper_figure1();
  out += "\nFigure 1 (Psi = 7.5B, N_d = 64, K = 12), GB per device:\n";
  out += "  baseline (2+2+K)Psi         " + f[0] + "\n";
  out += "  P_os     4Psi + K Psi/N_d      " + f[1] + "\n";
  out += "  P_os+g   2Psi + (2+K)Psi/N_d   " + f[2] + "\n";
  out += "  P_os+g+p (2+2+K)Psi/N_d        " + f[3] + "\n";
  return out;
}

// ---- DeepSpeed ----
// Arithmetic mirrors the Python expression order (int products, then float factors), so the
// int() truncations land on the same integers. Python's ints do not overflow; here a product
// past int64 gives kSizeOverflow (common/checked.h), and so does int() of a float past it.

static double py_float(int64_t v) {
  return v == kSizeOverflow ? HUGE_VAL : static_cast<double>(v);  // inf stays inf through f, 1/N
}
static int64_t py_int(double v) { return v >= 0x1p63 ? kSizeOverflow : static_cast<int64_t>(v); }

std::vector<DeepSpeedRow> deepspeed_zero2_estimates(const DeepSpeedSetup& s) {
  const int64_t P = s.total_params, G = s.gpus_per_node, N = s.nodes * G;
  const double f = s.additional_buffer_factor;
  std::vector<DeepSpeedRow> rows;
  for (bool cpu_offload : {true, false}) {
    DeepSpeedRow r;
    if (cpu_offload) {
      r.gpu_bytes = checked_mul(2, P);
      r.cpu_bytes = py_int(py_float(checked_mul(P, std::max<int64_t>(checked_mul(4, N), 16))) * f);
      r.options = "offload_optimizer=cpu ";
    } else {
      r.gpu_bytes = checked_add(checked_mul(2, P), py_int(py_float(checked_mul(18, P)) / N));
      r.cpu_bytes = py_int(py_float((Size(P) * 4 * G).v) * f);
      r.options = "offload_optimizer=none";
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<DeepSpeedRow> deepspeed_zero3_estimates(const DeepSpeedSetup& s) {
  const int64_t P = s.total_params, L = s.largest_layer_params, G = s.gpus_per_node;
  const int64_t N = s.nodes * G;
  const double f = s.additional_buffer_factor, gf = 1.0 / s.nodes;
  const int64_t lmem = checked_mul(4, L);
  // Python's max(int, float) returns the first argument on ties; the value is the same.
  auto pmax = [](double a, double b) { return b > a ? b : a; };
  std::vector<DeepSpeedRow> rows;
  for (bool opt_cpu : {true, false}) {
    for (bool param_cpu : {true, false}) {
      if (!opt_cpu && param_cpu) continue;
      for (bool zero_init : {true, false}) {
        DeepSpeedRow r;
        double cpu = 0;
        if (opt_cpu && param_cpu) {
          r.gpu_bytes = lmem;
          cpu = zero_init ? py_float(checked_mul(P, 18)) * gf * f
                          : static_cast<double>(P) * pmax(4.0 * G, 18 * gf) * f;
        } else if (opt_cpu) {
          r.gpu_bytes = checked_add(lmem, py_int(py_float(checked_mul(2, P)) / N));
          cpu = zero_init ? py_float(checked_mul(P, 16)) * gf * f
                          : static_cast<double>(P) * pmax(4.0 * G, 16 * gf) * f;
        } else {
          r.gpu_bytes = checked_add(lmem, py_int(py_float(checked_mul(18, P)) / N));
          cpu = zero_init ? py_float((Size(L) * 4 * G).v) * f : py_float((Size(P) * 4 * G).v) * f;
        }
        r.cpu_bytes = py_int(cpu);
        r.options = std::string("offload_param=") + (param_cpu ? "cpu " : "none") +
                    ", offload_optimizer=" + (opt_cpu ? "cpu " : "none") +
                    ", zero_init=" + (zero_init ? "1" : "0");
        rows.push_back(r);
      }
    }
  }
  return rows;
}

std::string deepspeed_report(int stage, const DeepSpeedSetup& s) {
  const auto rows = stage == 2 ? deepspeed_zero2_estimates(s) : deepspeed_zero3_estimates(s);
  std::string out = "Estimated memory needed for params, optim states and gradients for a:\n";
  out += "HW: Setup with " + std::to_string(s.nodes) + (s.nodes > 1 ? " nodes, " : " node, ") +
         std::to_string(s.gpus_per_node) + (s.gpus_per_node > 1 ? " GPUs" : " GPU") +
         " per node.\n";
  out += "SW: Model with " + std::to_string(static_cast<int64_t>(s.total_params / 1e6)) +
         "M total params";
  if (stage == 3)
    out += ", " + std::to_string(static_cast<int64_t>(s.largest_layer_params / 1e6)) +
           "M largest layer params";
  out += ".\n  per CPU  |  per GPU |   Options\n";
  char buf[200];
  for (const DeepSpeedRow& r : rows) {
    std::snprintf(buf, sizeof buf, " %7.2fGB | %6.2fGB | %s\n", r.cpu_bytes / 1073741824.0,
                  r.gpu_bytes / 1073741824.0, r.options.c_str());
    out += buf;
  }
  return out;
}

int64_t deepspeed_largest_layer_params(const ModelConfig& c) {
  // The tensors of the Hugging Face model by name (model/hf_weights.h), summed per module (the
  // name up to its last '.'): a tied lm_head holds wte's weight, the same V x C.
  const ParamLayout layout(c);
  std::map<std::string, int64_t> modules;
  for (int u = 0; u < (int)layout.units().size(); ++u)
    for (const HfPiece& p : hf_pieces(c, layout, u))
      modules[p.hf_name.substr(0, p.hf_name.rfind('.'))] += p.rows * p.cols;
  int64_t largest = int64_t{c.vocab_size} * c.hidden;
  for (const auto& [name, n] : modules) largest = std::max(largest, n);
  return largest;
}

int64_t deepspeed_total_params(const ModelConfig& c) {
  return static_cast<int64_t>(ParamLayout(c).total_numel());
}

}  // namespace zt

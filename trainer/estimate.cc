#include "trainer/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checked.h"
#include "common/dtype.h"
#include "common/file.h"
#include "common/memory.h"
#include "common/status.h"
#include "model/backend.h"
#include "model/config.h"
#include "trainer/ds_config.h"
#include "trainer/engine_options.h"
#include "trainer/device.h"
#include "trainer/hardware_probe.h"
#include "trainer/recommend.h"
#include "trainer/run_config.h"
#include "zero/estimator.h"
#include "zero/paper_tables.h"
#include "zero/step_time.h"

namespace zt {
namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / 1073741824.0);
  return buf;
}

absl::StatusOr<std::string> deepspeed_text(const EstimateOptions& o) {
  DeepSpeedSetup s;
  s.gpus_per_node = o.gpus_per_node;
  s.nodes = o.nodes;
  std::string head;
  if (!o.model.empty()) {
    ZT_ASSIGN_OR_RETURN(const ModelConfig c, preset(o.model));
    s.total_params = deepspeed_total_params(c);
    s.largest_layer_params = deepspeed_largest_layer_params(c);
    head = "DeepSpeed estimate_zero{2,3}_model_states_mem_needs_all_live for " + o.model +
           ": P = " + with_commas(s.total_params) +
           " (tied weights once), largest layer L = " + with_commas(s.largest_layer_params) +
           " (the most parameters one nn.Module of the Hugging Face model holds directly).\n\n";
  } else {
    s.total_params = o.params;
    s.largest_layer_params = o.largest_layer_params;
    head = "DeepSpeed estimate_zero{2,3}_model_states_mem_needs_all_cold (GiB = 2^30).\n\n";
  }
  const bool want2 = o.stage == -1 || o.stage == 2, want3 = o.stage == -1 || o.stage == 3;
  std::vector<DeepSpeedRow> rows = deepspeed_zero2_estimates(s);
  if (s.largest_layer_params > 0) {
    const auto rows3 = deepspeed_zero3_estimates(s);
    rows.insert(rows.end(), rows3.begin(), rows3.end());
  }
  for (const DeepSpeedRow& r : rows)
    if (r.cpu_bytes == kSizeOverflow || r.gpu_bytes == kSizeOverflow)
      return absl::InvalidArgumentError(absl::StrCat(
          "DeepSpeed's formula for ", r.options,
          " passes 2^63 bytes (8 EiB), more than any "
          "machine holds: reduce --params, --largest_layer_params, --gpus_per_node or --nodes"));
  if (!want2 && !want3)
    return absl::InvalidArgumentError("--formula deepspeed covers --stage 2 and 3, got --stage " +
                                      std::to_string(o.stage));
  if (want3 && s.largest_layer_params <= 0 && o.stage == 3)
    return absl::InvalidArgumentError(
        "the ZeRO-3 formula needs --largest_layer_params N (or --model PRESET)");
  std::string out = head;
  if (want2) out += "ZeRO-2:\n" + deepspeed_report(2, s);
  if (want3 && s.largest_layer_params > 0)
    out += std::string(want2 ? "\n" : "") + "ZeRO-3:\n" + deepspeed_report(3, s);
  else if (want3)
    out += "\n(ZeRO-3 skipped: give --largest_layer_params N)\n";
  return out;
}

std::string fit_text(const MemoryEstimate& e, int64_t device, int64_t host);

// ZeRO++'s and MiCS's sizes as `train` checks them (zero/zeropp.h check_zeropp), the ranks
// spread evenly over the nodes in order; errors name the config `path`.
absl::Status zeropp_as_train_checks(const DsConfig& ds, const std::string& path, int ranks,
                                    int nodes) {
  return prefixed(zeropp_fits(engine_options(ds).zero.zeropp, ranks, ranks / nodes,
                              (ranks + nodes - 1) / nodes, true),
                  path);
}

// --time: the step-time model (zero/step_time.h) for the run a ds_config describes.
absl::StatusOr<std::string> time_text(const EstimateOptions& o) {
  if (o.deepspeed.empty() || o.model.empty() || o.seq_len <= 0)
    return absl::InvalidArgumentError(
        "estimate --time needs --deepspeed ds_config.json, --model and --seq_len T");
  const int dp = o.dp > 0 ? o.dp : o.gpus_per_node * o.nodes;
  ZT_ASSIGN_OR_RETURN(const std::string text,
                      read_file(o.deepspeed, "the DeepSpeed config (--deepspeed)"));
  ZT_ASSIGN_OR_RETURN(const DsConfig ds,
                      resolve_run_config(text, dp, o.deepspeed,
                                         {.gradient_checkpointing = o.gradient_checkpointing,
                                          .optimizer_threads = o.optimizer_threads}));
  ZT_ASSIGN_OR_RETURN(const ModelConfig c, preset(o.model));
  ZT_RETURN_IF_ERROR(zeropp_as_train_checks(ds, o.deepspeed, dp, o.nodes));
  std::string source;
  ZT_ASSIGN_OR_RETURN(Hardware hw, hardware_named(o.hardware, o.nvme_path, &source));
  if (o.inter_node_gbps > 0) hw.inter_node_bw = o.inter_node_gbps * 1e9 / 8;
  StepTimeInput in = step_time_input(ds, c, dp, o.seq_len);
  in.nodes = o.nodes;
  if (hw.cpu_backend && hw.cores > 0) {  // the rank's cores split as `train` splits them
    const ThreadSplit split =
        split_threads(std::max(1, hw.cores / (dp / o.nodes)), Device::kCpu,
                      update_runs_off_the_training_thread(ds), o.threads,
                      (int)ds.zerotrain.optimizer_threads);
    in.compute_threads = split.compute;
    in.optimizer_threads = split.optimizer;
  } else {
    in.compute_threads = o.threads;
  }
  // This machine's CPU backend: the compute timed at the run's shape (one and three blocks).
  std::string compute_source;
  if (hw.cpu_backend && hw.name == "this") {
    const bool beside = update_runs_off_the_training_thread(ds) && hw.cores >= 2;
    std::fprintf(stderr,
                 "timing a micro-batch of %d x %d tokens here (up to a minute; the built-in "
                 "--hardware cpu profile predicts from FLOPs without timing)\n",
                 in.micro_batch, o.seq_len);
    auto m = measure_micro_batch(c, ds, in.micro_batch, o.seq_len, in.compute_threads, beside);
    if (m.ok()) {
      in.micro_batch_seconds = m->seconds(c);
      if (beside) hw.busy_core_slowdown = m->busy_core_slowdown;
      compute_source = absl::StrFormat(
          "  compute timed here: a micro-batch of %d x %d tokens %.1f ms (a block %.1f ms, "
          "embedding, head and loss %.1f ms)%s\n",
          in.micro_batch, o.seq_len, in.micro_batch_seconds * 1e3, m->block_s * 1e3,
          m->rest_s * 1e3,
          beside ? absl::StrFormat("; %.2fx beside a core streaming memory",
                                   m->busy_core_slowdown)
                 : "");
    } else {
      compute_source = absl::StrCat("  compute from FLOPs: ", m.status().message(), "\n");
    }
  }
  ZT_ASSIGN_OR_RETURN(const StepTime t, predict_step(in, hw));
  std::string out = absl::StrFormat(
      "Step time of %s with %s on %d rank(s) on %d node(s), hardware %s (%s):\n"
      "  GEMM %.0f GFLOP/s a device x efficiency %.2f; memory %.0f GB/s; host %.0f GB/s; "
      "PCIe %.0f GB/s; collectives %.0f GB/s; NVMe %.1f GB/s\n",
      o.model, o.deepspeed, dp, o.nodes, hw.name, source, hw.peak_flops / 1e9, hw.efficiency,
      hw.device_bw / 1e9, hw.host_bw / 1e9, hw.pcie_bw / 1e9, hw.link_bw / 1e9, hw.nvme_bw / 1e9);
  absl::StrAppend(&out, compute_source);
  if (o.nodes > 1)
    absl::StrAppend(&out, absl::StrFormat("  between nodes %.1f GB/s a rank\n",
                                          hw.inter_node() / 1e9));
  absl::StrAppend(&out, absl::StrFormat("  collectives' bus bytes a rank: %.1f MB within a node, "
                                        "%.1f MB between nodes a step (docs/zero.md)\n\n",
                                        t.intra_node_bytes / 1e6, t.inter_node_bytes / 1e6));
  for (const auto& [name, sec] : {std::pair{"compute", t.compute},
                                  {"communication", t.comm},
                                  {"offload copies", t.copies},
                                  {"optimizer", t.optimizer},
                                  {"nvme", t.nvme}})
    absl::StrAppend(&out, absl::StrFormat("  %-16s %10.1f ms\n", name, sec * 1e3));
  for (const std::string& w : t.overlaps) absl::StrAppend(&out, "  overlapped: ", w, "\n");
  absl::StrAppend(&out,
                  absl::StrFormat("  %-16s %10.1f ms\n  %-16s %10.0f\n  %-16s %9.1f%%\n", "step",
                                  t.step * 1e3, "tokens/s", t.tokens_per_s, "MFU", 100 * t.mfu));
  return out;
}

// memory_text's input: the run a ds_config describes, as `train` would estimate it (ds then
// holds the resolved config), or the flags' model, dtypes and offload; `what` names it.
static absl::StatusOr<EstimateInput> memory_input(const EstimateOptions& o, int dp,
                                                  std::optional<DsConfig>& ds, std::string& what) {
  EstimateInput in;
  if (!o.deepspeed.empty()) {  // the run the config describes, as `train` would estimate it
    if (o.model.empty())
      return absl::InvalidArgumentError("estimate --deepspeed needs --model PRESET");
    if (o.stage != -1 || o.micro_batch != 0 || o.offload_optimizer != "none" ||
        o.offload_param != "none" || o.param_dtype != "bf16" || o.grad_dtype != "bf16")
      return absl::InvalidArgumentError(
          "with --deepspeed the stage, micro-batch, dtypes and offload come from the ds_config; "
          "drop --stage, --micro_batch, --param_dtype, --grad_dtype and --offload_*");
    ZT_ASSIGN_OR_RETURN(const std::string text,
                        read_file(o.deepspeed, "the DeepSpeed config (--deepspeed)"));
    ZT_ASSIGN_OR_RETURN(ds,
                        resolve_run_config(text, dp, o.deepspeed,
                                           {.gradient_checkpointing = o.gradient_checkpointing}));
    ZT_ASSIGN_OR_RETURN(const ModelConfig c, preset(o.model));
    ZT_RETURN_IF_ERROR(checkpoint_every(*ds, c).status());  // number_checkpoints vs layers
    ZT_RETURN_IF_ERROR(zeropp_as_train_checks(*ds, o.deepspeed, dp, o.nodes));
    in = estimate_input(*ds, c, dp, (dp + o.nodes - 1) / o.nodes,
                        (int)ds->batch.train_micro_batch_size_per_gpu, o.seq_len);
    what = o.model + " with " + o.deepspeed;
  } else {
    if (!o.model.empty()) {
      ZT_ASSIGN_OR_RETURN(const ModelConfig c, preset(o.model));
      in.unit_numel = unit_numels(c);
      in.model = c;
      what = o.model;
    } else {
      in.psi = o.params;
      what = "a model";
    }
    in.dp = dp;
    ZT_ASSIGN_OR_RETURN(in.param_dtype, parse_dtype(o.param_dtype));
    ZT_ASSIGN_OR_RETURN(in.grad_dtype, parse_dtype(o.grad_dtype));
    ZT_ASSIGN_OR_RETURN(in.offload_optimizer, parse_offload_device(o.offload_optimizer));
    ZT_ASSIGN_OR_RETURN(in.offload_param, parse_offload_device(o.offload_param));
    in.micro_batch = o.micro_batch;
    in.seq_len = o.seq_len;
    in.checkpoint_every = o.gradient_checkpointing ? 1 : 0;
  }
  // A GPU keeps activations in the working dtype, the CPU backend in fp32
  // (Backend::activation_dtype).
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto")
    return absl::InvalidArgumentError("--device '" + o.device +
                                      "' is not one of auto, cpu, cuda (estimate: cuda counts "
                                      "activations in the working dtype, as a GPU keeps them)");
  if (o.device == "cuda") use_gpu_activations(in);
  if (in.model && o.seq_len > in.model->max_seq_len && in.model->learned_positions)
    return absl::InvalidArgumentError("--seq_len " + std::to_string(o.seq_len) + " exceeds " +
                                      o.model + "'s " + std::to_string(in.model->max_seq_len) +
                                      " positions");
  return in;
}

absl::StatusOr<std::string> memory_text(const EstimateOptions& o) {
  std::string what;
  const int dp = o.dp > 0 ? o.dp : o.gpus_per_node * o.nodes;
  std::optional<DsConfig> ds;
  ZT_ASSIGN_OR_RETURN(EstimateInput in, memory_input(o, dp, ds, what));
  std::vector<int> stages;
  if (ds) {
    stages = {in.stage};
  } else if (o.stage == -1) {
    // offload_param only exists in stage 3; show that stage alone then.
    stages = in.offload_param != OffloadDevice::kNone ? std::vector<int>{3}
                                                      : std::vector<int>{0, 1, 2, 3};
  } else {
    stages = {o.stage};
  }
  std::vector<MemoryEstimate> es;
  for (int s : stages) {
    in.stage = s;
    ZT_ASSIGN_OR_RETURN(MemoryEstimate e, estimate_memory(in));
    es.push_back(e);
  }
  const MemoryEstimate& e0 = es.front();
  std::string out = "Memory per rank for " + what + ": Psi = " + with_commas(e0.psi);
  if (in.unit_numel.size() > 1) out += " in " + std::to_string(in.unit_numel.size()) + " units";
  out += ", N_d = " + std::to_string(in.dp) + "; params " +
         std::string(dtype_name(in.param_dtype)) + ", grads " +
         std::string(dtype_name(in.grad_dtype)) +
         ", optimizer K = " + std::to_string(e0.optimizer_k) + "; offload_optimizer " +
         std::string(offload_device_name(in.offload_optimizer)) + ", offload_param " +
         std::string(offload_device_name(in.offload_param)) + ".\n";
  if (in.model && in.micro_batch > 0 && in.seq_len > 0)
    out +=
        "Activations: micro-batch " + std::to_string(in.micro_batch) + " x seq " +
        std::to_string(in.seq_len) + ", " + std::string(dtype_name(in.activation_dtype)) +
        (in.activation_dtype == DType::kF32 ? "" : " (a GPU's)") +
        ", as the Transformer allocates them" +
        (in.checkpoint_every > 0 ? ", checkpointing every " + std::to_string(in.checkpoint_every) +
                                       " block(s)" + (in.cpu_checkpointing ? " in host memory" : "")
                                 : std::string()) +
        ".\n";
  else if (in.model)
    out += "Activations: not counted; give --micro_batch and --seq_len.\n";
  out += "GiB = 2^30 bytes. Model states are exact (per-unit padding to a multiple of N_d);\n";
  const bool stage3 = std::find(stages.begin(), stages.end(), 3) != stages.end();
  out += in.unit_numel.empty()
             ? "workspace and activations need --model (unit sizes, shapes).\n\n"
             : std::string("workspace is the transient peak estimate (the ") +
                   (in.weight_dtype != in.param_dtype ? "fp32 view and " : "fp32 ") +
                   "gradient of the unit in use" +
                   (stage3 ? "; at stage 3, " + std::to_string(in.live_units) + " gathered unit" +
                                 (in.live_units == 1 ? "" : "s")
                           : std::string()) +
                   ").\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-22s", "GiB per rank");
  out += buf;
  for (int s : stages) {
    std::snprintf(buf, sizeof buf, " %12s", ("stage " + std::to_string(s)).c_str());
    out += buf;
  }
  out += "\n";
  auto row = [&](const std::string& name, auto get) {
    std::snprintf(buf, sizeof buf, "%-22s", name.c_str());
    out += buf;
    for (const MemoryEstimate& e : es) {
      std::snprintf(buf, sizeof buf, " %12s", gib(get(e)).c_str());
      out += buf;
    }
    out += "\n";
  };
  using M = MemCategory;
  for (M c :
       {M::kParams, M::kGrads, M::kOptimizer, M::kActivations, M::kCommBuffers, M::kWorkspace})
    row("device " + std::string(mem_category_name(c)),
        [c](const MemoryEstimate& e) { return e.dev(c); });
  row("device model states", [](const MemoryEstimate& e) { return e.device_model_states(); });
  row("device total", [](const MemoryEstimate& e) { return e.device_total(); });
  for (M c : {M::kParams, M::kGrads, M::kOptimizer, M::kActivations, M::kPinnedHost})
    row("host " + std::string(mem_category_name(c)),
        [c](const MemoryEstimate& e) { return e.hst(c); });
  row("host total", [](const MemoryEstimate& e) { return e.host_total(); });
  row("nvme", [](const MemoryEstimate& e) { return e.nvme(); });
  const int64_t device =
      o.device_memory > 0 ? o.device_memory : (ds ? ds->zerotrain.device_memory_limit : 0);
  const int64_t host =
      o.host_memory > 0 ? o.host_memory : (ds ? ds->zerotrain.host_memory_limit : 0);
  if (device > 0 || host > 0) {
    out += "\n";
    for (size_t k = 0; k < es.size(); ++k) {
      if (es.size() > 1) out += "stage " + std::to_string(stages[k]) + " ";
      out += fit_text(es[k], device, host);
    }
  }
  return out;
}

// "fits" lines for --device_memory / --host_memory (or the ds_config's device limit).
std::string fit_text(const MemoryEstimate& e, int64_t device, int64_t host) {
  std::string out;
  auto line = [&](const char* pool, int64_t need, int64_t have) {
    out += absl::StrCat(pool, ": ", format_bytes(need), " of ", format_bytes(have), " -> ",
                        need <= have ? "fits" : "does NOT fit", "\n");
  };
  if (device > 0) line("device", e.device_total(), device);
  if (host > 0) line("host", e.host_total(), host);
  return out;
}

}  // namespace

absl::StatusOr<std::string> estimate_text(const EstimateOptions& o) {
  if (o.dp == 0 && int64_t{o.gpus_per_node} * o.nodes > std::numeric_limits<int>::max())
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus_per_node x --nodes = ", int64_t{o.gpus_per_node} * o.nodes,
                     " ranks, more than an int counts: give fewer"));
  // 0 is the flag's default: the profile's rate.
  if (o.inter_node_gbps != 0 && (!o.time || !std::isfinite(o.inter_node_gbps) ||
                                 o.inter_node_gbps < 1e-3 || o.inter_node_gbps > 1e6))
    return absl::InvalidArgumentError(absl::StrCat(
        "--inter_node_gbps ", o.inter_node_gbps,
        ": the network between nodes for --time, in Gbit/s a rank, from 0.001 to 1000000"));
  if (o.time || o.recommend) {
    if (o.time && o.recommend) return absl::InvalidArgumentError("give --time or --recommend");
    if (o.dp < 0 || o.gpus_per_node < 1 || o.nodes < 1)
      return absl::InvalidArgumentError("--dp, --gpus_per_node and --nodes must be >= 1");
    if (o.recommend && o.nodes > 1)
      return absl::InvalidArgumentError(
          "--recommend models one node (its ranks share NVLink or its memory); give --dp for the "
          "ranks of one node");
    if (o.stage != -1 || o.offload_optimizer != "none" || o.offload_param != "none" ||
        o.micro_batch != 0 || !o.table.empty() || !o.formula.empty())
      return absl::InvalidArgumentError(
          "--time takes the layout from --deepspeed, --recommend tries every one: drop --stage, "
          "--offload_*, --micro_batch, --table and --formula");
    if (o.device == "cuda" && o.hardware == "this")
      return absl::InvalidArgumentError(
          "--hardware this measures this machine's CPU backend; for a GPU name its profile "
          "(--hardware h100, ...)");
    ZT_ASSIGN_OR_RETURN(const ModelConfig c, preset(o.model));
    if (o.seq_len > c.max_seq_len && c.learned_positions)
      return absl::InvalidArgumentError("--seq_len " + std::to_string(o.seq_len) + " exceeds " +
                                        o.model + "'s " + std::to_string(c.max_seq_len) +
                                        " positions");
    return o.time ? time_text(o) : recommend_text(o);
  }
  if (!o.table.empty()) {
    if (o.table == "zero-paper") return zero_paper_table();
    if (o.table == "zero-offload") return render_paper_tables(zero_offload_tables());
    if (o.table == "zero-infinity") return render_paper_tables(zero_infinity_tables());
    return absl::InvalidArgumentError("--table " + o.table +
                                      " is unknown; use zero-paper, zero-offload or zero-infinity");
  }
  if (o.gpus_per_node < 1 || o.nodes < 1)
    return absl::InvalidArgumentError("--gpus_per_node and --nodes must be >= 1");
  if (o.dp < 0) return absl::InvalidArgumentError("--dp must be >= 1 (0: gpus_per_node x nodes)");
  if (o.stage < -1 || o.stage > 3)
    return absl::InvalidArgumentError("--stage " + std::to_string(o.stage) +
                                      " is not a ZeRO stage; use 0, 1, 2 or 3");
  if (o.micro_batch < 0 || o.seq_len < 0)
    return absl::InvalidArgumentError("--micro_batch and --seq_len must be >= 0");
  if (o.model.empty() && o.params <= 0)
    return absl::InvalidArgumentError("estimate needs --model PRESET or --params N (N > 0)");
  if (!o.model.empty() && o.params > 0)
    return absl::InvalidArgumentError("give --model or --params, not both");
  if (o.largest_layer_params < 0)
    return absl::InvalidArgumentError("--largest_layer_params must be >= 0");
  if (!o.formula.empty()) {
    if (o.formula != "deepspeed")
      return absl::InvalidArgumentError("--formula " + o.formula +
                                        " is unknown; use --formula deepspeed");
    return deepspeed_text(o);
  }
  return memory_text(o);
}

absl::Status run_estimate(const EstimateOptions& o) {
  ZT_ASSIGN_OR_RETURN(const std::string text, estimate_text(o));
  std::fputs(text.c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace zt

// A step-time model (`zerotrain estimate --time`): each phase of one optimizer step predicted from
// its work and the hardware's rates, then what overlaps what, the step, tokens/s and MFU. The
// shape of the "T_total = T_compute + T_comm + T_offload" model ZeRO-Offload's material teaches,
// with zerotrain's own byte counts:
//   compute    training FLOPs (6 Ψ_matmul + 12 L T C a token, PaLM's count; + the forward again
//              with activation checkpointing) / (the device's GEMM rate x efficiency), or on
//              the CPU backend a micro-batch's time measured at the run's shape;
//   comm       the bus bytes of the stage's collectives as the engine runs them (fp32 gradient
//              reductions each micro-batch: all-reduce 2(N-1)/N, reduce-scatter (N-1)/N; 16-bit
//              all-gathers (N-1)/N, after the step or, at stage 3, forward and backward) / the
//              link's bus bandwidth; over several nodes a collective of ranks on more than one
//              node runs at the network's rate (zero/comm.h "Links"), ZeRO++ and MiCS moving
//              their own bytes (link_bytes below; docs/zero.md);
//   copies     offload's device<->host bytes (the 16-bit gradient out, the 16-bit parameter in;
//              stage 3 parameter offload fetches every shard forward and backward) / PCIe;
//   optimizer  the update's bytes (the fp32 master and each state read and written, the gradient
//              in and, where the master is not the working copy, the parameter out: 28 a
//              parameter with two states and 16-bit ones, 20 with one) / the memory bandwidth
//              of where it runs; a whole-matrix rule's Newton-Schulz products on each rank's
//              share of the hidden matrices at the fp32 GEMM rate;
//   nvme       the optimizer state read and written (24 bytes a parameter with two states, 16
//              with one) / the drive.
// On a GPU the reductions overlap the backward (overlap_comm), stage 3's gathers the compute
// (prefetch), and the delayed update hides the CPU step and its copies behind the next step;
// stage 1-2's all-gather after the step is exposed; on the CPU backend the phases run one after
// another on the rank's compute threads, and ranks on one node share its cores and memory
// bandwidth. The offload pipeline (stages 2-3) runs the CPU step on optimizer threads of its
// own beside the next step, unit by unit: the next forward waits for each unit's update (the
// embedding's at least), and on the
// CPU backend the compute beside it runs at the speed a busy neighbouring core leaves it
// (Hardware::busy_core_slowdown).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/optimizer_math.h"
#include "zero/offload_device.h"
#include "zero/zeropp.h"

namespace zt {

// Rates of one machine: a node of `devices` devices (GPUs, or for the CPU backend the node
// itself, shared by its ranks). FLOP/s and bytes/s.
struct Hardware {
  std::string name;
  bool cpu_backend = false;  // the CPU backend: devices share the node's cores and memory
  double peak_flops = 0;     // per device: dense bf16 tensor-core rate (fp32 GEMM on a CPU)
  double efficiency = 0.5;   // the share of peak_flops a training step's kernels reach
  double device_bw = 0;      // per device memory bandwidth
  double host_bw = 0;        // the node's host memory bandwidth (the CPU optimizer streams it)
  double pcie_bw = 0;        // per device and direction, host<->device
  double link_bw = 0;        // per device bus bandwidth of collectives within the node
  double nvme_bw = 0;        // the node's drive, read or write
  std::string source;        // where the numbers come from
  // Per device, a direction, between nodes (its share of the node's network), as `estimate
  // --time --inter_node_gbps` sets it; 0: kInterNodeDefault (inter_node() gives the rate).
  double inter_node_bw = 0;
  double inter_node() const;
  // A GEMM of kSkinnyRows rows (a short micro-batch's) on the CPU backend, FLOP/s, every thread
  // (0: not known, peak_flops at every size); between kSkinnyRows and kFullRows rows the rate
  // is taken log-linearly between the two (StepTime::compute).
  double skinny_flops = 0;
  // The CPU backend's threads (0: not known, every rank's phases at the node's rates above).
  int cores = 0;                  // the node's
  double thread_flops = 0;        // one thread's GEMM rate at kFullRows (0: peak / cores)
  double thread_bw = 0;           // bytes/s one thread's copy streams
  double busy_core_slowdown = 1;  // a one-thread GEMM's time beside a busy core / alone
  // A GPU's fp32 GEMM rate on CUDA cores, FLOP/s (0: peak_flops, as on the CPU backend).
  double fp32_flops = 0;
};
// The rows (tokens of a micro-batch) of the two GEMMs the CPU probe times.
inline constexpr int kSkinnyRows = 32, kFullRows = 2048;
// Between nodes when nothing says otherwise: a 400 Gb/s InfiniBand NIC per GPU (DGX H100).
inline constexpr double kInterNodeDefault = 50e9;
inline double Hardware::inter_node() const {
  return inter_node_bw > 0 ? inter_node_bw : kInterNodeDefault;
}

// Built-in profiles: "h100", "h200", "a100-80gb", "a100-40gb", "v100-32gb", "rtx3070", "rtx4090"
// (vendor datasheets; PCIe by generation), and "cpu" (a stated 2-core reference; use
// `--hardware this` to measure). Error lists them.
absl::StatusOr<Hardware> hardware_profile(const std::string& name);
std::vector<std::string> hardware_profile_names();

struct StepTimeInput {
  ModelConfig model;
  int micro_batch = 1, seq_len = 0, gradient_accumulation = 1;
  int stage = 0, ranks = 1;  // N_d
  int nodes = 1;             // the ranks spread evenly over them (ranks / nodes a node)
  ZeroppOptions zeropp;      // ZeRO++ (stage 3) and MiCS's groups (zero/zeropp.h)
  OffloadDevice offload_optimizer = OffloadDevice::kNone, offload_param = OffloadDevice::kNone;
  bool checkpointing = false, overlap_comm = true, delayed_update = false;
  // zero_optimization.reduce_scatter false: stages 1-3 all-reduce the gradients and keep the
  // shard (DeepSpeed's option: twice the bytes), and qgZ, which replaces the reduce-scatter
  // only, does not run.
  bool reduce_scatter = true;
  int param_bytes = 2, grad_bytes = 2;  // 16-bit working parameters and gradients
  // The ds_config's optimizer: its state bytes and, for a whole-matrix rule, its Newton-Schulz
  // products (the optimizer phase above). Value-initialised: the first kind.
  OptimizerKind optimizer{};
  // The offload pipeline runs (trainer/engine_options.h offload_pipeline_runs).
  bool offload_pipeline = false;
  // The CPU backend: a rank's compute threads (--threads) and, off the training thread (the
  // pipeline, the delayed update), its optimizer threads; 0: all the rank's cores.
  int compute_threads = 0, optimizer_threads = 0;
  // The CPU backend: one micro-batch's forward and backward measured at this shape on the
  // compute threads as the run runs it, the gradients' way out and stage 3's offloaded
  // parameters' way in included (trainer/hardware_probe.h measure_micro_batch), seconds; 0: from
  // the FLOPs at the GEMM rate x efficiency and the copies from their bytes.
  double micro_batch_seconds = 0;
};

struct StepTime {
  double compute = 0, comm = 0, copies = 0, optimizer = 0, nvme = 0;  // seconds a step
  // The bus bytes a rank's collectives move a step, within its node and between nodes.
  double intra_node_bytes = 0, inter_node_bytes = 0;
  double step = 0, tokens_per_s = 0, mfu = 0;
  std::vector<std::string> overlaps;  // what was hidden behind what, in words
};

// Training FLOPs of one token (forward and backward; PaLM's 6 Ψ_matmul + 12 L T C, with the
// head's matmul in Ψ_matmul and the embedding lookup not; C there is the attention's width,
// n_head head_dim).
double training_flops_per_token(const ModelConfig& c, int seq_len);
// A whole-matrix rule's Newton-Schulz FLOPs a step over every hidden matrix
// (model/newton_schulz.h): five iterations of A = X X^T (2 r^2 w), A A (2 r^3) and B X (2 r^2 w) on
// the wide orientation, r = min(rows, cols), w = max.
double newton_schulz_flops(const ModelConfig& c);

// Bus bytes a rank's collectives move in one step, within its node and between nodes, for the
// stage and ZeRO++/MiCS options of `in` over Ψ = psi parameters: `reduce` the gradients' and
// `gather` the parameters'. Ψ-level (no padding; at stage 3 every parameter gathered for the
// forward and the backward, the paper's 3Ψ).
struct LinkBytes {
  double intra = 0, inter = 0;
};
struct StepLinkBytes {
  LinkBytes reduce, gather;
};
StepLinkBytes link_bytes(const StepTimeInput& in, double psi);

// The prediction for one step. Errors: a rank count or shape below 1, ranks that do not split
// evenly over the nodes.
absl::StatusOr<StepTime> predict_step(const StepTimeInput& in, const Hardware& hw);

}  // namespace zt

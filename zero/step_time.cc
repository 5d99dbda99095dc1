#include "zero/step_time.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/layout.h"

namespace zt {
namespace {

// Per device and direction, the rate a pinned copy reaches over PCIe of each generation x16
// (ZeRO-Infinity measures ~12 GB/s on gen3).
constexpr double kPcie3 = 12e9, kPcie4 = 25e9, kPcie5 = 50e9;

std::vector<Hardware> profiles() {
  // GPUs: dense bf16 tensor-core FLOP/s with fp32 accumulation and memory bandwidth from the
  // vendor datasheets; collectives at ~80% of NVLink's per-direction rate; the host a server's
  // (~150 GB/s) or a desktop's (~50 GB/s), NVMe a PCIe gen4 drive (~6 GB/s).
  std::vector<Hardware> h = {
      {"h100", false, 989e12, 0.5, 3.35e12, 150e9, kPcie5, 360e9, 6e9,
       "H100 SXM datasheet; NVLink 4 450 GB/s a direction; PCIe gen5"},
      {"h200", false, 989e12, 0.5, 4.8e12, 150e9, kPcie5, 360e9, 6e9,
       "H200 SXM datasheet; NVLink 4; PCIe gen5"},
      {"a100-80gb", false, 312e12, 0.5, 2.0e12, 150e9, kPcie4, 240e9, 6e9,
       "A100 80GB SXM datasheet; NVLink 3 300 GB/s a direction; PCIe gen4"},
      {"a100-40gb", false, 312e12, 0.5, 1.555e12, 150e9, kPcie4, 240e9, 6e9,
       "A100 40GB SXM datasheet; NVLink 3; PCIe gen4"},
      {"v100-32gb", false, 125e12, 0.5, 0.9e12, 100e9, kPcie3, 120e9, 3e9,
       "V100 SXM2 datasheet (fp16 tensor cores); NVLink 2 150 GB/s a direction; PCIe gen3"},
      {"rtx3070", false, 40.6e12, 0.5, 448e9, 50e9, kPcie4, 20e9, 6e9,
       "GeForce RTX 3070 (GA104: fp16 tensor with fp32 accumulation); no NVLink: PCIe "
       "peer-to-peer"},
      {"rtx4090", false, 165e12, 0.5, 1008e9, 50e9, kPcie4, 20e9, 6e9,
       "GeForce RTX 4090 (AD102: fp16 tensor with fp32 accumulation); no NVLink: PCIe "
       "peer-to-peer"},
      // The CPU backend on the 2-core development machine (`--hardware this` measures any):
      // OpenBLAS sgemm 375 GFLOP/s, of which its forward and backward reach 0.65 (gpt2-124m,
      // stage 0, 4 x 128 tokens: 1.55 s); a threaded copy 32 GB/s; the drive through the
      // swapper 5.0 GB/s (docs/estimator.md); one thread's CPU optimizer 26 GB/s
      // (benchmarks/cpu_adam_bench.cc), and its forward and backward 1.1x slower beside a
      // spinning core (benchmarks/offload_pipeline.py).
      {"cpu", true, 375e9, 0.65, 32e9, 32e9, 32e9, 32e9, 5e9,
       "the 2-core development machine, measured (docs/estimator.md)", 0, 0, 2, 0, 26e9, 1.1},
  };
  // fp32 GEMMs on CUDA cores (no TF32: Muon's Newton-Schulz, model/newton_schulz.h), from the
  // same datasheets; the CPU's peak is its fp32 rate already.
  for (auto [name, rate] : {std::pair{"h100", 67e12},
                            {"h200", 67e12},
                            {"a100-80gb", 19.5e12},
                            {"a100-40gb", 19.5e12},
                            {"v100-32gb", 15.7e12},
                            {"rtx3070", 20.3e12},
                            {"rtx4090", 82.6e12}})
    for (Hardware& x : h)
      if (x.name == name) x.fp32_flops = rate;
  return h;
}

// Matmul parameters of c (every 2-D weight the GEMMs read, the untied or tied head included,
// the embedding lookup excluded).
double matmul_params(const ModelConfig& c) {
  const ParamLayout layout(c);
  double psi = (double)layout.total_numel() - (double)layout.units()[0].numel;  // no embedding
  if (c.tied_embeddings) psi += (double)c.vocab_size * c.hidden;  // the head reads it again
  return psi;
}

// The offload pipeline's exposed update: the next forward reaches unit u only once the
// optimizer threads, updating the units in forward order from the step's end, have finished it.
// Each unit's update takes its share of Ψ of `update` seconds, its forward its share of the
// matmul parameters of `forward` seconds (the embedding's lookup none; a tied head's GEMM at
// the end). Seconds the forward waits in all: unit 0's update at least (gpt2-124m's embedding
// is a third of Ψ), more where updates fall behind the forward.
double pipeline_wait(const ModelConfig& c, double update, double forward) {
  const ParamLayout layout(c);
  const double psi = (double)layout.total_numel(), mm = matmul_params(c);
  double updated = 0, at = 0, forward_alone = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const double numel = (double)layout.units()[u].numel;
    double f = u == layout.embedding_unit() ? 0 : numel;
    if (u == layout.head_unit() && c.tied_embeddings) f += (double)c.vocab_size * c.hidden;
    updated += update * numel / psi;
    const double unit_forward = forward * f / mm;
    at = std::max(at, updated) + unit_forward;
    forward_alone += unit_forward;
  }
  return at - forward_alone;
}

}  // namespace

absl::StatusOr<Hardware> hardware_profile(const std::string& name) {
  for (const Hardware& h : profiles())
    if (h.name == name) return h;
  return absl::InvalidArgumentError(absl::StrCat("--hardware '", name, "' is unknown; use ",
                                                 absl::StrJoin(hardware_profile_names(), ", "),
                                                 " or this (measured here)"));
}

std::vector<std::string> hardware_profile_names() {
  std::vector<std::string> n;
  for (const Hardware& h : profiles()) n.push_back(h.name);
  return n;
}

double newton_schulz_flops(const ModelConfig& c) {
  const ParamLayout layout(c);
  double flops = 0;
  for (int u = 0; u < (int)layout.units().size(); ++u)
    for (const MatrixSlot& m : layout.hidden_matrices(u)) {
      const double r = (double)std::min(m.rows, m.cols), w = (double)std::max(m.rows, m.cols);
      flops += 5 * (4 * r * r * w + 2 * r * r * r);
    }
  return flops;
}

double training_flops_per_token(const ModelConfig& c, int seq_len) {
  return 6 * matmul_params(c) + 12.0 * c.n_layer * seq_len * c.attn_dim();
}

StepLinkBytes link_bytes(const StepTimeInput& in, double psi) {
  const int N = in.ranks, M = std::max(1, in.nodes), L = std::max(1, N / M);
  const double P = in.param_bytes, A = in.gradient_accumulation;
  const auto f = [](double k) { return (k - 1) / k; };  // a ring's share of the buffer a rank sends
  // Where a collective over groups of `ranks` consecutive ranks runs: between nodes once some
  // group spans two (more ranks than a node holds, or groups not aligned to the nodes, as 4 of
  // 6 a node: ranks 4-7 span nodes 0 and 1; the step waits for the slowest group).
  const auto add = [&](LinkBytes& b, int ranks, double bytes) {
    (M > 1 && (ranks > L || L % ranks != 0) ? b.inter : b.intra) += bytes;
  };
  StepLinkBytes b;
  if (N == 1) return b;
  const ZeroppOptions& z = in.zeropp;
  // MiCS: states sharded over S ranks, replicated across N / S groups.
  const int S = sharding_group_size(z, N);
  const double reductions = in.stage == 1 ? 1 : A;  // stage 1 reduces once a step
  if (in.stage == 0) {
    add(b.reduce, N, 2 * f(N) * psi * 4 * A);
    return b;
  }
  if (in.stage == 3 && z.quantized_gradients && in.reduce_scatter) {  // qgZ: int4, node, across
    // Bytes an element: the int4 value and its share of the block's fp32 scale.
    const double q = kQgzBits / 8.0 + 4.0 / kQgzBlock;
    b.reduce.intra += f(L) * psi * q * A;
    if (M > 1) b.reduce.inter += f(M) * psi / L * q * A;
  } else {  // a reduce-scatter, or an all-reduce (twice the bytes) with reduce_scatter false
    add(b.reduce, S, (in.reduce_scatter ? 1 : 2) * f(S) * psi * 4 * reductions);
  }
  if (S < N) add(b.reduce, N, 2 * f(N / S) * psi / S * 4 * reductions);  // MiCS's second hop
  if (in.stage < 3) {
    add(b.gather, S, f(S) * psi * P);  // the updated slices, once after the step
    return b;
  }
  const double forward = z.quantized_weights ? kQwzBits / 8.0 + 4.0 / kQwzBlock : P;  // qwZ
  add(b.gather, S, f(S) * psi * forward * A);
  if (z.hpz_partition_size > 1)  // hpZ: the backward within its group, unquantized
    add(b.gather, z.hpz_partition_size, f(z.hpz_partition_size) * psi * P * A);
  else
    add(b.gather, S, f(S) * psi * forward * A);
  return b;
}

absl::StatusOr<StepTime> predict_step(const StepTimeInput& in, const Hardware& hw) {
  if (in.ranks < 1 || in.micro_batch < 1 || in.seq_len < 1 || in.gradient_accumulation < 1)
    return absl::InvalidArgumentError(
        "estimate --time needs ranks, micro-batch, seq_len and "
        "gradient accumulation of at least 1");
  if (in.nodes < 1 || in.ranks % in.nodes != 0)
    return absl::InvalidArgumentError(absl::StrCat("estimate --time: ", in.ranks,
                                                   " ranks do not split evenly over ", in.nodes,
                                                   " nodes; give --dp a multiple of --nodes"));
  const ModelConfig& c = in.model;
  const double N = in.ranks, psi = (double)ParamLayout(c).total_numel();
  const double tokens = (double)in.micro_batch * in.seq_len * in.gradient_accumulation;
  // The CPU backend's ranks share the node: each gets 1/N of its cores and memory bandwidth.
  const double share = hw.cpu_backend ? N : 1;
  // Threads of the CPU backend, where the hardware says how many cores the node has: the
  // compute at min(the rank's share of the GEMM rate, its threads' own), a stream at min(the
  // rank's share of the node's bandwidth, its threads' own).
  const int rank_cores = hw.cpu_backend && hw.cores > 0 ? std::max(1, hw.cores / in.ranks) : 0;
  const auto threads_of = [&](int given) { return given > 0 ? given : rank_cores; };
  const auto stream_bw = [&](int threads) {
    const double node = hw.host_bw / share;
    return rank_cores && hw.thread_bw > 0 ? std::min(node, hw.thread_bw * threads) : node;
  };
  const int compute_threads = threads_of(in.compute_threads);
  StepTime t;
  double flops = training_flops_per_token(c, in.seq_len) * tokens;
  if (in.checkpointing) flops += flops / 3;  // the forward again
  double gemm_flops = hw.peak_flops;         // at the micro-batch's rows (Hardware::skinny_flops)
  const double rows = (double)in.micro_batch * in.seq_len;
  if (hw.skinny_flops > 0 && rows < kFullRows) {
    const double x = std::log(std::max<double>(rows, kSkinnyRows) / kSkinnyRows) /
                     std::log((double)kFullRows / kSkinnyRows);
    gemm_flops = hw.skinny_flops * std::pow(hw.peak_flops / hw.skinny_flops, x);
  }
  double rank_flops = gemm_flops / share;
  if (rank_cores) {  // its threads' rate: one thread's (or the node's per core) times threads
    const int threads = std::min(compute_threads, rank_cores);
    const double per_thread =
        hw.thread_flops > 0 ? hw.thread_flops * gemm_flops / hw.peak_flops : gemm_flops / hw.cores;
    rank_flops = std::min(rank_flops, per_thread * threads);
  }
  const bool timed = hw.cpu_backend && in.micro_batch_seconds > 0;  // the micro-batch timed
  t.compute = timed ? in.micro_batch_seconds * in.gradient_accumulation *
                          (in.checkpointing ? 4.0 / 3 : 1.0)  // the forward again
                    : flops / (rank_flops * hw.efficiency);
  // Collectives: bus bytes a rank moves (nccl-tests' busbw convention). The engine reduces
  // gradients in fp32 (4 bytes) on every micro-batch at stages 0, 2 and 3 (stage 1 once, at the
  // accumulation boundary), and gathers the 16-bit parameters once after the step (stages 1-2)
  // or in each micro-batch's forward and backward (stage 3).
  const double P = in.param_bytes, G = in.grad_bytes, A = in.gradient_accumulation;
  const StepLinkBytes lb = link_bytes(in, psi);
  t.intra_node_bytes = lb.reduce.intra + lb.gather.intra;
  t.inter_node_bytes = lb.reduce.inter + lb.gather.inter;
  // Seconds: within the node at the link's rate, between nodes at the network's.
  const double link = hw.link_bw / share, inter = hw.inter_node() / share;
  const auto seconds = [&](const LinkBytes& b) { return b.intra / link + b.inter / inter; };
  const double reduce = seconds(lb.reduce), gather = seconds(lb.gather);
  t.comm = reduce + gather;
  // Offload copies, per rank: the owned shard's gradient out (16-bit on the first micro-batch,
  // fp32 on the others: docs/offload.md; stage 1 the fp32 reduced shard once) and the updated
  // parameter in; with parameter offload every shard fetched in each micro-batch's forward and
  // backward.
  // A micro-batch timed on the CPU backend has timed the gradients' way out at stages 2-3
  // (stage 1's reduced shard goes out in the step) and the parameter offload's way in: the
  // updated parameters' way back is left, except where the update off the training thread
  // writes the working copy the CPU backend's device memory is (the pipeline; the delayed
  // update's second working copy at N_d = 1, stages 1-2: Engine::swaps_params).
  const double owned = in.stage == 0 ? psi : psi / N;
  const bool offloaded = in.offload_optimizer != OffloadDevice::kNone;
  const bool off_thread = offloaded && (in.delayed_update || in.offload_pipeline);
  const bool written_in_place = hw.cpu_backend && off_thread &&
                                in.offload_param == OffloadDevice::kNone &&
                                (!in.delayed_update || (N == 1 && in.stage <= 2));
  double copy = 0;
  if (offloaded)
    copy += (timed && in.stage >= 2 ? 0
             : in.stage == 1        ? owned * 4
                                    : owned * G + owned * 4 * (A - 1)) +
            (written_in_place ? 0 : owned * P);
  if (in.offload_param != OffloadDevice::kNone && !timed) copy += 2 * psi / N * P * A;
  t.copies = copy / (hw.cpu_backend ? stream_bw(compute_threads) : hw.pcie_bw);
  // The update's bytes for each parameter it owns, on the host when offloaded (the node's
  // bandwidth shared by its ranks), else on the device; off the training thread (the pipeline,
  // the delayed update) on the optimizer threads, else on the compute threads.
  const bool on_host = hw.cpu_backend || offloaded;
  const double host_bw =
      stream_bw(off_thread ? threads_of(in.optimizer_threads) : compute_threads) * share / N;
  // The fp32 master and each state read and written, the gradient read, and, where the master
  // is not the working copy, the working copy written.
  const bool apart = master_apart(P == 4, in.offload_optimizer, in.offload_param);
  const double state_bytes = optimizer_bytes_per_param(in.optimizer, false);  // master + states
  t.optimizer =
      owned * (2 * state_bytes + G + (apart ? P : 0)) / (on_host ? host_bw : hw.device_bw);
  // A whole-matrix rule orthogonalises on the device (the CPU backend's cores) in fp32 whatever
  // holds its state: each rank the matrices its slice touches, about 1/N of them past stage 0.
  if (optimizer_info(in.optimizer).whole_matrices) {
    const double fp32 = hw.fp32_flops > 0 ? hw.fp32_flops / share : rank_flops;
    t.optimizer += newton_schulz_flops(c) / (in.stage == 0 ? 1 : N) / (fp32 * hw.efficiency);
  }
  if (in.offload_optimizer == OffloadDevice::kNvme)
    t.nvme = owned * N * 2 * state_bytes / hw.nvme_bw;
  if (in.offload_param == OffloadDevice::kNvme) t.nvme += 2 * psi * P * A / hw.nvme_bw;
  // What overlaps what.
  double step = t.compute;
  // The pipeline's next forward waits for each unit's update (pipeline_wait; the first
  // micro-batch's forward, a third of its forward and backward, a quarter with the forward
  // again); the delayed update's next step needs none of it.
  const double first_forward =
      t.compute / in.gradient_accumulation / (in.checkpointing ? 4.0 : 3.0);
  if (hw.cpu_backend && off_thread) {
    const double host_side = t.optimizer + t.nvme, compute_side = t.compute + t.comm + t.copies;
    const double wait = in.delayed_update ? 0 : pipeline_wait(c, host_side, first_forward);
    // The compute runs as beside a busy core while the update runs and it does not wait.
    const double beside = std::min(compute_side, std::max(0.0, host_side - wait));
    step = std::max(compute_side + wait + beside * (hw.busy_core_slowdown - 1), host_side);
    t.overlaps.push_back(in.delayed_update
                             ? "CPU step on its own threads beside the next step (delayed update)"
                             : "CPU step on its own threads beside the next step, unit by unit "
                               "(offload pipeline; the next forward waits for each unit's update)");
  } else if (hw.cpu_backend) {
    step += t.comm + t.copies + t.optimizer + t.nvme;
    t.overlaps.push_back("CPU backend: every phase on the same cores, one after another");
  } else {
    // The reductions run behind the backward (2/3 of the compute without recomputation) with
    // overlap_comm; stage 3's gathers behind the unit before (prefetch); stage 1-2's all-gather
    // after the step waits.
    const double backward = t.compute * (in.checkpointing ? 0.5 : 2.0 / 3.0);
    double exposed = 0;
    if (in.overlap_comm) {
      exposed += std::max(0.0, reduce - backward);
      t.overlaps.push_back("gradient reductions behind the backward (overlap_comm)");
    } else {
      exposed += reduce;
    }
    if (in.stage == 3) {
      exposed += std::max(0.0, gather - (t.compute - std::min(t.compute, reduce)));
      t.overlaps.push_back("stage 3's gathers behind the unit before (prefetch)");
    } else {
      exposed += gather;
    }
    step += exposed;
    // (Off the training thread, stage 1's reduced fp32 shard lands in host memory on the copy
    // stream as the backward goes on, as stages 2-3's shards do: zero/gradients.h.)
    const double host_side = t.copies + t.optimizer + t.nvme;
    if (in.delayed_update && offloaded) {
      step = std::max(step, host_side);
      t.overlaps.push_back("CPU step, its copies and NVMe behind the next step (delayed update)");
    } else if (off_thread) {
      step = std::max(step + pipeline_wait(c, host_side, first_forward), host_side);
      t.overlaps.push_back(
          "CPU step, its copies and NVMe behind the next step, unit by unit (offload pipeline; "
          "the next forward waits for each unit's update)");
    } else {
      step += host_side;
    }
  }
  t.step = step;
  t.tokens_per_s = tokens * N / step;
  // MFU: the model's FLOPs (without recomputation) over the devices' peak.
  t.mfu = training_flops_per_token(c, in.seq_len) * tokens / step / (hw.peak_flops / share);
  return t;
}

}  // namespace zt

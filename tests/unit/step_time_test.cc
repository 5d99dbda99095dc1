// zero/step_time.h by hand: the phases of a step from their work and the rates, and what overlaps
// what on a GPU and on the CPU backend.
#include "zero/step_time.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/memory.h"
#include "model/layout.h"
#include "trainer/hardware_probe.h"

namespace zt {
namespace {

Hardware toy(bool cpu) {
  Hardware h;
  h.name = "toy";
  h.cpu_backend = cpu;
  h.peak_flops = 1e12;
  h.efficiency = 0.5;
  h.device_bw = 1e12;
  h.host_bw = 100e9;
  h.pcie_bw = 10e9;
  h.link_bw = 50e9;
  h.nvme_bw = 2e9;
  return h;
}

// gpt2-124m, micro-batch 8 x 1024, stage 2 with the optimizer on the CPU, 4 ranks.
StepTimeInput gpt2_stage2_cpu_offload_on_4() {
  StepTimeInput in;
  in.model = *preset("gpt2-124m");
  in.micro_batch = 8;
  in.seq_len = 1024;
  in.stage = 2;
  in.ranks = 4;
  in.offload_optimizer = OffloadDevice::kCpu;
  return in;
}

// gpt2-124m: 6 Ψ_matmul + 12 L T C FLOPs a token, Ψ_matmul = Ψ - the token and position
// embedding + the tied head read again (V x C) = Ψ - 1024 x 768.
TEST(StepTime, FlopsPerTokenArePalmsCount) {
  const ModelConfig c = *preset("gpt2-124m");
  const double psi = (double)ParamLayout(c).total_numel();
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 1024),
                   6 * (psi - 1024.0 * 768) + 12.0 * 12 * 1024 * 768);
}

// The update's bytes follow the optimizer's states (model/optimizer_math.h): the fp32 master and
// each state read and written, the 16-bit gradient in and parameter out: AdamW 8 + 16 + 4 = 28,
// Lion and Adagrad (one state) 8 + 8 + 4 = 20. Muon's are AdamW's, plus Newton-Schulz on every
// hidden matrix: for gpt2-124m per block four 768 x 768 (q, k, v and the attention's output) and
// two 768 x 3072 (fc, fc_out), each five iterations of 4 r^2 w + 2 r^3 FLOPs, at the compute's
// rate; over 4 ranks a quarter of them.
TEST(StepTime, OptimizerPhaseFollowsTheOptimizer) {
  StepTimeInput in = gpt2_stage2_cpu_offload_on_4();
  const double psi = (double)ParamLayout(in.model).total_numel(), host = 100e9 / 4;
  const double r = 768, w = 3072;
  const double ns = 12 * (4 * 5 * 6 * r * r * r + 2 * 5 * (4 * r * r * w + 2 * r * r * r));
  EXPECT_DOUBLE_EQ(newton_schulz_flops(in.model), ns);
  for (auto [kind, bytes] : {std::pair{OptimizerKind::kAdamW, 28},
                             {OptimizerKind::kLion, 20},
                             {OptimizerKind::kAdagrad, 20},
                             {OptimizerKind::kMuon, 28}}) {
    in.optimizer = kind;
    const double muon = kind == OptimizerKind::kMuon ? ns / 4 / 0.5e12 : 0;
    EXPECT_DOUBLE_EQ(predict_step(in, toy(false))->optimizer, psi / 4 * bytes / host + muon)
        << optimizer_info(kind).name;
  }
  // Newton-Schulz runs in fp32: at the GPU's fp32 rate where the profile has one.
  Hardware fp32 = toy(false);
  fp32.fp32_flops = 0.1e12;
  EXPECT_DOUBLE_EQ(predict_step(in, fp32)->optimizer, psi / 4 * 28 / host + ns / 4 / 0.05e12);
  // fp32 parameters on the device are the master (zero/estimator.cc): nothing more is written,
  // 8 + 16 + 4 = 28 for AdamW; NVMe moves the state, 24 bytes with two states, 16 with one.
  in.optimizer = OptimizerKind::kAdamW;
  in.offload_optimizer = OffloadDevice::kNone;
  in.param_bytes = in.grad_bytes = 4;
  EXPECT_DOUBLE_EQ(predict_step(in, toy(false))->optimizer, psi / 4 * 28 / 1e12);
  in.param_bytes = in.grad_bytes = 2;
  in.offload_optimizer = OffloadDevice::kNvme;
  for (auto [kind, bytes] : {std::pair{OptimizerKind::kAdamW, 24}, {OptimizerKind::kLion, 16}}) {
    in.optimizer = kind;
    EXPECT_DOUBLE_EQ(predict_step(in, toy(false))->nvme, psi * bytes / 2e9);
  }
}

// Stage 2 with the optimizer on the CPU on 4 GPUs: compute F / (peak x efficiency); the
// reduce-scatter and all-gather move 3/4 x Ψ x 2 bytes each over the link; the copies Ψ/4 x
// (2 + 2) bytes over PCIe; Adam 28 bytes for each of its Ψ/4 parameters from host memory shared
// by the 4 ranks. overlap_comm hides the collectives behind the compute; the delayed update
// the host side.
TEST(StepTime, PhasesAndOverlapsOnAGpu) {
  StepTimeInput in = gpt2_stage2_cpu_offload_on_4();
  const double psi = (double)ParamLayout(in.model).total_numel();
  const StepTime t = *predict_step(in, toy(false));
  const double flops = training_flops_per_token(in.model, 1024) * 8 * 1024;
  EXPECT_DOUBLE_EQ(t.compute, flops / 0.5e12);
  const double reduce = 0.75 * psi * 4 / 50e9, gather = 0.75 * psi * 2 / 50e9;
  EXPECT_DOUBLE_EQ(t.comm, reduce + gather);
  EXPECT_DOUBLE_EQ(t.copies, psi / 4 * 4 / 10e9);
  EXPECT_DOUBLE_EQ(t.optimizer, psi / 4 * 28 / (100e9 / 4));
  // The fp32 reduce-scatter hides behind the backward (2/3 of the compute); the all-gather after
  // the step does not.
  EXPECT_NEAR(
      t.step,
      t.compute + std::max(0.0, reduce - t.compute * 2 / 3) + gather + t.copies + t.optimizer,
      1e-12);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 8 * 1024 * 4 / t.step);
  in.delayed_update = true;
  const StepTime d = *predict_step(in, toy(false));
  EXPECT_NEAR(d.step, std::max(t.step - t.copies - t.optimizer, t.copies + t.optimizer), 1e-12);
  // Gradient accumulation 4: the reductions and the offloaded gradient (fp32 after the first
  // micro-batch) four times, the all-gather and the parameters in once.
  in.delayed_update = false;
  in.gradient_accumulation = 4;
  const StepTime g = *predict_step(in, toy(false));
  EXPECT_DOUBLE_EQ(g.comm, 4 * reduce + gather);
  EXPECT_DOUBLE_EQ(g.copies, (psi / 4 * (2 + 3 * 4) + psi / 4 * 2) / 10e9);
}

// Two nodes of 4 GPUs at stage 3 in bf16, by hand (docs/zero.md's table, Ψ-level, bus bytes):
// plain stage 3 runs every collective across the nodes; ZeRO++ (qwZ, hpZ of 4, qgZ) gathers the
// forward in int8 + scales across, the backward within the node, and reduces in int4 + scales
// within the node then across on 1/4 of it; MiCS (groups of 4) keeps gathers and reduce-scatters
// in the node and all-reduces the fp32 shards across. Communication time is each link's bytes
// over its rate; ranks that do not split over the nodes are an error.
TEST(StepTime, LinkBytesPerModeOverTwoNodes) {
  StepTimeInput in;
  in.model = *preset("tiny-llama");
  in.micro_batch = 2;
  in.seq_len = 16;
  in.stage = 3;
  in.ranks = 8;
  in.nodes = 2;
  const double psi = 1e6, f8 = 7.0 / 8, f4 = 3.0 / 4, f2 = 1.0 / 2;
  StepLinkBytes b = link_bytes(in, psi);
  EXPECT_DOUBLE_EQ(b.reduce.inter, f8 * psi * 4);
  EXPECT_DOUBLE_EQ(b.gather.inter, 2 * f8 * psi * 2);
  EXPECT_EQ(b.reduce.intra + b.gather.intra, 0);
  in.zeropp = {.quantized_weights = true, .hpz_partition_size = 4, .quantized_gradients = true};
  b = link_bytes(in, psi);
  const double int4 = 0.5 + 4.0 / 128, int8 = 1 + 4.0 / 512;
  EXPECT_DOUBLE_EQ(b.reduce.intra, f4 * psi * int4);
  EXPECT_DOUBLE_EQ(b.reduce.inter, f2 * psi / 4 * int4);
  EXPECT_DOUBLE_EQ(b.gather.inter, f8 * psi * int8);
  EXPECT_DOUBLE_EQ(b.gather.intra, f4 * psi * 2);
  in.zeropp = {.mics_shard_size = 4};
  b = link_bytes(in, psi);
  EXPECT_DOUBLE_EQ(b.reduce.intra, f4 * psi * 4);
  EXPECT_DOUBLE_EQ(b.reduce.inter, 2 * f2 * psi / 4 * 4);
  EXPECT_DOUBLE_EQ(b.gather.intra, 2 * f4 * psi * 2);
  EXPECT_EQ(b.gather.inter, 0);
  // reduce_scatter false: the group's gradients all-reduced (2 (S-1)/S), and qgZ, which
  // replaces the reduce-scatter only, off: plain stage 3's reduction, twice.
  in.reduce_scatter = false;
  b = link_bytes(in, psi);
  EXPECT_DOUBLE_EQ(b.reduce.intra, 2 * f4 * psi * 4);
  in.zeropp = {.quantized_gradients = true};
  b = link_bytes(in, psi);
  EXPECT_DOUBLE_EQ(b.reduce.inter, 2 * f8 * psi * 4);
  EXPECT_EQ(b.reduce.intra, 0);
  in.reduce_scatter = true;
  // Groups not aligned to the nodes: 3 nodes of 4 ranks, hpZ groups of 3 (ranks 3-5 span nodes
  // 0 and 1): its backward gathers count between nodes.
  in.ranks = 12;
  in.nodes = 3;
  in.zeropp = {.hpz_partition_size = 3};
  b = link_bytes(in, psi);
  const double f3 = 2.0 / 3, f12 = 11.0 / 12;
  EXPECT_DOUBLE_EQ(b.gather.inter, f12 * psi * 2 + f3 * psi * 2);
  EXPECT_EQ(b.gather.intra, 0);
  in.ranks = 8;
  in.nodes = 2;
  in.zeropp = {.mics_shard_size = 4};
  // Seconds: within at the link's 50 GB/s, between at 12.5 GB/s.
  Hardware h = toy(false);
  h.inter_node_bw = 12.5e9;
  const double real_psi = (double)ParamLayout(in.model).total_numel();
  const StepLinkBytes r = link_bytes(in, real_psi);
  const StepTime t = *predict_step(in, h);
  EXPECT_NEAR(t.comm,
              (r.reduce.intra + r.gather.intra) / 50e9 + (r.reduce.inter + r.gather.inter) / 12.5e9,
              1e-15);
  EXPECT_DOUBLE_EQ(t.inter_node_bytes, r.reduce.inter + r.gather.inter);
  in.ranks = 7;
  EXPECT_FALSE(predict_step(in, h).ok());
}

// The CPU backend: 2 ranks share the node's rates, and every phase adds up; NVMe reads and
// writes the 24 bytes of master, m and v a parameter.
TEST(StepTime, CpuBackendSharesTheNodeAndAddsUp) {
  StepTimeInput in;
  in.model = *preset("tiny-llama");
  in.micro_batch = 2;
  in.seq_len = 16;
  in.stage = 1;
  in.ranks = 2;
  in.offload_optimizer = OffloadDevice::kNvme;
  const double psi = (double)ParamLayout(in.model).total_numel();
  const StepTime t = *predict_step(in, toy(true));
  EXPECT_DOUBLE_EQ(t.compute, training_flops_per_token(in.model, 16) * 32 / (0.5e12 / 2));
  EXPECT_DOUBLE_EQ(t.nvme, psi * 24 / 2e9);
  EXPECT_DOUBLE_EQ(t.step, t.compute + t.comm + t.copies + t.optimizer + t.nvme);
  EXPECT_FALSE(predict_step({.model = in.model, .micro_batch = 0, .seq_len = 16}, toy(true)).ok());
  EXPECT_FALSE(hardware_profile("tpu").ok());
  EXPECT_TRUE(hardware_profile("h100").ok());
}

// The CPU backend's threads and the offload pipeline, by hand: on a 2-core node, one compute
// thread runs the GEMMs at half the node's rate and streams at one thread's bandwidth; the
// serial step adds the update (on the compute thread) to the compute; the pipeline runs it on
// its optimizer thread beside the next step, the compute slowed by the busy core over the time
// they overlap, and the next forward waits for the embedding's update (a third of gpt2-124m's
// parameters) and the first block's (the lookup takes no time; each block's forward here
// outlasts the next block's update, so it waits for no other); the delayed update exposes
// none. On a GPU the pipeline hides the host side the same way.
TEST(StepTime, OffloadPipelineRunsTheUpdateBesideTheCompute) {
  StepTimeInput in;
  in.model = *preset("gpt2-124m");
  in.micro_batch = 64;
  in.seq_len = 32;
  in.stage = 2;
  in.offload_optimizer = OffloadDevice::kCpu;
  in.compute_threads = in.optimizer_threads = 1;
  Hardware hw = toy(true);
  hw.cores = 2;
  hw.thread_bw = 20e9;
  hw.busy_core_slowdown = 1.2;
  const double psi = (double)ParamLayout(in.model).total_numel();
  const double embedding = (double)ParamLayout(in.model).units()[0].numel;  // wte and wpe
  EXPECT_EQ(embedding, (50257 + 1024) * 768);
  const StepTime serial = *predict_step(in, hw);
  EXPECT_DOUBLE_EQ(serial.compute, training_flops_per_token(in.model, 32) * 2048 / 0.5e12 * 2);
  EXPECT_DOUBLE_EQ(serial.copies, psi * (2 + 2) / 20e9);
  EXPECT_DOUBLE_EQ(serial.optimizer, psi * 28 / 20e9);
  EXPECT_DOUBLE_EQ(serial.step, serial.compute + serial.copies + serial.optimizer);
  in.offload_pipeline = true;
  const StepTime pipelined = *predict_step(in, hw);
  // Off the training thread the update writes the working copy the CPU backend's device
  // memory is: the parameters' way back (P bytes) is no copy.
  EXPECT_DOUBLE_EQ(pipelined.copies, psi * 2 / 20e9);
  const double compute_side = serial.compute + pipelined.copies, host = serial.optimizer;
  const double block = 7087872;  // 12 C^2 + 13 C
  const double wait = host * (embedding + block) / psi;
  // Slowed over the update's time less the forward's wait; the compute outlasts the update.
  EXPECT_DOUBLE_EQ(pipelined.step, compute_side + wait + (host - wait) * 0.2);
  const double slowed = compute_side + std::min(compute_side, host) * 0.2;
  in.offload_pipeline = false;
  in.delayed_update = true;
  EXPECT_DOUBLE_EQ(predict_step(in, hw)->step, std::max(slowed, host));
  // The delayed update over two ranks stages its slice and copies it in (Engine::swaps_params).
  in.ranks = 2;
  EXPECT_DOUBLE_EQ(predict_step(in, hw)->copies, psi / 2 * (2 + 2) / 20e9);
  in.ranks = 1;
  // Where one thread's GEMM rate is known (cores that share a clock or an SMT core give one
  // thread more than its share), one compute thread runs at it.
  Hardware shared_core = hw;
  shared_core.thread_flops = 0.8e12;
  EXPECT_DOUBLE_EQ(predict_step(in, shared_core)->compute,
                   training_flops_per_token(in.model, 32) * 2048 / (0.8e12 * 0.5));
  // Two optimizer threads stream at twice one thread's rate (within the node's 100 GB/s).
  in.optimizer_threads = 2;
  EXPECT_DOUBLE_EQ(predict_step(in, hw)->optimizer, psi * 28 / 40e9);
  // Stage 1 pipelines the same way; the training thread copies the reduced fp32 shard out (4
  // bytes, one rank: the whole model) before it hands the update over, and nothing back.
  in.delayed_update = false;
  in.offload_pipeline = true;
  in.optimizer_threads = 1;
  in.stage = 1;
  const StepTime stage1 = *predict_step(in, hw);
  EXPECT_DOUBLE_EQ(stage1.copies, psi * 4 / 20e9);
  const double stage1_side = stage1.compute + stage1.copies;
  EXPECT_DOUBLE_EQ(stage1.step, stage1_side + wait + (host - wait) * 0.2);
  // A GPU (4 ranks, as PhasesAndOverlapsOnAGpu): the host side behind the next step, the
  // embedding's and the first block's shares exposed.
  StepTimeInput g;
  g.model = in.model;
  g.micro_batch = 8;
  g.seq_len = 1024;
  g.stage = 2;
  g.ranks = 4;
  g.offload_optimizer = OffloadDevice::kCpu;
  const StepTime gs = *predict_step(g, toy(false));
  g.offload_pipeline = true;
  const double host_side = gs.copies + gs.optimizer;
  EXPECT_NEAR(predict_step(g, toy(false))->step,
              std::max(gs.step - host_side + host_side * (embedding + block) / psi, host_side),
              1e-12);
  // Stage 1: the reduced fp32 shard (4 bytes) lands in host memory on the copy stream as the
  // backward goes on (zero/gradients.h), so nothing is left on the training thread: hidden as
  // at stage 2.
  g.stage = 1;
  g.offload_pipeline = false;
  const StepTime g1 = *predict_step(g, toy(false));
  EXPECT_DOUBLE_EQ(g1.copies, (psi / 4 * 4 + psi / 4 * 2) / toy(false).pcie_bw);
  g.offload_pipeline = true;
  const double host1 = g1.copies + g1.optimizer;
  EXPECT_NEAR(predict_step(g, toy(false))->step,
              std::max(g1.step - host1 + host1 * (embedding + block) / psi, host1), 1e-12);
  // Updates slower than the forward (one micro-batch of 32 tokens on the CPU): the forward
  // waits for every unit's, and ends the last block's forward and the head's after the update
  // of every unit but the head unit (gpt2's final norm, updated before the block's forward
  // ends). Forward: a third of the compute, a unit's share of it its share of the matmul
  // parameters (the tied head's V x C included, the embedding's lookup none).
  in = StepTimeInput{.model = in.model, .micro_batch = 1, .seq_len = 32, .stage = 2};
  in.offload_optimizer = OffloadDevice::kCpu;
  in.compute_threads = in.optimizer_threads = 1;
  in.offload_pipeline = true;
  // With gradient accumulation only the first micro-batch's forward waits: a third of one
  // micro-batch's compute, whatever the accumulation.
  const double head = 1536 + 50257.0 * 768, mm = psi - embedding + 50257.0 * 768;
  for (int A : {1, 2}) {
    in.gradient_accumulation = A;
    const StepTime slow = *predict_step(in, hw);
    const double fwd = slow.compute / A / 3, update = slow.optimizer;
    ASSERT_GT(update / psi, fwd / mm);
    const double waits = update * (psi - 1536) / psi + fwd * (block + head) / mm - fwd;
    const double side = slow.compute + slow.copies;
    EXPECT_NEAR(
        slow.step,
        std::max(side + waits + std::min(side, std::max(0.0, update - waits)) * 0.2, update), 1e-12)
        << "gradient accumulation " << A;
  }
}

// A micro-batch timed on the CPU backend (trainer/hardware_probe.h measure_micro_batch) is the
// compute of each micro-batch, with the forward again under activation checkpointing (a third
// of forward and backward); a GPU's profile predicts from FLOPs whatever the input carries.
TEST(StepTime, MeasuredMicroBatchIsTheCpuBackendsCompute) {
  StepTimeInput in;
  in.model = *preset("tiny-llama");
  in.seq_len = 16;
  in.gradient_accumulation = 3;
  in.micro_batch_seconds = 0.25;
  EXPECT_DOUBLE_EQ(predict_step(in, toy(true))->compute, 0.75);
  in.checkpointing = true;
  EXPECT_DOUBLE_EQ(predict_step(in, toy(true))->compute, 1.0);
  EXPECT_DOUBLE_EQ(predict_step(in, toy(false))->compute,
                   training_flops_per_token(in.model, 16) * 16 * 3 * 4 / 3 / (1e12 * 0.5));
  // The copies the timed pass holds are not added again: at stage 2 the gradients' way out, at
  // stage 3 the offloaded parameters' way in; stage 1's reduced fp32 shard goes out in the step
  // (4 bytes), and the updated 16-bit parameters come back at every stage (2).
  in.checkpointing = false;
  in.offload_optimizer = OffloadDevice::kCpu;
  const double psi = (double)ParamLayout(in.model).total_numel();
  for (int stage : {1, 2, 3}) {
    in.stage = stage;
    EXPECT_DOUBLE_EQ(predict_step(in, toy(true))->copies, psi * ((stage == 1 ? 4 : 0) + 2) / 100e9)
        << "stage " << stage;
  }
  in.offload_param = OffloadDevice::kCpu;
  EXPECT_DOUBLE_EQ(predict_step(in, toy(true))->copies, psi * 2 / 100e9);
}

// An update far longer than the compute (TinyLlama's CPU step beside an H100's short
// micro-batch): the pipelined step is about the update, never more than the serial step.
TEST(StepTime, PipelinedStepIsNeverAboveTheSerialOne) {
  StepTimeInput in;
  in.model = *preset("tinyllama-1.1b");
  in.micro_batch = 2;
  in.seq_len = 512;
  in.stage = 2;
  in.offload_optimizer = OffloadDevice::kCpu;
  const Hardware h100 = *hardware_profile("h100");
  const StepTime serial = *predict_step(in, h100);
  in.offload_pipeline = true;
  const StepTime pipelined = *predict_step(in, h100);
  const double host_side = serial.copies + serial.optimizer;
  ASSERT_GT(host_side, 10 * serial.compute);
  EXPECT_LE(pipelined.step, serial.step);
  EXPECT_GE(pipelined.step, host_side);
}

// The probe behind that figure, on tiny-llama as a stage-2 NVMe-offloaded run runs it (no
// drive touched: the state is held in host memory): a block's time and the rest's add up to the
// model's; the slowdown beside the streaming thread is a ratio of two timings, clamped to [1, 2]
// (no timing is asserted). A model whose cut copies would take over a quarter of the machine's
// memory is refused before anything is allocated, saying so.
TEST(HardwareProbe, TimesAMicroBatchOrSaysWhyNot) {
  const ModelConfig c = *preset("tiny-llama");
  // Stage 2, the optimizer offloaded to the drive (the probe keeps it in host memory), bf16.
  auto run = parse_ds_config(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
                                                              "nvme_path": "/nonexistent"}}})",
                             1, "probe.json");
  ASSERT_TRUE(run.ok()) << run.status();
  auto t = measure_micro_batch(c, *run, 2, 16, 1, true);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GE(t->block_s, 0);  // a tiny block's time can vanish in the noise of a busy host
  EXPECT_GT(t->seconds(c), 0);
  EXPECT_GE(t->busy_core_slowdown, 1);
  EXPECT_LE(t->busy_core_slowdown, 2);
  if (physical_memory_bytes() == 0) GTEST_SKIP() << "this machine's memory is unknown";
  ModelConfig huge = c;
  huge.vocab_size = 1 << 22;
  huge.hidden = 16384;
  auto refused = measure_micro_batch(huge, *run, 1, 16, 1, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("quarter of this machine's memory"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace zt

// --device: the trainer is one program for the CPU and the GPU. `zerotrain_emu` is the same
// trainer linked against the CUDA backend on the emulation (model/cuda/emu), so `--device cuda`
// runs the GPU code path here (backend choice, device communicator, host <-> device copies,
// every kernel); its losses must match the CPU backend's, an independent implementation.
// Single-rank emulated runs use ZT_CUDA_EMU_GUARD=1: device memory is closed to the host outside
// emulated CUDA calls, so host code that reads a device pointer crashes the run (as it would
// read garbage on a GPU) instead of passing because emulated device memory is host memory.
// Every emulated run is strict (ZT_CUDA_EMU_STRICT=1: NaN in memory nothing wrote, checked
// copies and warp masks); ZT_CUDA_EMU_ORDER, if set, reaches them too.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/shard.h"
#include "tests/unit/cli_helpers.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
const std::string kBin = std::string(ZT_BINARY_DIR) + "/zerotrain";
const std::string kEmuBin = std::string(ZT_BINARY_DIR) + "/zerotrain_emu";

using test::Result;
Result run(const std::string& cmd) { return test::run_shell(cmd); }

struct StepMetrics {
  std::vector<double> loss, grad_norm, val_loss;
};

StepMetrics read_metrics(const fs::path& run_dir) {
  return {test::metric_values(run_dir, "loss"), test::metric_values(run_dir, "grad_norm"),
          test::metric_values(run_dir, "val_loss")};
}

class Device : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::test_dir("device");
    ASSERT_TRUE(test::write_random_shards(dir_, {"train_000000.bin", "val_000000.bin"}, 4000,
                                          256, 1));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes ds_config `json`; the train command's arguments on the tiny LLaMA, 3 steps with a
  // validation, its metrics into run_dir/`run`.
  std::string train(const std::string& json, const std::string& run) const {
    std::ofstream(path(run + ".json")) << json;
    return " train --model tiny-llama --seq_len 16 --steps 3 --sample_tokens 0 --val_every 2"
           " --val_sequences 4 --deepspeed " +
           path(run + ".json") + " --run_dir " + path(run) + " --train_data '" +
           path("train_*.bin") + "' --val_data '" + path("val_*.bin") + "'";
  }
  // Runs the CPU and the emulated CUDA trainer on `json` (`extra` flags; `launcher`: mpirun
  // for several ranks, else the guard is on); expects their losses, norms and validation losses
  // to agree within `rel`.
  void expect_same_training(const std::string& json, double rel, const std::string& launcher,
                            const std::string& extra = "") {
    const Result cpu = run(launcher + kBin + train(json, "cpu") + " --device cpu" + extra);
    ASSERT_EQ(cpu.code, 0) << cpu.out;
    const std::string env =
        launcher.empty() ? "ZT_CUDA_EMU_STRICT=1 ZT_CUDA_EMU_GUARD=1 " : "ZT_CUDA_EMU_STRICT=1 ";
    const Result gpu =
        run(env + launcher + kEmuBin + train(json, "cuda") + " --device cuda" + extra);
    ASSERT_EQ(gpu.code, 0) << gpu.out;
    EXPECT_NE(gpu.out.find(" on cuda,"), std::string::npos) << gpu.out;
    const StepMetrics a = read_metrics(path("cpu")), b = read_metrics(path("cuda"));
    ASSERT_EQ(a.loss.size(), 3u);
    ASSERT_EQ(b.loss.size(), a.loss.size());
    ASSERT_EQ(b.val_loss.size(), a.val_loss.size());
    for (size_t i = 0; i < a.loss.size(); ++i) {
      EXPECT_NEAR(b.loss[i], a.loss[i], rel * a.loss[i]) << "step " << i + 1;
      EXPECT_NEAR(b.grad_norm[i], a.grad_norm[i], rel * a.grad_norm[i]) << "step " << i + 1;
    }
    for (size_t i = 0; i < a.val_loss.size(); ++i)
      EXPECT_NEAR(b.val_loss[i], a.val_loss[i], rel * a.val_loss[i]) << "validation " << i;
  }
  fs::path dir_;
};

// Tolerances: fp32 differs only in summation order (1e-5 relative after 3 steps); bf16 rounds
// activations and gradients to 8 mantissa bits (2^-8 = 4e-3).
TEST_F(Device, EmulatedCudaTrainsAsTheCpuFp32) {
  expect_same_training(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                       1e-5, "");
}

TEST_F(Device, EmulatedCudaTrainsAsTheCpuBf16Stage2Offload) {
  expect_same_training(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                           "bf16": {"enabled": true},
                           "zero_optimization": {"stage": 2,
                                                 "offload_optimizer": {"device": "cpu"}},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                       4e-3, "");
}

// Muon on the device (Newton-Schulz through the backend's GEMMs, its AdamW half beside it)
// under the guard: the ds_config key test runs Muon's keys on the emulation without it.
TEST_F(Device, EmulatedCudaTrainsAsTheCpuMuon) {
  expect_same_training(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                           "optimizer": {"type": "Muon",
                                         "params": {"muon_lr": 0.02, "adam_lr": 1e-3}}})",
                       1e-4, "");
}

// Stage 3 with parameters and optimizer on the host, and activation checkpoints in host memory:
// every host <-> device path of the engine and the transformer.
TEST_F(Device, EmulatedCudaTrainsAsTheCpuStage3OffloadCheckpointing) {
  expect_same_training(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                           "bf16": {"enabled": true},
                           "zero_optimization": {"stage": 3,
                                                 "offload_param": {"device": "cpu"},
                                                 "offload_optimizer": {"device": "cpu"}},
                           "activation_checkpointing": {"cpu_checkpointing": true},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                       4e-3, "", " --gradient_checkpointing");
}

// Two ranks: each binds device local_rank % devices (the emulation has one, which any number of
// ranks may share) and the collectives run over MPI on the emulated device memory.
TEST_F(Device, EmulatedCudaTwoRanksStage3AsTheCpu) {
  expect_same_training(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                           "bf16": {"enabled": true}, "zero_optimization": {"stage": 3},
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                       4e-3, std::string(ZT_MPIRUN) + " -np 2 ");
}

// Greedy decoding with the KV cache (a window of 8, so it also refills) gives the same text.
TEST_F(Device, EmulatedCudaSamplesAsTheCpu) {
  const std::string args = " sample --model shakespeare-llama --tokenizer " +
                           std::string(ZT_SOURCE_DIR) +
                           "/../shared/data/llama2_tokenizer.model --sample_prompt ROMEO: "
                           "--sample_tokens 12 --temperature 0 --seq_len 8";
  const Result cpu = run(kBin + args + " --device cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  const Result gpu =
      run("ZT_CUDA_EMU_STRICT=1 ZT_CUDA_EMU_GUARD=1 " + kEmuBin + args + " --device cuda");
  ASSERT_EQ(gpu.code, 0) << gpu.out;
  EXPECT_EQ(test::sample_of(gpu.out), test::sample_of(cpu.out));
}

TEST_F(Device, CudaWithoutAGpuIsAClearError) {
  const std::string json = R"({"train_micro_batch_size_per_gpu": 2})";
  const Result r = run(kBin + train(json, "run") + " --device cuda");
  if (r.code == 0) GTEST_SKIP() << "a CUDA device is present: --device cuda trained";
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("error: --device cuda"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("use --device cpu"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("run/metrics.jsonl")));
}

TEST_F(Device, UnknownDeviceIsAnError) {
  const std::string json = R"({"train_micro_batch_size_per_gpu": 2})";
  for (const std::string& cmd :
       {kBin + train(json, "run") + " --device gpu",
        kBin + " sample --model tiny-llama --tokenizer x.model --device gpu",
        // The flag's value is checked before any file: not "no shards match".
        kBin + " train --deepspeed absent.json --train_data 'absent_*.bin' --device gpu"}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--device 'gpu' is not one of auto, cpu, cuda"), std::string::npos)
        << cmd << "\n"
        << r.out;
  }
}

// auto takes the CPU where no GPU is visible (and the emulated GPU in zerotrain_emu).
TEST_F(Device, AutoPicksWhatIsThere) {
  const std::string json = R"({"train_micro_batch_size_per_gpu": 2})";
  const Result emu = run(kEmuBin + train(json, "emu"));
  ASSERT_EQ(emu.code, 0) << emu.out;
  EXPECT_NE(emu.out.find(" on cuda,"), std::string::npos) << emu.out;
  const Result r = run(kBin + train(json, "run"));
  ASSERT_EQ(r.code, 0) << r.out;
  if (r.out.find(" on cuda,") != std::string::npos) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_NE(r.out.find(" on cpu,"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace zt

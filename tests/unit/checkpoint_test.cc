// Checkpoints (trainer/checkpoint.h), end to end through the zerotrain binary:
// - resume is exact: N steps straight equal K steps + save + resume + (N - K) steps bit for bit
//   (losses, and the final saves' files), stages 0-3, fp32 and bf16, with optimizer offload
//   (CPU and NVMe) and parameter offload, on 1 and 2 ranks;
// - resharding: a save from 2 ranks resumes on 1 (twice the accumulation) and on 4, and from
//   stage 2 at stage 3, with the uninterrupted run's losses (1e-5 relative);
// - bad checkpoints are refused with a clear error: a truncated or bit-flipped file, another
//   configuration (naming the key), a `latest` naming a missing save.
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "data/shard.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/layout.h"
#include "model/safetensors.h"
#include "tests/unit/cli_helpers.h"
#include "trainer/export.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
const std::string kBin = std::string(ZT_BINARY_DIR) + "/zerotrain";

using test::Result;
Result run(const std::string& cmd) { return test::run_shell(cmd); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::test_dir("ckpt");
    ASSERT_TRUE(test::write_random_shards(dir_, {"train_000000.bin"}, 3000, 256, 3));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // ds_config with micro-batch B, accumulation G, `extra` keys (", ..."); written as `name`.
  std::string config(
      const std::string& name, int B, int G, const std::string& extra,
      const std::string& optimizer =
          "{\"type\": \"AdamW\", \"params\": {\"lr\": 3e-3, \"weight_decay\": 0.1}}") const {
    std::ofstream(path(name)) << "{\"train_micro_batch_size_per_gpu\": " << B
                              << ", \"gradient_accumulation_steps\": " << G
                              << ", \"optimizer\": " << optimizer << ", \"gradient_clipping\": 1.0"
                              << extra << "}";
    return path(name);
  }
  // `steps` steps of the tiny LLaMA on `ranks` ranks, metrics into run_dir/`run`.
  Result train(int ranks, const std::string& ds, int steps, const std::string& run,
               const std::string& extra) const {
    const std::string launcher =
        ranks > 1 ? std::string(ZT_MPIRUN) + " -np " + std::to_string(ranks) + " " : "";
    return ::zt::run(launcher + kBin + " train --model tiny-llama --seq_len 16 --val_every 0" +
                     " --sample_tokens 0 --threads 1 --train_data " + path("train_*.bin") +
                     " --deepspeed " + ds + " --steps " + std::to_string(steps) + " --run_dir " +
                     path(run) + " " + extra);
  }
  // train() on one rank in the background, its output discarded (the caller kills and reaps
  // it): `extra` are more flags, one per element.
  pid_t spawn(const std::string& ds, int steps, const std::string& run,
              const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {kBin, "train", "--model", "tiny-llama", "--seq_len", "16",
                                     "--val_every", "0", "--sample_tokens", "0", "--threads", "1",
                                     "--train_data", path("train_*.bin"), "--deepspeed", ds,
                                     "--steps", std::to_string(steps), "--run_dir", path(run)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      execv(kBin.c_str(), argv.data());
      _exit(127);
    }
    return pid;
  }
  std::vector<double> losses(const std::string& run) const {
    return test::metric_values(path(run), "loss");
  }
  fs::path dir_;
};

// N = 6 straight against 3 + save + resume + 3, saving at the end of both: the losses of steps
// 4-6 and every rank file of the final saves are identical.
TEST_F(Checkpoint, ResumeIsBitwiseExact) {
  struct Case {
    int stage;
    const char* extra;
  };
  const Case cases[] = {
      {0, ""},
      {0, ", \"bf16\": {\"enabled\": true}"},
      {1, ", \"bf16\": {\"enabled\": true}"},
      {2, ""},
      {2, ", \"bf16\": {\"enabled\": true}"},
      {2, ", \"bf16\": {\"enabled\": true}, \"OFFLOAD_OPT\": 1"},
      {3, ""},
      {3, ", \"bf16\": {\"enabled\": true}"},
      {3, ", \"bf16\": {\"enabled\": true}, \"OFFLOAD_OPT\": 1, \"OFFLOAD_PARAM\": 1"},
      {2, ", \"bf16\": {\"enabled\": true}, \"OFFLOAD_NVME\": 1"},
  };
  for (int ranks : {1, 2})
    for (const Case& c : cases) {
      std::string extra = c.extra, zero = "\"stage\": " + std::to_string(c.stage);
      auto take = [&](const std::string& marker, const std::string& key, const std::string& where) {
        const size_t at = extra.find(", \"" + marker + "\": 1");
        if (at == std::string::npos) return;
        extra.erase(at, marker.size() + 7);
        zero += ", \"" + key + "\": " + where;
      };
      fs::create_directories(path("nvme"));
      take("OFFLOAD_PARAM", "offload_param", "{\"device\": \"cpu\"}");
      take("OFFLOAD_OPT", "offload_optimizer", "{\"device\": \"cpu\"}");
      take("OFFLOAD_NVME", "offload_optimizer",
           "{\"device\": \"nvme\", \"nvme_path\": \"" + path("nvme") + "\"}");
      const std::string what =
          "ranks " + std::to_string(ranks) + " stage " + std::to_string(c.stage) + " " + c.extra;
      const std::string ds =
          config("ds.json", 2, 2 / ranks, extra + ", \"zero_optimization\": {" + zero + "}");
      fs::remove_all(path("a")), fs::remove_all(path("b"));
      const Result straight = train(ranks, ds, 6, "run_a", "--save_dir " + path("a"));
      ASSERT_EQ(straight.code, 0) << what << "\n" << straight.out;
      const Result first = train(ranks, ds, 3, "run_b1", "--save_dir " + path("b"));
      ASSERT_EQ(first.code, 0) << what << "\n" << first.out;
      const Result rest = train(ranks, ds, 6, "run_b2", "--save_dir " + path("b") + " --resume");
      ASSERT_EQ(rest.code, 0) << what << "\n" << rest.out;
      EXPECT_NE(rest.out.find("resumed from"), std::string::npos) << what << "\n" << rest.out;
      const std::vector<double> a = losses("run_a"), b = losses("run_b2");
      ASSERT_EQ(a.size(), 6u) << what;
      ASSERT_EQ(b.size(), 3u) << what;
      for (int i = 0; i < 3; ++i) EXPECT_EQ(a[3 + i], b[i]) << what << " step " << 4 + i;
      for (int r = 0; r < ranks; ++r) {
        const std::string f = "step_00000006/rank_0000" + std::to_string(r) + ".bin";
        ASSERT_TRUE(fs::exists(path("a") + "/" + f) && fs::exists(path("b") + "/" + f)) << f;
        if (r == 0) EXPECT_GT(fs::file_size(path("a") + "/" + f), 0u) << what;
        EXPECT_EQ(slurp(path("a") + "/" + f), slurp(path("b") + "/" + f)) << what << " " << f;
      }
    }
}

// Lion and Adagrad (one state each) and Muon (two, and matrices gathered across ranks) through
// the trainer: 4 straight steps against 2 + save + resume + 2 give the same losses bit for bit
// and the same final rank files, with the state on the device, offloaded to host memory and to
// NVMe, on 1 and 2 ranks; the save names its state; resuming it under another optimizer is
// refused, naming the field.
TEST_F(Checkpoint, LionAdagradAndMuonResumeBitwiseAndKeepTheirOptimizer) {
  const std::string optimizers[] = {
      "{\"type\": \"Muon\", \"params\": {\"lr\": 2e-2, \"weight_decay\": 0.1}}",
      "{\"type\": \"Lion\", \"params\": {\"lr\": 1e-3, \"betas\": [0.9, 0.99], "
      "\"weight_decay\": 0.1}}",
      "{\"type\": \"adagrad\", \"params\": {\"lr\": 1e-2, \"lr_decay\": 0.01}}"};
  fs::create_directories(path("nvme"));
  const std::string zero[] = {
      "\"stage\": 0", "\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}",
      "\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
          path("nvme") + "\"}"};
  for (const std::string& opt : optimizers)
    for (int ranks : {1, 2})
      for (const std::string& z : zero) {
        const std::string what = opt + " ranks " + std::to_string(ranks) + " " + z;
        const std::string ds =
            config("ds.json", 2, 2 / ranks,
                   ", \"bf16\": {\"enabled\": true}, \"zero_optimization\": {" + z + "}", opt);
        fs::remove_all(path("a")), fs::remove_all(path("b"));
        const Result straight = train(ranks, ds, 4, "run_a", "--save_dir " + path("a"));
        ASSERT_EQ(straight.code, 0) << what << "\n" << straight.out;
        const Result first = train(ranks, ds, 2, "run_b1", "--save_dir " + path("b"));
        ASSERT_EQ(first.code, 0) << what << "\n" << first.out;
        const Result rest = train(ranks, ds, 4, "run_b2", "--save_dir " + path("b") + " --resume");
        ASSERT_EQ(rest.code, 0) << what << "\n" << rest.out;
        const std::vector<double> a = losses("run_a"), b = losses("run_b2");
        ASSERT_EQ(a.size(), 4u) << what;
        ASSERT_EQ(b.size(), 2u) << what;
        for (int i = 0; i < 2; ++i) EXPECT_EQ(a[2 + i], b[i]) << what << " step " << 3 + i;
        for (int r = 0; r < ranks; ++r) {
          const std::string f = "step_00000004/rank_0000" + std::to_string(r) + ".bin";
          EXPECT_EQ(slurp(path("a") + "/" + f), slurp(path("b") + "/" + f)) << what << " " << f;
        }
      }
  // The last save (Adagrad) names its state; AdamW cannot resume it.
  auto meta = read_checkpoint_meta(path("b") + "/step_00000004");
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ((*meta)["optimizer_states"], nlohmann::json({"sum"}));
  const Result other =
      train(1, config("adamw.json", 2, 2, ""), 6, "run_c", "--resume_from " + path("b"));
  EXPECT_EQ(other.code, 2) << other.out;
  EXPECT_NE(other.out.find("ds_config/optimizer/type was \"Adagrad\", now \"AdamW\""),
            std::string::npos)
      << other.out;
}

// DeepSpeed's csv_monitor: one CSV per tag in output_path/job_name, "step,<name>" then a row
// per step at the samples seen (train_batch_size 2: 2, 4, 6, 8), the values metrics.jsonl has
// (both written in their shortest round-trip form), the breakdown's times with
// wall_clock_breakdown, no loss_scale without fp16. A run stopped after step 4 and resumed
// from its step-2 save keeps rows up to step 2, drops the stopped run's 3-4 and appends its
// own: four rows, the straight run's values.
TEST_F(Checkpoint, CsvMonitorWritesDeepSpeedsFilesAndResumesWithoutDuplicates) {
  auto csv = [&](const std::string& out, const std::string& tag) {
    std::vector<std::pair<int64_t, double>> rows;
    std::ifstream in(path(out) + "/job/" + tag + ".csv");
    std::string line;
    if (!std::getline(in, line)) return std::make_pair(std::string(), rows);
    const std::string header = line;
    while (std::getline(in, line)) {
      const size_t comma = line.find(',');
      rows.push_back({std::stoll(line.substr(0, comma)), std::stod(line.substr(comma + 1))});
    }
    return std::make_pair(header, rows);
  };
  auto ds = [&](const std::string& name, const std::string& out) {
    return config(name, 2, 1,
                  ", \"wall_clock_breakdown\": true, \"csv_monitor\": {\"enabled\": true, "
                  "\"output_path\": \"" +
                      path(out) + "\", \"job_name\": \"job\"}");
  };
  const Result a = train(1, ds("a.json", "csv_a"), 4, "run_a", "");
  ASSERT_EQ(a.code, 0) << a.out;
  const std::vector<double> loss = losses("run_a"), lr = test::metric_values(path("run_a"), "lr");
  ASSERT_EQ(loss.size(), 4u);
  const auto [loss_header, loss_rows] = csv("csv_a", "Train_Samples_train_loss");
  EXPECT_EQ(loss_header, "step,train_loss");
  ASSERT_EQ(loss_rows.size(), 4u);
  const auto [lr_header, lr_rows] = csv("csv_a", "Train_Samples_lr");
  EXPECT_EQ(lr_header, "step,lr");
  ASSERT_EQ(lr_rows.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(loss_rows[i].first, 2 * (i + 1));
    EXPECT_EQ(loss_rows[i].second, loss[i]) << "step " << i + 1;
    EXPECT_EQ(lr_rows[i].second, lr[i]) << "step " << i + 1;
  }
  for (const char* tag :
       {"Train_Samples_grad_norm", "Train_Samples_tokens_per_s",
        "Train_Samples_elapsed_time_ms_forward", "Train_Samples_elapsed_time_ms_backward",
        "Train_Samples_elapsed_time_ms_step"})
    EXPECT_EQ(csv("csv_a", tag).second.size(), 4u) << tag;
  EXPECT_FALSE(fs::exists(path("csv_a") + "/job/Train_Samples_loss_scale.csv"));

  const std::string b = ds("b.json", "csv_b");
  const Result first = train(1, b, 4, "run_b1", "--save_dir " + path("b") + " --save_interval 2");
  ASSERT_EQ(first.code, 0) << first.out;
  ASSERT_EQ(csv("csv_b", "Train_Samples_train_loss").second.size(), 4u);
  const Result rest = train(1, b, 4, "run_b2", "--resume_from " + path("b") + "/step_00000002");
  ASSERT_EQ(rest.code, 0) << rest.out;
  const auto [header, rows] = csv("csv_b", "Train_Samples_train_loss");
  EXPECT_EQ(header, "step,train_loss");
  ASSERT_EQ(rows.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i].first, 2 * (i + 1));
    EXPECT_EQ(rows[i].second, loss[i]) << "step " << i + 1;
  }
}

// After an fp16 step is skipped, Adam has taken one update fewer than the training step, and
// its bias correction (1 - beta^t) must use that count (DeepSpeed's optimizer counts applied
// steps). A run with an overflow forced at step 2, saved at step 3 and resumed, gives the
// straight run's losses bit for bit; a resume that took t from the step would not.
TEST_F(Checkpoint, Fp16ResumeAfterASkippedStepIsBitwiseExact) {
  const std::string ds =
      config("fp16.json", 2, 1, ", \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8}");
  ::setenv("ZEROTRAIN_FORCE_OVERFLOW", "2", 1);
  const Result straight = train(1, ds, 6, "run_a", "--save_dir " + path("a"));
  const Result first = train(1, ds, 3, "run_b1", "--save_dir " + path("b"));
  ::unsetenv("ZEROTRAIN_FORCE_OVERFLOW");
  ASSERT_EQ(straight.code, 0) << straight.out;
  ASSERT_EQ(first.code, 0) << first.out;
  const Result rest = train(1, ds, 6, "run_b2", "--save_dir " + path("b") + " --resume");
  ASSERT_EQ(rest.code, 0) << rest.out;
  const std::vector<double> a = losses("run_a"), b = losses("run_b2");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a[3 + i], b[i]) << "step " << 4 + i;
}

// Saved on 2 ranks at stage 2 (micro-batch 2), resumed on 1 rank with twice the accumulation,
// on 4 ranks at micro-batch 1, and at stage 3; and saved on 4 ranks at stage 3, resumed on 2 at
// stage 2: the uninterrupted run's losses.
TEST_F(Checkpoint, ResumesAtAnotherWorldSizeAndStage) {
  const std::string zero2 = ", \"zero_optimization\": {\"stage\": 2}";
  const std::string zero3 = ", \"zero_optimization\": {\"stage\": 3}";
  const Result straight = train(2, config("two.json", 2, 1, zero2), 6, "straight", "");
  ASSERT_EQ(straight.code, 0) << straight.out;
  const Result saved =
      train(2, config("two.json", 2, 1, zero2), 3, "saved", "--save_dir " + path("ck"));
  ASSERT_EQ(saved.code, 0) << saved.out;
  const std::vector<double> want = losses("straight");
  ASSERT_EQ(want.size(), 6u);
  struct Case {
    int ranks;
    std::string ds;
  };
  const Case cases[] = {{1, config("one.json", 2, 2, zero2)},
                        {4, config("four.json", 1, 1, zero2)},
                        {2, config("three.json", 2, 1, zero3)}};
  for (const Case& c : cases) {
    const Result r = train(c.ranks, c.ds, 6, "resumed", "--resume_from " + path("ck"));
    ASSERT_EQ(r.code, 0) << c.ds << "\n" << r.out;
    const std::vector<double> got = losses("resumed");
    ASSERT_EQ(got.size(), 3u) << c.ds;
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got[i], want[3 + i], 1e-5 * want[3 + i]) << c.ds << " step " << 4 + i;
  }
  // Saved on 4 ranks (micro-batch 1) at stage 3, resumed on 2 at stage 2.
  const Result four = train(4, config("four3.json", 1, 1, zero3), 3, "four",
                            "--save_dir " + path("ck4"));
  ASSERT_EQ(four.code, 0) << four.out;
  const Result back = train(2, config("two.json", 2, 1, zero2), 6, "back",
                            "--resume_from " + path("ck4"));
  ASSERT_EQ(back.code, 0) << back.out;
  const std::vector<double> got = losses("back");
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(got[i], want[3 + i], 1e-5 * want[3 + i]) << "4 -> 2 ranks, step " << 4 + i;
}

// Export does not depend on the layout a state was saved in: a 2-rank stage-2 save, resumed
// with --steps at its own step and saved again (no training) on 1 and 4 ranks and at stage 3,
// exports to the same bytes as the original; relaunched into the directory it came from, it
// trains and rewrites nothing.
TEST_F(Checkpoint, ResavedAtAnyLayoutExportsTheSameBytes) {
  const std::string zero2 = ", \"zero_optimization\": {\"stage\": 2}";
  const std::string zero3 = ", \"zero_optimization\": {\"stage\": 3}";
  const Result saved =
      train(2, config("two.json", 2, 1, zero2), 3, "saved", "--save_dir " + path("ck"));
  ASSERT_EQ(saved.code, 0) << saved.out;
  auto files = [&](const std::string& ck, const std::string& out) {
    const Result e = ::zt::run(kBin + " export --dtype fp32 --checkpoint " + path(ck) +
                               " --out " + path(out));
    EXPECT_EQ(e.code, 0) << e.out;
    std::map<std::string, std::string> f;
    for (const auto& entry : fs::directory_iterator(path(out)))
      f[entry.path().filename().string()] = slurp(entry.path());
    return f;
  };
  const auto want = files("ck", "hf_ck");
  ASSERT_GE(want.size(), 3u);  // config, weights, index or generation config
  struct Case {
    int ranks;
    std::string ds;
  };
  const Case cases[] = {{1, config("one.json", 2, 2, zero2)},
                        {4, config("four.json", 1, 1, zero2)},
                        {2, config("three.json", 2, 1, zero3)},
                        {4, config("four3.json", 1, 1, zero3)}};
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string re = "re" + std::to_string(i);
    const Result r = train(cases[i].ranks, cases[i].ds, 3, "run_" + re,
                           "--resume_from " + path("ck") + " --save_dir " + path(re));
    ASSERT_EQ(r.code, 0) << cases[i].ds << "\n" << r.out;
    EXPECT_NE(r.out.find("saved "), std::string::npos) << r.out;
    EXPECT_TRUE(losses("run_" + re).empty()) << "a re-save trains no step";
    EXPECT_EQ(files(re, "hf_" + re), want) << cases[i].ranks << " ranks, " << cases[i].ds;
  }
  // Into the directory it came from (also spelled through the step directory with a trailing
  // slash, or a link): a finished job relaunched, nothing trained and nothing rewritten.
  fs::create_directory_symlink(path("ck"), path("ck_link"));
  const std::string rank0 = slurp(path("ck") + "/step_00000003/rank_00000.bin");
  for (const std::string from :
       {std::string("--resume"), "--resume_from " + path("ck") + "/step_00000003/",
        "--resume_from " + path("ck_link") + "/step_00000003"}) {
    const Result same =
        train(2, config("two.json", 2, 1, zero2), 3, "same", "--save_dir " + path("ck") + " " + from);
    EXPECT_EQ(same.code, 0) << from << "\n" << same.out;
    EXPECT_NE(same.out.find("nothing to train"), std::string::npos) << same.out;
    EXPECT_EQ(same.out.find("saved "), std::string::npos) << same.out;
    EXPECT_EQ(slurp(path("ck") + "/step_00000003/rank_00000.bin"), rank0);
  }
  // A save past --steps is still an error.
  const Result past =
      train(2, config("two.json", 2, 1, zero2), 2, "past", "--resume_from " + path("ck"));
  EXPECT_EQ(past.code, 2) << past.out;
  EXPECT_NE(past.out.find("raise --steps"), std::string::npos) << past.out;
}

TEST_F(Checkpoint, BadCheckpointsAreRefused) {
  const std::string ds = config("ds.json", 2, 1, "");
  ASSERT_EQ(train(1, ds, 2, "run", "--save_dir " + path("ck")).code, 0);
  const fs::path save = fs::path(path("ck")) / "step_00000002";
  const fs::path file = save / "rank_00000.bin";
  const std::string good = slurp(file);
  auto expect_error = [&](const std::string& extra, const std::string& needle) {
    const Result r = train(1, ds, 4, "again", extra);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << "want '" << needle << "' in\n" << r.out;
  };
  std::ofstream(file, std::ios::binary) << good.substr(0, good.size() - 8);  // truncated
  expect_error("--resume_from " + path("ck"), "truncated or replaced");
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  std::ofstream(file, std::ios::binary) << flipped;  // one bit
  expect_error("--resume_from " + path("ck"), "fails its CRC-32 check");
  std::ofstream(file, std::ios::binary) << good;
  // Another learning rate, another sequence length: named, with both values.
  const std::string other = config("other.json", 2, 1, "");
  {
    std::string text = slurp(other);
    text.replace(text.find("3e-3"), 4, "1e-3");
    std::ofstream(other) << text;
  }
  const Result lr =
      ::zt::run(kBin + " train --model tiny-llama --seq_len 16 --val_every 0" +
                " --sample_tokens 0 --train_data " + path("train_*.bin") + " --deepspeed " + other +
                " --steps 4 --run_dir " + path("x") + " --resume_from " + save.string());
  EXPECT_EQ(lr.code, 2) << lr.out;
  EXPECT_NE(lr.out.find("ds_config/optimizer/params/lr was 0.003, now 0.001"), std::string::npos)
      << lr.out;
  const Result seq =
      ::zt::run(kBin + " train --model tiny-llama --seq_len 8 --val_every 0" +
                " --sample_tokens 0 --train_data " + path("train_*.bin") + " --deepspeed " + ds +
                " --steps 4 --run_dir " + path("x") + " --resume_from " + save.string());
  EXPECT_EQ(seq.code, 2) << seq.out;
  EXPECT_NE(seq.out.find("seq_len was 16, now 8"), std::string::npos) << seq.out;
  // latest naming a save that is gone; an empty directory for --resume_from.
  std::ofstream(path("ck") + "/latest") << "step_00000099\n";
  expect_error("--resume_from " + path("ck"), "which is not a complete checkpoint");
  fs::create_directories(path("empty"));
  expect_error("--resume_from " + path("empty"), "holds no checkpoint");
  expect_error("--resume_from " + path("missing"), "'" + path("missing") + "' does not exist");
  std::ofstream(path("empty") + "/config.json") << "{}";  // a Hugging Face directory, say
  expect_error("--resume_from " + path("empty"), "load it with --init_from");
  expect_error("--resume", "--resume continues from --save_dir");
  expect_error("--resume --save_dir " + path("ck") + " --resume_from " + path("ck"), "not both");
  // --resume with a save_dir that has nothing yet starts from step 0 (a job's first launch).
  const Result fresh = train(1, ds, 2, "fresh", "--save_dir " + path("new") + " --resume");
  EXPECT_EQ(fresh.code, 0) << fresh.out;
  EXPECT_NE(fresh.out.find("starting from step 0"), std::string::npos) << fresh.out;
}

// keep_last deletes older saves only once the new one is in place; a directory left by a
// killed save (.tmp_...) is ignored by resume and cleared by the next save of that step.
TEST_F(Checkpoint, KeepLastAndLeftovers) {
  const std::string ds = config("ds.json", 2, 1, "");
  fs::create_directories(path("ck") + "/.tmp_step_00000004");
  std::ofstream(path("ck") + "/.tmp_step_00000004/rank_00000.bin") << "partial";
  const Result r =
      train(1, ds, 6, "run", "--save_dir " + path("ck") + " --save_interval 2 --keep_last 2");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(path("ck"))) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".lock", "latest", "step_00000004", "step_00000006"}));
  EXPECT_EQ(slurp(path("ck") + "/latest").substr(0, 14), "step_00000006 ");
}

// Killed at random moments while saving every step (SIGKILL, 20 trials): `latest` always names
// a complete save, and --resume goes on from it.
TEST_F(Checkpoint, SavesSurviveSigkill) {
  const std::string ds = config("ds.json", 2, 1, "");
  std::mt19937 rng(11);
  int resumed_later = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const pid_t pid = spawn(ds, 1000, "run",
                            {"--save_dir", path("ck"), "--save_interval", "1", "--keep_last", "2",
                             "--resume"});
    ASSERT_GE(pid, 0);
    // Until the first save exists, wait for it (a loaded machine starts slowly), so the kills
    // land while saving whatever the load.
    for (int waited = 0; !fs::exists(path("ck") + "/latest") && waited < 120000; waited += 10) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) FAIL() << "the trainer ended before its first save";
      usleep(10000);
    }
    usleep(20000 + rng() % 400000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!fs::exists(path("ck") + "/latest")) continue;  // killed before the first save
    const std::string tag = slurp(path("ck") + "/latest").substr(0, 13);
    ASSERT_TRUE(fs::exists(path("ck") + "/" + tag + "/meta.json"))
        << "trial " << trial << ": latest names an incomplete save " << tag;
    ++resumed_later;  // the next trial resumes from it (--resume)
  }
  EXPECT_GT(resumed_later, 10) << "the kills came too early to test saves";
  // The last state resumes and trains on.
  const std::string tag = slurp(path("ck") + "/latest");
  const int64_t at = std::stoll(tag.substr(5));
  const Result r = train(1, ds, (int)at + 2, "final", "--save_dir " + path("ck") + " --resume");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(losses("final").size(), 2u);
}

// Every byte a resume reads is checked (version 2): a bit flipped anywhere in meta.json (the data
// position, say, which would silently change the data order) or in `latest` is exit 2 naming the
// file, before any step. A version 1 save (no checksum; its identity as that format wrote it:
// the ds_config's text, the model as an array) still resumes, with a notice.
TEST_F(Checkpoint, EveryByteAResumeReadsIsChecked) {
  const std::string ds = config("ds.json", 2, 1, "");
  ASSERT_EQ(train(1, ds, 2, "run", "--save_dir " + path("ck")).code, 0);
  const std::string meta_path = path("ck") + "/step_00000002/meta.json";
  const std::string meta = slurp(meta_path), latest = slurp(path("ck") + "/latest");
  auto resume_fails = [&](const std::string& needle, const std::string& what) {
    const Result r = train(1, ds, 4, "again", "--resume_from " + path("ck"));
    EXPECT_EQ(r.code, 2) << what << "\n" << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << what << "\n" << r.out;
    EXPECT_EQ(r.out.find("step    3"), std::string::npos) << what << ": trained";
  };
  std::string epoch = meta;
  const size_t at = epoch.find("\"epoch\": 0");
  ASSERT_NE(at, std::string::npos) << meta;
  epoch[at + 9] = '1';  // "epoch": 0 -> 1, one bit
  std::ofstream(meta_path, std::ios::binary) << epoch;
  resume_fails("meta.json' fails its checksum", "epoch 0 -> 1");
  // Structure (a JSON error naming the file), and inside string values, where the JSON stays
  // valid and only the checksum can tell: the format name, the recorded ds_config text, the
  // rank file's name, and the version (2 -> 3; 2 -> 1 takes two bits and cannot switch the
  // checksum off either).
  for (size_t byte : {size_t{0}, meta.size() - 2}) {
    std::string flipped = meta;
    flipped[byte] ^= 0x20;  // '{' -> '[', '}' -> ']'
    std::ofstream(meta_path, std::ios::binary) << flipped;
    resume_fails("meta.json", "byte " + std::to_string(byte));
  }
  struct Flip {
    std::string inside;
    char bit;
  };
  for (const Flip& f : {Flip{"zerotrain-checkpoint", 0x01}, Flip{"zerotrain-checkpoint", 0x20},
                        Flip{"train_micro_batch_size_per_gpu", 0x01}, Flip{"rank_00000.bin", 0x20},
                        Flip{"\"version\": 2", 0x01}}) {
    const size_t at_text = meta.find(f.inside);
    ASSERT_NE(at_text, std::string::npos) << f.inside;
    std::string flipped = meta;
    flipped[at_text + f.inside.size() - 1] ^= f.bit;
    std::ofstream(meta_path, std::ios::binary) << flipped;
    resume_fails("meta.json' fails its checksum", f.inside);
  }
  {
    std::string downgraded = meta;  // two bits: 2 -> 1, still sealed: refused as damage
    downgraded.replace(downgraded.find("\"version\": 2"), 12, "\"version\": 1");
    std::ofstream(meta_path, std::ios::binary) << downgraded;
    resume_fails("meta.json' fails its checksum", "version 2 -> 1");
  }
  std::ofstream(meta_path, std::ios::binary) << meta;
  std::string pointer = latest;
  pointer[pointer.size() - 2] ^= 0x01;  // the checksum's last digit
  std::ofstream(path("ck") + "/latest", std::ios::binary) << pointer;
  resume_fails("latest' fails its checksum", "latest");
  std::ofstream(path("ck") + "/latest", std::ios::binary) << latest;
  // Version 1: the same save as that format wrote it.
  nlohmann::json v1 = nlohmann::json::parse(meta);
  v1.erase("meta_crc32");
  v1["version"] = 1;
  // Version 1's model field: [arch, vocab_size, max_seq_len, n_layer, n_head, n_kv_head,
  // hidden, intermediate, norm_eps (fp32, widened), rope_theta, tied] (the layout of
  // tests/fixtures/tiny_llama_checkpoint/meta.json), here of the tiny-llama preset.
  const nlohmann::json v1_model = nlohmann::json::parse(
      "[1, 256, 64, 2, 4, 2, 64, 128, 9.999999747378752e-06, 10000.0, false]");
  v1["identity"] = {{"ds_config/gradient_clipping", 1.0},
                    {"ds_config/optimizer/params/lr", 0.003},
                    {"ds_config/optimizer/params/weight_decay", 0.1},
                    {"ds_config/optimizer/type", "AdamW"},
                    {"global_batch", 2},
                    {"model", v1_model},
                    {"seed", 1337},
                    {"seq_len", 16},
                    {"shuffle", true},
                    {"train_tokens", 3000}};
  std::ofstream(meta_path, std::ios::binary) << v1.dump(1);
  std::ofstream(path("ck") + "/latest", std::ios::binary) << "step_00000002\n";
  const Result old = train(1, ds, 3, "old", "--resume_from " + path("ck"));
  EXPECT_EQ(old.code, 0) << old.out;
  EXPECT_NE(old.out.find("format version 1"), std::string::npos) << old.out;
  EXPECT_EQ(losses("old").size(), 1u) << old.out;
}

// The resume check compares the resolved configuration: writing out a default ("bf16":
// {"enabled": false}), or "Adam" for "AdamW" with adam_w_mode's default, is the same run; a
// different model names the field that differs (model/max_seq_len), not an array of numbers.
TEST_F(Checkpoint, ResumeComparesTheResolvedConfiguration) {
  ASSERT_EQ(train(1, config("ds.json", 2, 1, ""), 2, "run", "--save_dir " + path("ck")).code, 0);
  std::string text = slurp(path("ds.json"));
  text.replace(text.find("\"AdamW\""), 7, "\"Adam\"");
  std::ofstream(path("explicit.json")) << text.substr(0, text.size() - 1)
                                       << ", \"bf16\": {\"enabled\": false}, \"fp16\": "
                                          "{\"enabled\": false}}";
  const Result same = train(1, path("explicit.json"), 3, "same", "--resume_from " + path("ck"));
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_EQ(losses("same").size(), 1u) << same.out;
  const Result other = train(1, config("ds.json", 2, 1, ""), 3, "other",
                             "--resume_from " + path("ck") + " --max_seq_len 128");
  EXPECT_EQ(other.code, 2) << other.out;
  EXPECT_NE(other.out.find("model/max_seq_len was 64, now 128"), std::string::npos) << other.out;
}

// Everything a run needs is checked before step 1: a --save_dir that cannot be created (under a
// regular file) or a negative --save_interval / --keep_last is exit 2 before any step, with the
// zerotrain keys' message.
TEST_F(Checkpoint, SaveSettingsAreCheckedBeforeTraining) {
  std::ofstream(path("file")) << "x";
  const std::string ds = config("ds.json", 2, 1, "");
  struct Case {
    std::string flags, needle;
  };
  for (const Case& c : {Case{"--save_dir " + path("file") + "/ck", "cannot be created"},
                        Case{"--save_dir " + path("ck") + " --save_interval -3",
                             "--save_interval: value -3 is out of range; allowed: an integer >= 0"},
                        Case{"--save_dir " + path("ck") + " --keep_last -5",
                             "--keep_last: value -5 is out of range; allowed: an integer >= 0"}}) {
    const Result r = train(1, ds, 3, "run", c.flags);
    EXPECT_EQ(r.code, 2) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("step    1"), std::string::npos) << c.flags << ": trained";
  }
}

// One run per save directory: while a run holds --save_dir, a second run given it (on 2 ranks
// here) exits 2 at start naming the first (its pid), before it trains or saves; once the first
// ends (here by SIGKILL: the lock goes with the process), a run takes the directory.
TEST_F(Checkpoint, OneRunPerSaveDirectory) {
  const std::string ds = config("ds.json", 2, 1, "");
  const pid_t pid =
      spawn(ds, 100000, "first", {"--save_dir", path("ck"), "--save_interval", "1"});
  ASSERT_GE(pid, 0);
  for (int i = 0; i < 600 && !fs::exists(path("ck") + "/latest"); ++i) usleep(50000);
  ASSERT_TRUE(fs::exists(path("ck") + "/latest")) << "the first run never saved";
  const Result second =
      train(2, config("ds2.json", 1, 1, ""), 3, "second", "--save_dir " + path("ck"));
  EXPECT_EQ(second.code, 2) << second.out;
  EXPECT_NE(second.out.find("is in use by another run (pid " + std::to_string(pid) + " on host"),
            std::string::npos)
      << second.out;
  EXPECT_TRUE(losses("second").empty());
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // Free again: a relaunch at the killed run's last save (nothing to train) takes it.
  const int at = std::stoi(slurp(path("ck") + "/latest").substr(5, 8));
  const Result reuse = train(1, ds, at, "reuse", "--save_dir " + path("ck") + " --resume");
  EXPECT_EQ(reuse.code, 0) << reuse.out;
  EXPECT_NE(reuse.out.find("nothing to train"), std::string::npos) << reuse.out;
  // --run_dir too: two runs writing one metrics.jsonl would move each other's log aside.
  const pid_t holder = spawn(ds, 100000, "shared_run", {});
  ASSERT_GE(holder, 0);
  for (int i = 0; i < 600 && test::metric_values(path("shared_run"), "loss").empty(); ++i)
    usleep(50000);
  const Result same_run = train(1, ds, 2, "shared_run", "");
  EXPECT_EQ(same_run.code, 2) << same_run.out;
  EXPECT_NE(same_run.out.find("--run_dir '" + path("shared_run") + "' is in use by another run"),
            std::string::npos)
      << same_run.out;
  kill(holder, SIGKILL);
  waitpid(holder, &status, 0);
}

// One run per monitor folder too: two runs from one ds_config share its csv_monitor's (and
// tensorboard's) output_path/job_name, where the second would rewrite the first's CSV files
// and both exit 0. While a run holds them, a second run is refused at start with exit 2, the
// folder and the holder's pid named, before it writes a row (no --save_dir, distinct run_dirs:
// the folder is the only thing they share); the first run's rows stay whole.
TEST_F(Checkpoint, OneRunPerMonitorFolder) {
  for (const std::string monitor : {"csv_monitor", "tensorboard"}) {
    const std::string out = path(monitor);
    const std::string ds = config(monitor + ".json", 2, 1,
                                  ", \"" + monitor + "\": {\"enabled\": true, \"output_path\": \"" +
                                      out + "\", \"job_name\": \"job\"}");
    const pid_t pid = spawn(ds, 100000, monitor + "_first", {});
    ASSERT_GE(pid, 0);
    for (int i = 0; i < 600 && losses(monitor + "_first").empty(); ++i) usleep(50000);
    const size_t trained = losses(monitor + "_first").size();
    ASSERT_GT(trained, 0u) << "the first run never trained";
    const Result second = train(1, ds, 3, monitor + "_second", "");
    EXPECT_EQ(second.code, 2) << second.out;
    EXPECT_NE(second.out.find(monitor + " folder (output_path/job_name) '" + out +
                              "/job' is in use by another run " + "(pid " + std::to_string(pid) +
                              " on host"),
              std::string::npos)
        << second.out;
    EXPECT_TRUE(losses(monitor + "_second").empty());
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (monitor == "csv_monitor") {  // the first run's rows, whole: samples 2, 4, 6, ... in order
      std::ifstream in(out + "/job/Train_Samples_train_loss.csv");
      std::string line;
      ASSERT_TRUE(std::getline(in, line));
      EXPECT_EQ(line, "step,train_loss");
      size_t rows = 0;
      while (std::getline(in, line) && !line.empty())
        EXPECT_EQ(line.substr(0, line.find(',')), std::to_string(2 * ++rows)) << line;
      EXPECT_GE(rows, trained);
    } else {  // one event file, the first run's (each run starts its own)
      int events = 0;
      for (const auto& e : fs::directory_iterator(out + "/job"))
        events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
      EXPECT_EQ(events, 1);
    }
  }
}

// A save directory is not started over by mistake: a run without --resume into a --save_dir
// that holds saves exits 2 before training (it would train from step 0 over them, and keep_last
// delete them); with --resume and `latest` gone (deleted, lost in a copy), the newest complete
// save is resumed, with a notice, not step 0.
TEST_F(Checkpoint, SavesAreNotStartedOver) {
  const std::string ds = config("ds.json", 2, 1, "");
  ASSERT_EQ(train(1, ds, 4, "run", "--save_dir " + path("ck") + " --save_interval 2").code, 0);
  const Result fresh = train(1, ds, 6, "fresh", "--save_dir " + path("ck") + " --keep_last 1");
  EXPECT_EQ(fresh.code, 2) << fresh.out;
  EXPECT_NE(fresh.out.find("already holds saves of an earlier run"), std::string::npos)
      << fresh.out;
  EXPECT_TRUE(losses("fresh").empty());
  EXPECT_TRUE(fs::exists(path("ck") + "/step_00000002/meta.json"));
  fs::remove(path("ck") + "/latest");
  const Result resumed = train(1, ds, 6, "resumed", "--save_dir " + path("ck") + " --resume");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("has no 'latest': resuming from its newest save"), std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("at step 4"), std::string::npos) << resumed.out;
  EXPECT_EQ(losses("resumed").size(), 2u);
}

// A finished job relaunched with --resume trains nothing and writes nothing: metrics.jsonl
// (with its validation lines) is byte for byte what the job left, however often it relaunches.
TEST_F(Checkpoint, FinishedJobRelaunchedWritesNothing) {
  ASSERT_TRUE(test::write_random_shards(dir_, {"val_000000.bin"}, 1000, 256, 4));
  const std::string ds = config("ds.json", 2, 1, "");
  const std::string val = " --val_data " + path("val_*.bin") + " --val_sequences 4";
  ASSERT_EQ(train(1, ds, 2, "run", "--save_dir " + path("ck") + val).code, 0);
  const std::string metrics = path("run") + "/metrics.jsonl", log = slurp(metrics);
  ASSERT_EQ(test::metric_values(path("run"), "val_loss").size(), 2u);
  struct stat before;
  ASSERT_EQ(::stat(metrics.c_str(), &before), 0);
  usleep(20000);  // a rewrite would show in the modification time
  for (int again = 0; again < 2; ++again) {
    const Result r = train(1, ds, 2, "run", "--save_dir " + path("ck") + " --resume" + val);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("nothing to train"), std::string::npos) << r.out;
    EXPECT_EQ(slurp(metrics), log) << "relaunch " << again;
    struct stat after;
    ASSERT_EQ(::stat(metrics.c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino) << "metrics.jsonl replaced, relaunch " << again;
    EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec) << "rewritten, relaunch " << again;
    EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec) << "rewritten, relaunch " << again;
  }
}

// A job killed after its last save but before the end of training (the fault point
// train.before_end: SIGKILL there, as a scheduler's kill would) left the final validation
// unlogged and no run.json; relaunched with --resume it does that end, once: its log then
// equals an uninterrupted run's validation losses bit for bit (the same weights, the same
// validation set), and a further relaunch finds the end recorded and writes nothing.
TEST_F(Checkpoint, KilledBeforeTheEndOfTrainingFinishesItOnRelaunch) {
  ASSERT_TRUE(test::write_random_shards(dir_, {"val_000000.bin"}, 1000, 256, 4));
  const std::string ds = config("ds.json", 2, 1, "");
  const std::string val = " --val_data " + path("val_*.bin") + " --val_sequences 4";
  ASSERT_EQ(train(1, ds, 3, "straight", val).code, 0);
  const std::vector<double> want = test::metric_values(path("straight"), "val_loss");
  ASSERT_EQ(want.size(), 2u);  // steps 0 and 3

  ::setenv("ZEROTRAIN_FAULT_POINT", "train.before_end", 1);
  const Result killed = train(1, ds, 3, "run", "--save_dir " + path("ck") + val);
  ::unsetenv("ZEROTRAIN_FAULT_POINT");
  ASSERT_EQ(killed.code, 128 + SIGKILL) << killed.out;
  EXPECT_EQ(test::metric_values(path("run"), "val_loss").size(), 1u);
  EXPECT_FALSE(fs::exists(path("run") + "/run.json"));

  const Result relaunch = train(1, ds, 3, "run", "--save_dir " + path("ck") + " --resume" + val);
  ASSERT_EQ(relaunch.code, 0) << relaunch.out;
  EXPECT_NE(relaunch.out.find("step 3 | val loss"), std::string::npos) << relaunch.out;
  EXPECT_EQ(test::metric_values(path("run"), "val_loss"), want);
  EXPECT_EQ(test::metric_values(path("run"), "loss"), losses("straight"));
  EXPECT_TRUE(fs::exists(path("run") + "/run.json"));
  const std::string log = slurp(path("run") + "/metrics.jsonl");
  const std::string end = "{\"end_of_training\":3}\n";
  EXPECT_EQ(log.size() - log.rfind(end), end.size()) << log;  // the last line, once
  EXPECT_EQ(log.find(end), log.rfind(end)) << log;
  const Result again = train(1, ds, 3, "run", "--save_dir " + path("ck") + " --resume" + val);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("nothing to train"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("val loss"), std::string::npos) << again.out;
  EXPECT_EQ(slurp(path("run") + "/metrics.jsonl"), log);
}

// Faults at named points (common/fault.h), each window hit every run instead of by chance:
// killed (SIGKILL) at each point of the third of six saves (or the first pruning, or the 13th
// NVMe write of the optimizer state: 4 initial, then 4 per step, so step 3's first), a run
// leaves `latest` naming a complete save, the second or,
// once `latest` moved, the third, and --resume trains the rest with the uninterrupted run's
// losses, bit for bit.
TEST_F(Checkpoint, KilledAtEachPointOfASaveResumesExactly) {
  fs::create_directories(path("nvme"));
  const std::string plain = config("ds.json", 2, 1, "");
  const std::string nvme = config(
      "nvme.json", 2, 1,
      ", \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", "
      "\"nvme_path\": \"" +
          path("nvme") + "\"}}");
  std::map<std::string, std::vector<double>> want;
  for (const std::string& ds : {plain, nvme}) {
    ASSERT_EQ(train(1, ds, 6, "straight", "").code, 0) << ds;
    want[ds] = losses("straight");
    ASSERT_EQ(want[ds].size(), 6u);
  }
  struct Case {
    std::string fault, ds;
    int resumes_at;
  };
  const Case cases[] = {{"save.rank_file_written:3", plain, 2}, {"save.meta_written:3", plain, 2},
                        {"save.renamed:3", plain, 2},           {"save.latest_written:3", plain, 3},
                        {"save.pruning:1", plain, 3},           {"swap.write:13", nvme, 2}};
  const std::string saves = " --save_interval 1 --keep_last 2 --save_dir " + path("ck");
  for (const Case& c : cases) {
    for (const char* d : {"ck", "killed", "resumed"}) fs::remove_all(path(d));
    ::setenv("ZEROTRAIN_FAULT_POINT", c.fault.c_str(), 1);
    const Result killed = train(1, c.ds, 6, "killed", saves);
    ::unsetenv("ZEROTRAIN_FAULT_POINT");
    ASSERT_EQ(killed.code, 128 + SIGKILL) << c.fault << " was not reached:\n" << killed.out;
    const std::string tag = slurp(path("ck") + "/latest").substr(0, 13);
    EXPECT_EQ(tag, checkpoint_tag(c.resumes_at)) << c.fault;
    EXPECT_TRUE(fs::exists(path("ck") + "/" + tag + "/meta.json")) << c.fault;
    const Result resumed = train(1, c.ds, 6, "resumed", saves + " --resume");
    ASSERT_EQ(resumed.code, 0) << c.fault << "\n" << resumed.out;
    EXPECT_NE(resumed.out.find("at step " + std::to_string(c.resumes_at)), std::string::npos)
        << c.fault << "\n"
        << resumed.out;
    const std::vector<double> got = losses("resumed");
    ASSERT_EQ(got.size(), 6u - c.resumes_at) << c.fault;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], want[c.ds][c.resumes_at + i])
          << c.fault << " step " << c.resumes_at + i + 1;
  }
}

// The ds_config's optimizer and scheduler keys reach the update the run applies, checked in
// closed form on the first step's saved state (Adam's step 1, bias-corrected: m = (1 - b1) g,
// v = (1 - b2) g^2, and the master moves by lr (g / (|g| + eps) + wd theta0), which is
// lr (sign(g) + wd theta0) where |g| >> eps). WarmupLR linear from 1e-3 to 1e-2 over 10 steps
// gives DeepSpeed's lr 1e-3 at step 0 (not the optimizer's 1e-2); betas (0.8, 0.9) give
// v / m^2 = 0.1 / 0.04 = 2.5 (the defaults would give 0.025); weight_decay 0.1 adds 0.1 theta0.
// Initial weights: the tiny LLaMA fixture (tests/fixtures/tiny_llama) through --init_from.
TEST_F(Checkpoint, OptimizerKeysReachTheAppliedUpdate) {
  const std::string hf = std::string(ZT_SOURCE_DIR) + "/tests/fixtures/tiny_llama";
  auto cfg = config_from_hf_json(slurp(hf + "/config.json"), hf);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_TRUE(test::write_random_shards(dir_, {"fx_000000.bin"}, 2000, cfg->vocab_size, 5));
  std::ofstream(path("opt.json"))
      << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.8, 0.9],
                                                        "eps": 1e-8, "weight_decay": 0.1}},
             "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3,
                 "warmup_max_lr": 1e-2, "warmup_num_steps": 10, "warmup_type": "linear"}},
             "gradient_clipping": 0})";
  const Result r = ::zt::run(kBin + " train --init_from " + hf + " --seq_len 8 --val_every 0" +
                             " --sample_tokens 0 --threads 1 --train_data " + path("fx_*.bin") +
                             " --deepspeed " + path("opt.json") + " --steps 1 --run_dir " +
                             path("run") + " --save_dir " + path("ck"));
  ASSERT_EQ(r.code, 0) << r.out;
  const double lr0 = 1e-3, wd = 0.1;
  EXPECT_EQ(test::metric_values(path("run"), "lr"), std::vector<double>{lr0});
  const ParamLayout layout(*cfg);
  auto dir = find_checkpoint(path("ck"));
  ASSERT_TRUE(dir.ok() && *dir);
  auto meta = read_checkpoint_meta(**dir);
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto init = open_hf_model_dir(hf);
  ASSERT_TRUE(init.ok()) << init.status();
  size_t checked = 0;
  ASSERT_TRUE(read_checkpoint(**dir, *meta, layout,
                              [&](int u, std::span<const float> master,
                                  std::span<const std::span<const float>> states) {
                                const std::span<const float> m = states[0], v = states[1];
                                std::vector<float> theta0(master.size());
                                EXPECT_TRUE(
                                    load_hf_unit(reader_of(*init), *cfg, layout, u, theta0).ok());
                                for (size_t i = 0; i < master.size(); ++i) {
                                  const double g = m[i] / 0.2;        // m = (1 - b1) g
                                  if (std::fabs(g) < 1e-4) continue;  // |g| >> eps, sign sure
                                  EXPECT_NEAR(v[i] / ((double)m[i] * m[i]), 2.5, 1e-4)
                                      << "unit " << u << " element " << i;
                                  const double step = lr0 * ((g > 0 ? 1 : -1) + wd * theta0[i]);
                                  // fp32 master: its one rounding, half an ulp of theta0.
                                  const double tol = 1e-4 * lr0 + 0x1p-24 * std::fabs(theta0[i]);
                                  EXPECT_NEAR(theta0[i] - master[i], step, tol)
                                      << "unit " << u << " element " << i;
                                  ++checked;
                                }
                                return absl::OkStatus();
                              })
                  .ok());
  EXPECT_GT(checked, layout.total_numel() / 2) << "too few elements with a sure sign";
}

// Export: every tensor of the Hugging Face directory equals the checkpoint's master weights
// (fp32 exactly; bf16 rounded to nearest even), for GPT-2 and LLaMA (GQA), split over shards;
// the index maps every tensor; the config reads back as the model's.
TEST_F(Checkpoint, ExportIsTheMasterWeightsInHuggingFaceLayout) {
  const std::string ds = config("ds.json", 2, 1, ", \"zero_optimization\": {\"stage\": 3}");
  for (const std::string model : {"tiny-llama", "tiny-gpt2"}) {
    fs::remove_all(path("ck"));
    const Result r =
        ::zt::run(kBin + " train --model " + model + " --seq_len 16 --val_every 0" +
                  " --sample_tokens 0 --train_data " + path("train_*.bin") + " --deepspeed " + ds +
                  " --steps 2 --run_dir " + path("run") + " --save_dir " + path("ck"));
    ASSERT_EQ(r.code, 0) << r.out;
    auto c = preset(model);
    ASSERT_TRUE(c.ok());
    const ParamLayout layout(*c);
    auto dir = find_checkpoint(path("ck"));
    ASSERT_TRUE(dir.ok() && *dir);
    auto meta = read_checkpoint_meta(**dir);
    ASSERT_TRUE(meta.ok()) << meta.status();
    std::vector<std::vector<float>> master(layout.num_units());
    ASSERT_TRUE(read_checkpoint(
                    **dir, *meta, layout,
                    [&](int u, std::span<const float> w, std::span<const std::span<const float>>) {
                      master[u].assign(w.begin(), w.end());
                      return absl::OkStatus();
                    })
                    .ok());
    for (const std::string dtype : {"fp32", "bf16"}) {
      const std::string out = path("hf_" + model + "_" + dtype);
      ExportOptions o{path("ck"), out, dtype, "", 100'000};
      ASSERT_TRUE(run_export(o).ok()) << model << " " << dtype;
      auto hf = open_hf_model_dir(out);
      ASSERT_TRUE(hf.ok()) << hf.status();
      EXPECT_GT(hf->shards().size(), 1u) << "expected several shards";
      auto cfg = config_from_hf_json(slurp(out + "/config.json"), out);
      ASSERT_TRUE(cfg.ok()) << cfg.status();
      EXPECT_EQ(ParamLayout(*cfg).total_numel(), layout.total_numel());
      EXPECT_EQ(cfg->n_kv_head, c->n_kv_head);
      // Special-token ids only where the vocabulary has them (tiny-gpt2's 256 tokens have no
      // GPT-2 <|endoftext|> 50256: transformers warns on every load of such a config).
      for (const char* file : {"/config.json", "/generation_config.json"}) {
        const nlohmann::json j = nlohmann::json::parse(slurp(out + file));
        for (const char* id : {"bos_token_id", "eos_token_id"})
          if (j.contains(id) && !j[id].is_null())
            EXPECT_LT(j[id].get<int>(), c->vocab_size) << model << file << " " << id;
      }
      for (int u = 0; u < layout.num_units(); ++u) {
        std::vector<float> got(layout.units()[u].numel), want = master[u];
        ASSERT_TRUE(load_hf_unit(reader_of(*hf), *c, layout, u, got).ok()) << model << " " << u;
        if (dtype == "bf16")
          for (float& x : want) x = bf16_to_f32(f32_to_bf16(x));
        EXPECT_EQ(got, want) << model << " " << dtype << " unit " << u;
      }
      // --model beside --init_from: the same shapes are fine, others an error naming them.
      const std::string other = model == "tiny-llama" ? "tiny-gpt2" : "tiny-llama";
      const std::string base = kBin + " train --seq_len 16 --val_every 0 --sample_tokens 0" +
                               " --steps 1 --train_data " + path("train_*.bin") +
                               " --deepspeed " + ds + " --run_dir " + path("x") +
                               " --init_from " + out;
      const Result same = ::zt::run(base + " --model " + model);
      EXPECT_EQ(same.code, 0) << same.out;
      const Result clash = ::zt::run(base + " --model " + other);
      EXPECT_EQ(clash.code, 2) << clash.out;
      EXPECT_NE(clash.out.find("are different models (architecture"), std::string::npos)
          << clash.out;
    }
  }
  // Exporting again into the same directory in one shard leaves no shard of the earlier
  // export; a checkpoint directory is refused as --out.
  const std::string out = path("hf_tiny-gpt2_fp32");
  ASSERT_TRUE(run_export(ExportOptions{path("ck"), out, "fp32", "", 2'000'000'000}).ok());
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
  EXPECT_EQ(shards, std::vector<std::string>{"model-00001-of-00001.safetensors"});
  const absl::Status into_ck = run_export(ExportOptions{path("ck"), path("ck"), "fp32", "", 1000});
  EXPECT_EQ(into_ck.code(), absl::StatusCode::kInvalidArgument) << into_ck;
  EXPECT_NE(std::string(into_ck.message()).find("holds a zerotrain checkpoint"), std::string::npos);
}

// sample --checkpoint reads a save directly: the same greedy text as its fp32 export through
// --init_from (which takes the export's tokenizer.model); --prompt and --max_new_tokens are
// --sample_prompt and --sample_tokens.
TEST_F(Checkpoint, SampleFromACheckpoint) {
  const std::string tok = std::string(ZT_SOURCE_DIR) + "/../shared/data/llama2_tokenizer.model";
  if (!fs::exists(tok)) GTEST_SKIP() << "shared data absent";
  const std::string ds = config("ds.json", 2, 1, "");
  const Result r = ::zt::run(kBin + " train --model shakespeare-llama --seq_len 16 --val_every 0" +
                             " --sample_tokens 0 --threads 1 --train_data " +
                             path("train_*.bin") + " --deepspeed " + ds +
                             " --steps 1 --run_dir " + path("run") + " --save_dir " + path("ck"));
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(::zt::run(kBin + " export --dtype fp32 --checkpoint " + path("ck") + " --out " +
                      path("hf") + " --tokenizer " + tok).code,
            0);
  const std::string opts = " --temperature 0 --threads 1 --seq_len 32";
  const std::string args = " --tokenizer " + tok + opts;
  const Result a = ::zt::run(kBin + " sample --checkpoint " + path("ck") + args +
                             " --prompt ROMEO: --max_new_tokens 10");
  // The export carries tokenizer.model, so --init_from needs no --tokenizer.
  const Result b = ::zt::run(kBin + " sample --init_from " + path("hf") + opts +
                             " --sample_prompt ROMEO: --sample_tokens 10");
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_EQ(test::sample_of(a.out), test::sample_of(b.out));
  EXPECT_EQ(test::sample_of(a.out).rfind("sample:\n---\nROMEO:", 0), 0u) << a.out;
  const Result both = ::zt::run(kBin + " sample --checkpoint " + path("ck") + " --init_from " +
                                path("hf") + args);
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("not both"), std::string::npos) << both.out;
  const Result clash = ::zt::run(kBin + " sample --checkpoint " + path("ck") + args +
                                 " --prompt A --sample_prompt B");
  EXPECT_EQ(clash.code, 2) << clash.out;
  const Result other = ::zt::run(kBin + " sample --checkpoint " + path("ck") + args +
                                 " --model tiny-gpt2");
  EXPECT_EQ(other.code, 2) << other.out;
  EXPECT_NE(other.out.find("are different models"), std::string::npos) << other.out;
}

}  // namespace
}  // namespace zt

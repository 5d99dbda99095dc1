// trainer/run_config.h: each flag that doubles a zerotrain key gives the run's value alone, the
// key alone, or both when equal; a disagreement names the flag, the file and both values.
#include "trainer/run_config.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "trainer/device.h"
#include "trainer/engine_options.h"

namespace zt {
namespace {

const std::string kPath = "ds.json";

absl::StatusOr<DsConfig> resolve(const std::string& zerotrain, const KeyFlags& f) {
  return resolve_run_config(R"({"train_batch_size": 8, "zerotrain": {)" + zerotrain + "}}", 1,
                            kPath, f);
}

TEST(RunConfig, AFlagOrItsKeyOrBothWhenTheyAgree) {
  auto r = resolve("", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zerotrain.attention, "auto");  // neither given
  EXPECT_EQ(r->zerotrain.device_memory_limit, 0);
  EXPECT_FALSE(r->zerotrain.gradient_checkpointing);
  EXPECT_EQ(r->zerotrain.save_dir, "");
  EXPECT_EQ(r->zerotrain.save_interval, 0);
  EXPECT_EQ(r->zerotrain.keep_last, 0);
  EXPECT_EQ(r->zerotrain.optimizer_threads, 0);
  r = resolve("", {.attention = "flash",
                   .device_memory_limit = 1 << 30,
                   .gradient_checkpointing = true,
                   .save_dir = "/tmp/a",
                   .save_interval = 5,
                   .keep_last = 2,
                   .optimizer_threads = 3});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zerotrain.attention, "flash");
  EXPECT_EQ(r->zerotrain.device_memory_limit, 1 << 30);
  EXPECT_TRUE(r->zerotrain.gradient_checkpointing);
  EXPECT_EQ(r->zerotrain.save_dir, "/tmp/a");
  EXPECT_EQ(r->zerotrain.save_interval, 5);
  EXPECT_EQ(r->zerotrain.keep_last, 2);
  EXPECT_EQ(r->zerotrain.optimizer_threads, 3);
  const std::string keys =
      R"("attention": "cudnn", "gradient_checkpointing": true, "save_dir": "/tmp/b",
         "save_interval": 7, "keep_last": 3, "optimizer_threads": 4)";
  r = resolve(keys, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zerotrain.attention, "cudnn");
  EXPECT_TRUE(r->zerotrain.gradient_checkpointing);
  EXPECT_EQ(r->zerotrain.save_dir, "/tmp/b");
  EXPECT_EQ(r->zerotrain.save_interval, 7);
  EXPECT_EQ(r->zerotrain.keep_last, 3);
  EXPECT_EQ(r->zerotrain.optimizer_threads, 4);
  // Both, equal (save_dir written with a trailing slash).
  r = resolve(keys, {.attention = "cudnn",
                     .save_dir = "/tmp/b/",
                     .save_interval = 7,
                     .optimizer_threads = 4});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zerotrain.save_interval, 7);
  EXPECT_EQ(r->zerotrain.optimizer_threads, 4);
}

TEST(RunConfig, AFlagAndItsKeyThatDisagreeAreNamed) {
  struct Case {
    std::string key;
    KeyFlags flags;
    std::string message;
  };
  const Case cases[] = {
      {R"("attention": "cudnn")",
       {.attention = "flash"},
       "--attention flash and ds.json: zerotrain.attention cudnn disagree"},
      {R"("save_dir": "/tmp/b")",
       {.save_dir = "/tmp/a"},
       "--save_dir /tmp/a and ds.json: zerotrain.save_dir /tmp/b disagree"},
      {R"("save_interval": 7)",
       {.save_interval = 5},
       "--save_interval 5 and ds.json: zerotrain.save_interval 7 disagree"},
      {R"("keep_last": 3)",
       {.keep_last = 2},
       "--keep_last 2 and ds.json: zerotrain.keep_last 3 disagree"},
      {R"("optimizer_threads": 4)",
       {.optimizer_threads = 2},
       "--optimizer_threads 2 and ds.json: zerotrain.optimizer_threads 4 disagree"},
      {R"("device_memory_limit": "2GB")",
       {.device_memory_limit = 1 << 30},
       "--device_memory_limit"},
  };
  for (const Case& c : cases) {
    auto r = resolve(c.key, c.flags);
    ASSERT_FALSE(r.ok()) << c.key;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

// activation_checkpointing configured while checkpointing stays off is noticed; the flag turns
// it on, and the notice goes.
TEST(RunConfig, ActivationCheckpointingWithoutCheckpointingIsNoticed) {
  const std::string text =
      R"({"train_batch_size": 8, "activation_checkpointing": {"number_checkpoints": 2}})";
  auto off = resolve_run_config(text, 1, kPath, {});
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->notices.size(), 1u);
  EXPECT_NE(off->notices[0].find("--gradient_checkpointing"), std::string::npos);
  auto on = resolve_run_config(text, 1, kPath, {.gradient_checkpointing = true});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->notices.empty());
  EXPECT_TRUE(on->zerotrain.gradient_checkpointing);
}

// docs/offload.md "Threads": given counts are kept; chosen ones give a GPU rank's optimizer
// every core (its kernels need one thread to launch), and halve a CPU rank's cores between its
// kernels and an update off the training thread (at least one each); without one, the kernels
// take every core.
TEST(Threads, SplitBetweenTheKernelsAndTheOffloadedOptimizer) {
  struct Case {
    int cores;
    Device device;
    bool off_thread;
    int compute_flag, optimizer_key;
    ThreadSplit want;
  };
  const Case cases[] = {
      {8, Device::kCpu, true, 0, 0, {4, 4}},   {7, Device::kCpu, true, 0, 0, {4, 3}},
      {1, Device::kCpu, true, 0, 0, {1, 1}},   {8, Device::kCpu, false, 0, 0, {8, 8}},
      {8, Device::kCpu, true, 2, 0, {2, 4}},   {8, Device::kCpu, true, 0, 3, {5, 3}},
      {8, Device::kCpu, true, 1, 1, {1, 1}},   {16, Device::kCuda, true, 0, 0, {16, 16}},
      {16, Device::kCuda, true, 0, 6, {16, 6}},
  };
  for (const Case& c : cases) {
    const ThreadSplit got =
        split_threads(c.cores, c.device, c.off_thread, c.compute_flag, c.optimizer_key);
    EXPECT_EQ(got.compute, c.want.compute) << c.cores << " cores, flag " << c.compute_flag;
    EXPECT_EQ(got.optimizer, c.want.optimizer) << c.cores << " cores, key " << c.optimizer_key;
  }
}

// The one rule the thread split, the estimator's staging slots and the engine options read.
TEST(Threads, TheOffloadPipelineRunsWhereItsWorkerHasUnits) {
  struct Case {
    int stage;
    const char* offload;
    const char* optimizer;
    const char* zerotrain;
    bool want;
  };
  const Case cases[] = {
      {2, "cpu", "AdamW", "", true},
      {3, "nvme", "Lion", "", true},
      {1, "cpu", "AdamW", "", true},
      {2, "none", "AdamW", "", false},
      {2, "cpu", "Muon", "", false},
      {2, "cpu", "AdamW", R"("offload_pipeline": false)", false},
      {2, "cpu", "AdamW", R"("node_shared_params": true)", true},  // each rank its own slice
      {3, "cpu", "AdamW", R"("node_shared_params": true)", true},
  };
  for (const Case& c : cases) {
    const std::string offload =
        std::string(c.offload) == "nvme"
            ? R"({"device": "nvme", "nvme_path": "/tmp"})"
            : absl::StrCat(R"({"device": ")", c.offload, R"("})");
    const std::string json = absl::StrCat(
        R"({"train_batch_size": 8, "optimizer": {"type": ")", c.optimizer,
        R"(", "params": {"lr": 0.001}}, "zero_optimization": {"stage": )", c.stage,
        R"(, "offload_optimizer": )", offload, R"(}, "zerotrain": {)", c.zerotrain, "}}");
    absl::StatusOr<DsConfig> ds = resolve_run_config(json, 1, kPath, KeyFlags{});
    ASSERT_TRUE(ds.ok()) << ds.status() << "\n" << json;
    EXPECT_EQ(offload_pipeline_runs(*ds), c.want) << json;
  }
}

}  // namespace
}  // namespace zt

// ds_config.json parsing. References: DeepSpeed 0.19's defaults (deepspeed/runtime/
// constants.py, zero/config.py, zero/offload_config.py, swap_tensor/constants.py,
// precision_config.py) and its batch rule (config.py _set_batch_related_parameters).
#include "trainer/ds_config.h"

#include <filesystem>
#include <set>
#include <string>

#include "common/edit_distance.h"
#include "gtest/gtest.h"

namespace zt {
namespace {

// Success when `msg` contains every one of `parts`; the failure shows the message.
::testing::AssertionResult Contains(const std::string& msg,
                                    std::initializer_list<std::string> parts) {
  for (const auto& p : parts) {
    if (msg.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
    }
  }
  return ::testing::AssertionSuccess();
}

absl::StatusOr<DsConfig> parse(const std::string& text, int world = 1) {
  return parse_ds_config(text, world, "test.json");
}

// The error message of parsing `text`; fails the test when parsing succeeds.
std::string error_of(const std::string& text, int world = 1,
                     absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  auto r = parse(text, world);
  EXPECT_FALSE(r.ok()) << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), code) << r.status();
  return std::string(r.status().message());
}

TEST(DsConfig, MinimalConfigGetsDeepSpeedDefaults) {
  auto r = parse(R"({"train_batch_size": 8})");
  ASSERT_TRUE(r.ok()) << r.status();
  const DsConfig& c = *r;
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_FALSE(c.optimizer.specified);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_FALSE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 1);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_FALSE(c.prescale_gradients);
  EXPECT_EQ(c.gradient_predivide_factor, 1.0);
  const ZeroConfig& z = c.zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);
  EXPECT_FALSE(z.round_robin_gradients);
  EXPECT_EQ(z.offload_param.device, OffloadDevice::kNone);
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_EQ(z.offload_param.buffer_size, 100000000);
  EXPECT_EQ(z.offload_param.max_in_cpu, 1000000000);
  EXPECT_TRUE(z.offload_param.pin_memory);
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  EXPECT_TRUE(z.offload_optimizer.pin_memory);
  EXPECT_FALSE(z.offload_optimizer.pipeline_read);
  EXPECT_FALSE(z.offload_optimizer.pipeline_write);
  EXPECT_FALSE(z.offload_optimizer.fast_init);
  EXPECT_EQ(c.aio.block_size, 1048576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
}

// The parsed optimizer's hyper-parameters, as its type's struct.
const AdamWParams& adamw(const DsConfig& c) { return std::get<AdamWParams>(c.optimizer.params); }
const LionParams& lion(const DsConfig& c) { return std::get<LionParams>(c.optimizer.params); }
const AdagradParams& adagrad(const DsConfig& c) {
  return std::get<AdagradParams>(c.optimizer.params);
}
const MuonParams& muon(const DsConfig& c) { return std::get<MuonParams>(c.optimizer.params); }

TEST(DsConfig, OptimizerDefaultsAndAdamIsAdamWUnlessAdamWModeFalse) {
  auto r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "adam"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->optimizer.specified);
  EXPECT_EQ(r->optimizer.kind(), OptimizerKind::kAdamW);
  EXPECT_EQ(r->optimizer.lr, 1e-3);
  EXPECT_EQ(adamw(*r).beta1, 0.9);
  EXPECT_EQ(adamw(*r).beta2, 0.999);
  EXPECT_EQ(adamw(*r).eps, 1e-8);
  EXPECT_EQ(adamw(*r).weight_decay, 0.0);
  EXPECT_TRUE(adamw(*r).bias_correction);
  EXPECT_TRUE(adamw(*r).adam_w_mode);

  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
               "params": {"adam_w_mode": false, "lr": 3e-4, "betas": [0.8, 0.95],
                          "torch_adam": true, "amsgrad": false}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(adamw(*r).adam_w_mode);
  EXPECT_EQ(r->optimizer.lr, 3e-4);
  EXPECT_EQ(adamw(*r).beta2, 0.95);

  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "ADAMW",
               "params": {"adam_w_mode": false}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.kind(), OptimizerKind::kAdamW);
  EXPECT_TRUE(adamw(*r).adam_w_mode);
}

// Lion and Adagrad take DeepSpeed's defaults (DeepSpeedCPULion / FusedLion: lr 1e-3, betas
// (0.9, 0.999), weight_decay 0; torch.optim.Adagrad / DeepSpeedCPUAdagrad: lr 1e-2, eps 1e-10,
// lr_decay 0) and only the params their class takes: Adam's eps given to Lion is an unknown key.
TEST(DsConfig, LionAndAdagradTakeTheirOwnParamsAndDefaults) {
  auto r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Lion"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.kind(), OptimizerKind::kLion);
  EXPECT_EQ(r->optimizer.lr, 1e-3);
  EXPECT_EQ(lion(*r).beta1, 0.9);
  EXPECT_EQ(lion(*r).beta2, 0.999);
  EXPECT_EQ(lion(*r).weight_decay, 0.0);
  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "lion",
               "params": {"lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 0.1}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.lr, 1e-4);
  EXPECT_EQ(lion(*r).beta2, 0.98);
  EXPECT_EQ(lion(*r).weight_decay, 0.1);
  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.kind(), OptimizerKind::kAdagrad);
  EXPECT_EQ(r->optimizer.lr, 1e-2);
  EXPECT_EQ(adagrad(*r).eps, 1e-10);
  EXPECT_EQ(adagrad(*r).lr_decay, 0.0);
  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad",
               "params": {"lr": 0.05, "eps": 1e-8, "lr_decay": 0.01, "amsgrad": false}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.lr, 0.05);
  EXPECT_EQ(adagrad(*r).eps, 1e-8);
  EXPECT_EQ(adagrad(*r).lr_decay, 0.01);
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Lion",
                           "params": {"eps": 1e-8}}})"),
                       {"optimizer.params.eps: unknown key"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad",
                           "params": {"betas": [0.9, 0.99]}}})"),
                       {"optimizer.params.betas: unknown key"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad",
                           "params": {"initial_accumulator_value": 0.1}}})",
                                1, absl::StatusCode::kUnimplemented),
                       {"initial_accumulator_value", "not implemented"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Sophia"}})", 1,
                                absl::StatusCode::kUnimplemented),
                       {"optimizer.type", "\"Sophia\"", "\"Lion\"", "\"Adagrad\"", "\"Muon\""}));
}

// Muon (DeepSpeed's MuonWithAuxAdam): momentum 0.95 for the matrices, AdamW betas (0.9, 0.95)
// and eps 1e-10 for the rest. Each half has its lr as DeepSpeed's engine resolves it: muon_lr /
// adam_lr, else the shared lr, else MuonWithAuxAdam's 0.02 and 3e-4. The delayed update cannot
// gather a matrix, so it is refused with Muon.
TEST(DsConfig, MuonTakesEachHalfsLrAndDeepSpeedsDefaults) {
  auto r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "muon"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.kind(), OptimizerKind::kMuon);
  EXPECT_EQ(r->optimizer.lr, 0.02);
  EXPECT_EQ(r->optimizer.adam_lr, 3e-4);
  EXPECT_EQ(muon(*r).momentum, 0.95);
  EXPECT_EQ(muon(*r).adam.beta1, 0.9);
  EXPECT_EQ(muon(*r).adam.beta2, 0.95);
  EXPECT_EQ(muon(*r).adam.eps, 1e-10);
  EXPECT_EQ(muon(*r).adam.weight_decay, 0.0);
  EXPECT_TRUE(muon(*r).adam.adam_w_mode);
  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {"lr": 0.01,
               "momentum": 0.9, "betas": [0.8, 0.99], "eps": 1e-8, "weight_decay": 0.1,
               "ns_method": "standard"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.lr, 0.01);  // shared by both halves
  EXPECT_EQ(r->optimizer.adam_lr, 0.01);
  EXPECT_EQ(muon(*r).momentum, 0.9);
  EXPECT_EQ(muon(*r).adam.beta2, 0.99);
  EXPECT_EQ(muon(*r).adam.eps, 1e-8);
  EXPECT_EQ(muon(*r).adam.weight_decay, 0.1);
  EXPECT_EQ(r->optimizer.ns_method, "standard");
  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
               "params": {"lr": 0.01, "adam_lr": 1e-3}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.lr, 0.01);
  EXPECT_EQ(r->optimizer.adam_lr, 1e-3);
  r = parse(R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
               "params": {"muon_lr": 0.05}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optimizer.lr, 0.05);
  EXPECT_EQ(r->optimizer.adam_lr, 3e-4);
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
                           "params": {"momentum": 1.5}}})"),
                       {"optimizer.params.momentum"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
                           "params": {"adam_lr": -1}}})"),
                       {"optimizer.params.adam_lr"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
                           "params": {"ns_method": "cubic"}}})"),
                       {"optimizer.params.ns_method", "gram"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
                           "params": {"muon_lr": 0.02}}})"),
                       {"optimizer.params.muon_lr: unknown key"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Muon"},
                           "zero_optimization": {"stage": 2,
                           "offload_optimizer": {"device": "cpu"}},
                           "zerotrain": {"delayed_param_update": {"enabled": true}}})",
                                1, absl::StatusCode::kUnimplemented),
                       {"delayed_param_update", "Muon"}));
}

// csv_monitor and tensorboard as DeepSpeed's CSVConfig and TensorBoardConfig: off, output_path
// "", job_name "DeepSpeedJobName", writing into output_path/job_name; their
// keys only (a typo is named); an empty job_name would write into output_path itself.
TEST(DsConfig, CsvMonitorAndTensorBoardTakeDeepSpeedsKeys) {
  for (const std::string name : {"csv_monitor", "tensorboard"}) {
    SCOPED_TRACE(name);
    auto monitor = [&](const DsConfig& c) {
      return name == "csv_monitor" ? c.csv_monitor : c.tensorboard;
    };
    auto r = parse(R"({"train_batch_size": 8})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(monitor(*r).enabled);
    EXPECT_EQ(monitor(*r).output_path, "");
    EXPECT_EQ(monitor(*r).job_name, "DeepSpeedJobName");
    EXPECT_EQ(monitor(*r).dir(), "DeepSpeedJobName");
    r = parse(R"({"train_batch_size": 8, ")" + name +
              R"(": {"enabled": true, "output_path": "logs", "job_name": "run1"}})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(monitor(*r).enabled);
    EXPECT_EQ(monitor(*r).output_path, "logs");
    EXPECT_EQ(monitor(*r).job_name, "run1");
    EXPECT_EQ(monitor(*r).dir(), "logs/run1");
    EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, ")" + name +
                                  R"(": {"enabled": true, "output_dir": "logs/"}})"),
                         {name + ".output_dir", "output_path"}));
    EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, ")" + name +
                                  R"(": {"enabled": true, "job_name": ""}})"),
                         {name + ".job_name"}));
  }
}

// wandb and comet need their services: disabled (with DeepSpeed's keys) they are accepted, as
// a DeepSpeed config often carries them; enabled, refused with the way to the same curves.
TEST(DsConfig, WandbAndCometAreRefusedOnlyWhenEnabled) {
  EXPECT_TRUE(parse(R"({"train_batch_size": 8, "wandb": {"enabled": false, "project": "p"},
                       "comet": {"enabled": false, "workspace": "w"}})")
                  .ok());
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "wandb": {"enabled": true}})", 1,
                                absl::StatusCode::kUnimplemented),
                       {"wandb.enabled", "csv_monitor"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "comet": {"enabled": true}})", 1,
                                absl::StatusCode::kUnimplemented),
                       {"comet.enabled", "csv_monitor"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "wandb": {"projekt": "p"}})"),
                       {"wandb.projekt", "project"}));
}

TEST(DsConfig, SchedulerDefaultsAsDeepSpeed) {
  auto r = parse(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->scheduler.type, SchedulerType::kWarmupLR);
  EXPECT_EQ(r->scheduler.warmup_min_lr, 0.0);
  EXPECT_FALSE(r->scheduler.warmup_max_lr.has_value());  // -> optimizer lr
  EXPECT_EQ(r->scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(r->scheduler.warmup_type, WarmupType::kLog);

  r = parse(R"({"train_batch_size": 8,
                "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->scheduler.warmup_max_lr.value_or(-1), 0.001);
  EXPECT_EQ(r->scheduler.total_num_steps, 10);

  r = parse(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR",
                "params": {"total_num_steps": 100, "warmup_type": "linear"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->scheduler.warmup_min_ratio, 0.0);
  EXPECT_EQ(r->scheduler.cos_min_ratio, 1e-4);
  EXPECT_EQ(r->scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(r->scheduler.warmup_type, WarmupType::kLinear);
}

TEST(DsConfig, BatchTripleResolvedAsDeepSpeed) {
  struct Case {
    const char* json;
    int world;
    int64_t tbs, micro, gas;
  };
  for (const Case& c : {
           Case{R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 4, 64, 4, 4},
           Case{R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 4, 64, 8, 2},
           Case{R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 4, 32,
                4, 2},
           Case{R"({"train_batch_size": 32})", 4, 32, 8, 1},
           Case{R"({"train_micro_batch_size_per_gpu": 3})", 5, 15, 3, 1},
           Case{R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 3,
                    "gradient_accumulation_steps": 4})",
                2, 24, 3, 4},
           Case{R"({"train_batch_size": 6.4e1})", 2, 64, 32, 1},
       }) {
    auto r = parse(c.json, c.world);
    ASSERT_TRUE(r.ok()) << c.json << ": " << r.status();
    EXPECT_EQ(r->batch.train_batch_size, c.tbs) << c.json;
    EXPECT_EQ(r->batch.train_micro_batch_size_per_gpu, c.micro) << c.json;
    EXPECT_EQ(r->batch.gradient_accumulation_steps, c.gas) << c.json;
  }
}

TEST(DsConfig, BatchErrorsShowNumbersAndKeyToChange) {
  const std::string world_only = error_of(R"({"train_batch_size": 30})", 4);
  EXPECT_TRUE(Contains(world_only, {"test.json", "train_batch_size 30", "divisible by world size 4,",
                                    "multiple of 4"}));
  EXPECT_TRUE(
      Contains(error_of(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 2),
               {"= 8", "change train_batch_size"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                           "gradient_accumulation_steps": 2})",
                                2),
                       {"32 != ", "= 16", "change train_batch_size to 16"}));
  EXPECT_TRUE(Contains(error_of(R"({})"), {"give train_batch_size or "
                                           "train_micro_batch_size_per_gpu"}));
  EXPECT_TRUE(
      Contains(error_of(R"({"gradient_accumulation_steps": 4})"), {"give train_batch_size"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 0})"),
                       {"train_batch_size", "out of range", "[1, "}));
}

TEST(DsConfig, UnknownTopLevelKeyNamesClosestKey) {
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "gradient_clippin": 1.0})"),
                       {"gradient_clippin: unknown key", "did you mean 'gradient_clipping'?"}));
}

TEST(DsConfig, UnknownNestedKeyNamesPathAndSuggestion) {
  EXPECT_TRUE(
      Contains(error_of(R"({"train_batch_size": 8,
                           "zero_optimization": {"stage": 0, "overlap_com": true}})"),
               {"zero_optimization.overlap_com: unknown key", "did you mean 'overlap_comm'?"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization":
                           {"offload_optimizer": {"devise": "none"}}})"),
                       {"zero_optimization.offload_optimizer.devise", "did you mean 'device'?"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                           "params": {"weight_decy": 0.1}}})"),
                       {"optimizer.params.weight_decy", "did you mean 'weight_decay'?"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR",
                           "params": {"total_num_steps": 9, "warmup_max_lr": 0.1}}})"),
                       {"scheduler.params.warmup_max_lr: unknown key", "valid keys"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "aio": {"queue_dpth": 8}})"),
                       {"did you mean 'queue_depth'?"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "fp16": {"hysterisis": 2}})"),
                       {"fp16.hysterisis"}));
}

TEST(DsConfig, WrongTypeNamesPathValueAndAllowed) {
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "fp16": {"enabled": "yes"}})"),
                       {"fp16.enabled", "expected a boolean", "\"yes\""}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1.5}})"),
                       {"zero_optimization.stage", "not an integer", "[0, 3]"}));
  // An integral float past the range is too large (or out of range below it), not "not an
  // integer", also past int64's range; null is said once.
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1e30}})"),
                       {"zero_optimization.stage", "1e+30 is too large", "[0, 3]"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 1e30})"),
                       {"train_batch_size", "1e+30 is too large"}));
  EXPECT_TRUE(Contains(
      error_of(R"({"train_batch_size": 8, "zero_optimization": {"mics_shard_size": -1e30}})"),
      {"mics_shard_size", "is out of range"}));
  const std::string null_bool = error_of(R"({"train_batch_size": 8, "fp16": {"enabled": null}})");
  EXPECT_TRUE(Contains(null_bool, {"fp16.enabled", "expected a boolean", "got null"}));
  EXPECT_FALSE(Contains(null_bool, {"null null"})) << null_bool;
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization": 3})"),
                       {"zero_optimization", "expected an object"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                           "params": {"betas": 0.9}}})"),
                       {"optimizer.params.betas", "two numbers"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization":
                           {"offload_param": {"device": "gpu"}}})"),
                       {"offload_param.device", "\"gpu\"", "\"none\", \"cpu\", \"nvme\""}));
  EXPECT_TRUE(Contains(error_of(R"([1, 2])"), {"top level: expected an object"}));
}

TEST(DsConfig, OutOfRangeValues) {
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "gradient_clipping": -1})"),
                       {"gradient_clipping", "-1", ">= 0"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization":
                           {"reduce_bucket_size": 0}})"),
                       {"zero_optimization.reduce_bucket_size", ">= 1"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR",
                           "params": {"warmup_num_steps": 0}}})"),
                       {"scheduler.params.warmup_num_steps"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                           "params": {"betas": [0.9, 1.0]}}})"),
                       {"[0, 1)"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR",
                           "params": {"warmup_type": "cosine"}}})"),
                       {"warmup_type", "\"log\", \"linear\""}));
}

TEST(DsConfig, AutoIsAHuggingFacePlaceholder) {
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": "auto"})"),
                       {"train_batch_size", "Hugging Face", "give a number"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                           "params": {"lr": "auto"}}})"),
                       {"optimizer.params.lr", "placeholder"}));
}

// The "zerotrain" block: device_memory_limit in bytes or with a binary / decimal unit.
TEST(DsConfig, ZerotrainBlockDeviceMemoryLimit) {
  auto limit = [](const std::string& v) -> absl::StatusOr<int64_t> {
    auto c = parse_ds_config(R"({"train_batch_size": 8, "zerotrain": {"device_memory_limit": )" +
                                 v + "}}",
                             1, "test.json");
    if (!c.ok()) return c.status();
    return c->zerotrain.device_memory_limit;
  };
  EXPECT_EQ(*limit(R"("8GiB")"), int64_t{8} << 30);
  EXPECT_EQ(*limit(R"("512 MiB")"), int64_t{512} << 20);
  EXPECT_EQ(*limit(R"("7.5GB")"), int64_t{7'500'000'000});
  EXPECT_EQ(*limit("1000"), 1000);
  EXPECT_EQ(*limit("0"), 0);
  for (const char* bad : {R"("8 GiBs")", R"("GiB")", "-5", "1.5", "true", R"("-1GiB")"}) {
    auto r = limit(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find("zerotrain.device_memory_limit"),
              std::string::npos)
        << r.status();
  }
  auto typo = parse_ds_config(R"({"train_batch_size": 8, "zerotrain": {"device_memory": 1}})", 1,
                              "test.json");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(std::string(typo.status().message()).find("device_memory_limit"), std::string::npos);
}

// "zerotrain": {"delayed_param_update": {...}}: enabled and warmup_steps (default 10); it
// needs an offloaded optimizer, and a typo or a negative warm-up is named.
TEST(DsConfig, ZerotrainBlockDelayedParamUpdate) {
  auto parse = [](const std::string& dpu, const std::string& offload) {
    return parse_ds_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2)" +
                               offload + R"(}, "zerotrain": {"delayed_param_update": )" + dpu +
                               "}}",
                           1, "test.json");
  };
  const std::string cpu = R"(, "offload_optimizer": {"device": "cpu"})";
  auto c = parse(R"({"enabled": true, "warmup_steps": 40})", cpu);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->zerotrain.delayed_param_update);
  EXPECT_EQ(c->zerotrain.delayed_param_update_warmup, 40);
  c = parse(R"({"enabled": true})", cpu);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->zerotrain.delayed_param_update_warmup, 10);
  EXPECT_TRUE(parse(R"({"enabled": false})", "").ok());
  auto no_offload = parse(R"({"enabled": true})", "");
  ASSERT_FALSE(no_offload.ok());
  EXPECT_NE(std::string(no_offload.status().message()).find("offload_optimizer.device"),
            std::string::npos)
      << no_offload.status();
  for (const char* bad : {R"({"enabled": true, "warmup_steps": -1})", R"({"enable": true})"}) {
    auto r = parse(bad, cpu);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find("zerotrain.delayed_param_update"),
              std::string::npos)
        << r.status();
  }
}

// A stage-2 ds_config with the "zerotrain" block `zt`, for one rank.
absl::StatusOr<DsConfig> parse_zerotrain_block(const std::string& zt) {
  return parse_ds_config(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 2}, "zerotrain": )" + zt + "}", 1,
      "test.json");
}

// "zerotrain": {"node_shared_params": bool}, default false; a non-boolean is named.
TEST(DsConfig, ZerotrainBlockNodeSharedParams) {
  const auto parse = parse_zerotrain_block;
  auto c = parse(R"({"node_shared_params": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->zerotrain.node_shared_params);
  c = parse("{}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->zerotrain.node_shared_params);
  c = parse(R"({"node_shared_params": "yes"})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("zerotrain.node_shared_params"),
            std::string::npos)
      << c.status();
}

// "zerotrain": {"offload_pipeline": bool (default true), "optimizer_threads": int >= 0 (default
// 0, chosen from the cores)}; a wrong type or a negative count is named.
TEST(DsConfig, ZerotrainBlockOffloadPipelineAndOptimizerThreads) {
  const auto parse = parse_zerotrain_block;
  auto c = parse("{}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->zerotrain.offload_pipeline);
  EXPECT_EQ(c->zerotrain.optimizer_threads, 0);
  c = parse(R"({"offload_pipeline": false, "optimizer_threads": 3})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->zerotrain.offload_pipeline);
  EXPECT_EQ(c->zerotrain.optimizer_threads, 3);
  for (const auto& [bad, key] :
       {std::pair{R"({"offload_pipeline": "no"})", "zerotrain.offload_pipeline"},
        std::pair{R"({"optimizer_threads": -1})", "zerotrain.optimizer_threads"},
        std::pair{R"({"optimizer_threads": 1.5})", "zerotrain.optimizer_threads"}}) {
    c = parse(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(std::string(c.status().message()).find(key), std::string::npos) << c.status();
  }
}

// ZeRO++'s keys (DeepSpeed's names and defaults: off, hpZ partition size 1), stage 3 only;
// MiCS's group size at stages 1-3.
TEST(DsConfig, ZeroppAndMicsKeys) {
  auto r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->zero.zero_quantized_weights);
  EXPECT_EQ(r->zero.zero_hpz_partition_size, 1);
  EXPECT_FALSE(r->zero.zero_quantized_gradients);
  r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
               "zero_quantized_weights": true, "zero_hpz_partition_size": 8,
               "zero_quantized_gradients": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->zero.zero_quantized_weights);
  EXPECT_EQ(r->zero.zero_hpz_partition_size, 8);
  EXPECT_TRUE(r->zero.zero_quantized_gradients);
  r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
               "zero_quantized_gradients": true}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("set \"stage\": 3"), std::string::npos) << r.status();
  r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
               "zero_hpz_partition_size": 0}})");
  EXPECT_FALSE(r.ok());
  // MiCS: DeepSpeed's -1 (off) by default; a group size at stages 1-3; 0 and stage 0 refused;
  // the hierarchical gather (for groups spanning nodes) is not implemented.
  r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zero.mics_shard_size, -1);
  r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "mics_shard_size": 8}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zero.mics_shard_size, 8);
  for (const char* bad : {R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
                             "mics_shard_size": 0}})",
                          R"({"train_batch_size": 8, "zero_optimization": {"stage": 0,
                             "mics_shard_size": 2}})",
                          R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                             "mics_shard_size": 2, "mics_hierarchical_params_gather": true}})"}) {
    r = parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("mics_"), std::string::npos) << r.status();
  }
  r = parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "mics_shard_size": 2},
               "zerotrain": {"node_shared_params": true}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node_shared_params"), std::string::npos) << r.status();
}

TEST(DsConfig, NotImplementedFeaturesSaySo) {
  auto unimpl = absl::StatusCode::kUnimplemented;
  EXPECT_TRUE(parse_ds_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})", 1,
                              "test.json")
                  .ok());
  // Parameter offload (stage 3) and optimizer offload, to CPU memory and to NVMe, are
  // implemented.
  for (const char* what : {R"("stage": 2, "offload_optimizer")", R"("stage": 3, "offload_param")"})
    for (const char* dev : {R"("cpu", "pin_memory": true)", R"("nvme", "nvme_path": "/tmp")"})
      EXPECT_TRUE(parse_ds_config(absl::StrCat(R"({"train_batch_size": 8, "zero_optimization": {)",
                                               what, R"(: {"device": )", dev, "}}}"),
                                  1, "test.json")
                      .ok())
          << what << " " << dev;
  EXPECT_TRUE(
      parse_ds_config(R"({"train_batch_size": 8, "fp16": {"enabled": true}})", 1, "test.json")
          .ok());
  EXPECT_TRUE(
      Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}})", 1, unimpl),
               {"optimizer.type", "not implemented in this build", "\"Adam\", \"AdamW\""}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                           "params": {"amsgrad": true}}})",
                                1, unimpl),
                       {"amsgrad"}));
  EXPECT_TRUE(
      Contains(error_of(R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle"}})", 1, unimpl),
               {"not implemented in this build"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "autotuning": {}})", 1, unimpl),
                       {"autotuning", "known DeepSpeed"}));
  // comms_logger is read (DeepSpeed's keys).
  auto cl = parse_ds_config(R"({"train_batch_size": 8, "comms_logger": {"enabled": true,
                                "verbose": true, "prof_all": false, "debug": false,
                                "prof_ops": ["all_reduce", "all_gather_into_tensor"]}})",
                            1, "test.json");
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->comms_logger);
  EXPECT_TRUE(cl->comms_logger_options.verbose);
  EXPECT_FALSE(cl->comms_logger_options.prof_all);
  EXPECT_EQ(cl->comms_logger_options.prof_ops,
            (std::set<std::string>{"all_reduce", "all_gather_into_tensor"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "comms_logger": {"prof_ops": "x"}})", 1,
                                absl::StatusCode::kInvalidArgument),
                       {"comms_logger.prof_ops", "list of operation names"}));
  // flops_profiler is read (DeepSpeed's keys; the per-module ones are accepted).
  auto fp = parse_ds_config(R"({"train_batch_size": 8, "flops_profiler": {"enabled": true,
                                "profile_step": 3, "module_depth": -1, "top_modules": 1,
                                "detailed": true, "output_file": "p.txt"}})",
                            1, "test.json");
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_TRUE(fp->flops_profiler.enabled);
  EXPECT_EQ(fp->flops_profiler.profile_step, 3);
  EXPECT_EQ(fp->flops_profiler.output_file, "p.txt");
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "flops_profiler": {"profile_step": 0}})",
                                1, absl::StatusCode::kInvalidArgument),
                       {"flops_profiler.profile_step", "out of range"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "flops_profiler": {"enabeld": true}})",
                                1, absl::StatusCode::kInvalidArgument),
                       {"enabeld"}));
  // activation_checkpointing is read.
  auto ac = parse_ds_config(R"({"train_batch_size": 8, "activation_checkpointing": {
                                "number_checkpoints": 4, "synchronize_checkpoint_boundary": true,
                                "cpu_checkpointing": true}})",
                            1, "test.json");
  ASSERT_TRUE(ac.ok()) << ac.status();
  EXPECT_EQ(ac->activation_checkpointing.number_checkpoints, 4);
  EXPECT_TRUE(ac->activation_checkpointing.cpu_checkpointing);
  ASSERT_EQ(ac->notices.size(), 1u);
  EXPECT_TRUE(Contains(ac->notices[0], {"activation_checkpointing.synchronize_checkpoint_boundary"}));
  // Known DeepSpeed keys at their defaults are accepted.
  EXPECT_TRUE(parse(R"({"train_batch_size": 8, "zero_allow_untested_optimizer": false,
                        "zero_optimization": {"ignore_unused_parameters": true}})")
                  .ok());
}

TEST(DsConfig, SemanticErrors) {
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true},
                           "bf16": {"enabled": true}})"),
                       {"enable at most one"}));
  EXPECT_TRUE(
      Contains(error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR"}})"),
               {"scheduler.params.total_num_steps", "required"}));
  EXPECT_TRUE(
      Contains(error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosinLR"}})"),
               {"did you mean 'WarmupCosineLR'?"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                           "offload_optimizer": {"device": "nvme"}}})"),
                       {"offload_optimizer.nvme_path: required"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1,
                           "offload_param": {"device": "cpu"}}})"),
                       {"needs stage 3"}));
  EXPECT_TRUE(Contains(error_of(R"({"train_batch_size": 8, "zero_optimization": {
                           "max_live_parameters": 1, "stage3_max_live_parameters": 1}})"),
                       {"keep only one"}));
}

TEST(DsConfig, IntegralFloatsAliasesAndDynamicDefaults) {
  auto r = parse(R"({"train_batch_size": 8, "steps_per_print": null, "bfloat16": {"enabled": true},
                     "zero_optimization": {"stage": 0, "allgather_bucket_size": 2e8,
                       "prefetch_bucket_size": 1e6,
                       "stage3_gather_fp16_weights_on_model_save": true},
                     "aio": {"thread_count": 4, "block_size": 262144}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zero.allgather_bucket_size, 200000000);
  EXPECT_EQ(r->zero.stage3_prefetch_bucket_size, 1000000);
  EXPECT_TRUE(r->zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(r->aio.intra_op_parallelism, 4);
  EXPECT_EQ(r->aio.block_size, 262144);
  EXPECT_TRUE(r->bf16.enabled);
  EXPECT_EQ(r->steps_per_print, 0);
  EXPECT_FALSE(r->zero.overlap_comm);  // stage 0 -> false
}

TEST(DsConfig, MalformedJsonGivesFileAndLine) {
  EXPECT_TRUE(Contains(error_of("{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}"),
                       {"test.json", "malformed JSON", "line 3"}));
}

TEST(DsConfig, MissingFileNamesPath) {
  auto r = load_ds_config("/nonexistent/ds_config.json", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(r.status().message()), {"/nonexistent/ds_config.json"}));
}

TEST(DsConfig, EditDistance) {
  EXPECT_EQ(edit_distance("overlap_com", "overlap_comm"), 1);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
}

// Files in configs/ds/ that need features this build lacks (none now).
const std::set<std::string> kSkipUnimplemented = {};

TEST(DsConfig, EveryExampleConfigParses) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(ZT_SOURCE_DIR) / "configs" / "ds";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    if (kSkipUnimplemented.count(e.path().filename().string())) continue;
    auto r = load_ds_config(e.path().string(), 8);
    EXPECT_TRUE(r.ok()) << r.status();
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST(DsConfig, Zero0ExampleIsASmallModelRecipe) {
  auto r = load_ds_config(std::string(ZT_SOURCE_DIR) + "/configs/ds/zero0.json", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->zero.stage, 0);
  EXPECT_EQ(r->optimizer.kind(), OptimizerKind::kAdamW);
  EXPECT_EQ(r->scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(r->gradient_clipping, 1.0);
  EXPECT_FALSE(r->bf16.enabled);
  EXPECT_EQ(r->batch.train_batch_size, 32);
}

}  // namespace
}  // namespace zt

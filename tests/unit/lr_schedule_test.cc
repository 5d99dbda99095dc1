// LR schedules against DeepSpeed itself: tests/fixtures/lr_reference.json is written by
// scripts/make_lr_reference.py from deepspeed/runtime/lr_schedules.py (DeepSpeed 0.19).
#include "trainer/lr_schedule.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/json_fixture.h"
#include "trainer/ds_config.h"

namespace zt {
namespace {

using json = nlohmann::json;

json load_fixture() { return load_json_fixture("lr_reference.json", "make_lr_reference.py"); }

TEST(LrSchedule, MatchesDeepSpeedLrSchedulesPerOptimizerStep) {
  json fixture = load_fixture();
  ASSERT_GE(fixture["cases"].size(), 9u);
  for (const json& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    // The scheduler section goes through the real parser, so DeepSpeed's defaults are tested.
    json cfg = {{"train_batch_size", 8},
                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", c["optimizer_lr"]}}}}},
                {"scheduler", c["scheduler"]}};
    auto parsed = parse_ds_config(cfg.dump(), 1, "<fixture>");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const auto& steps = c["steps"];
    const auto& lrs = c["lrs"];
    ASSERT_EQ(steps.size(), lrs.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      int64_t step = steps[i].get<int64_t>();
      double want = lrs[i].get<double>();
      double got = lr_at(parsed->scheduler, parsed->optimizer.lr, step);
      EXPECT_LE(std::fabs(got - want), 1e-9 * std::fabs(want))
          << "step " << step << " want " << want << " got " << got;
    }
  }
}

TEST(LrSchedule, NoSchedulerIsConstantBaseLr) {
  SchedulerConfig none;
  for (int64_t step : {0, 1, 7, 1000000}) EXPECT_EQ(lr_at(none, 3e-4, step), 3e-4);
}

// DeepSpeed's engine steps the scheduler after each optimizer step, so the first two
// optimizer steps of a warm-up both run at the minimum lr.
TEST(LrSchedule, FirstStepsUseMinimumAsDeepSpeedEngine) {
  SchedulerConfig s;
  s.type = SchedulerType::kWarmupLR;
  s.warmup_min_lr = 1e-5;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 100;
  EXPECT_EQ(lr_at(s, 0.5, 0), 1e-5);
  EXPECT_EQ(lr_at(s, 0.5, 1), 1e-5);
  EXPECT_GT(lr_at(s, 0.5, 2), 1e-5);
  EXPECT_EQ(lr_at(s, 0.5, 101), 1e-3);
  s.type = SchedulerType::kWarmupCosineLR;
  s.total_num_steps = 1000;
  EXPECT_EQ(lr_at(s, 0.5, 0), 0.0);
  EXPECT_NEAR(lr_at(s, 0.5, 5000), 0.5 * s.cos_min_ratio, 1e-15);
}

}  // namespace
}  // namespace zt

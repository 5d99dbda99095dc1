// fp16 loss scaler against DeepSpeed itself: tests/fixtures/loss_scaler_reference.json is written
// by scripts/make_loss_scaler_reference.py from deepspeed/runtime/fp16/loss_scaler.py
// (DynamicLossScaler, DeepSpeed 0.19), replayed here step by step with exact equality.
#include "zero/loss_scaler.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/json_fixture.h"

namespace zt {
namespace {

using json = nlohmann::json;

json load_fixture() {
  return load_json_fixture("loss_scaler_reference.json", "make_loss_scaler_reference.py");
}

TEST(LossScaler, MatchesDeepSpeedDynamicLossScalerPerStep) {
  json fixture = load_fixture();
  ASSERT_GE(fixture["cases"].size(), 20u);
  int errors_seen = 0;
  for (const json& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const json& f = c["fp16"];
    LossScalerConfig cfg{.loss_scale = f["loss_scale"].get<double>(),
                         .initial_scale_power = f["initial_scale_power"].get<int>(),
                         .loss_scale_window = f["loss_scale_window"].get<int>(),
                         .hysteresis = f["hysteresis"].get<int>(),
                         .consecutive_hysteresis = f["consecutive_hysteresis"].get<bool>(),
                         .min_loss_scale = f["min_loss_scale"].get<double>()};
    LossScaler scaler(cfg);
    ASSERT_TRUE(scaler.dynamic());
    ASSERT_EQ(scaler.scale(), c["initial_scale"].get<double>());
    const std::string overflow = c["overflow"].get<std::string>();
    const std::string skip = c["skip"].get<std::string>();
    const json& scales = c["scales"];
    const int64_t error_at = c["error_at"].get<int64_t>();
    int64_t skipped = 0;
    for (size_t k = 0; k < overflow.size(); ++k) {
      double before = scaler.scale();
      absl::StatusOr<bool> skipped_now = scaler.update(overflow[k] == '1');
      if (static_cast<int64_t>(k) == error_at) {
        ASSERT_FALSE(skipped_now.ok()) << "step " << k << ": DeepSpeed raised here";
        EXPECT_EQ(scaler.scale(), before);
        EXPECT_EQ(scaler.scale(), cfg.min_loss_scale);
        ++errors_seen;
        break;
      }
      ASSERT_TRUE(skipped_now.ok()) << "step " << k << ": " << skipped_now.status();
      ASSERT_EQ(*skipped_now, skip[k] == '1') << "step " << k;
      ASSERT_EQ(scaler.scale(), scales[k].get<double>()) << "step " << k;
      skipped += *skipped_now;
    }
    EXPECT_EQ(scaler.skipped_steps(), skipped);
  }
  EXPECT_GE(errors_seen, 5);  // the min-scale cases and some random ones end in DeepSpeed's error
}

TEST(LossScaler, DefaultsAreDeepSpeedFp16Defaults) {
  LossScaler scaler(LossScalerConfig{});
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0);
  // Window 1000: the first doubling is on the 1001st clean step.
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(*scaler.update(false));
  EXPECT_EQ(scaler.scale(), 65536.0);
  ASSERT_FALSE(*scaler.update(false));
  EXPECT_EQ(scaler.scale(), 131072.0);
  // Hysteresis 2: the first overflow is absorbed, the second halves; both are skipped.
  EXPECT_TRUE(*scaler.update(true));
  EXPECT_EQ(scaler.scale(), 131072.0);
  EXPECT_TRUE(*scaler.update(true));
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(LossScaler, StaticScaleNeverChangesAndSkipsOverflows) {
  LossScaler scaler(LossScalerConfig{
      .loss_scale = 128, .loss_scale_window = 1, .hysteresis = 1, .min_loss_scale = 128});
  EXPECT_FALSE(scaler.dynamic());
  for (int i = 0; i < 50; ++i) {
    bool overflow = i % 3 == 0;
    absl::StatusOr<bool> skip = scaler.update(overflow);
    ASSERT_TRUE(skip.ok());  // no min-scale error for a static scale
    EXPECT_EQ(*skip, overflow);
    EXPECT_EQ(scaler.scale(), 128.0);
  }
  EXPECT_EQ(scaler.skipped_steps(), 17);
}

TEST(LossScaler, OverflowAtMinimumScaleIsAnErrorNamingTheKey) {
  LossScaler scaler(LossScalerConfig{.initial_scale_power = 1, .hysteresis = 1});
  EXPECT_TRUE(*scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1.0);
  absl::StatusOr<bool> r = scaler.update(true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fp16.min_loss_scale"), std::string::npos) << r.status();
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

}  // namespace
}  // namespace zt

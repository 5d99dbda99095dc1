// fp16 loss scaling with DeepSpeed 0.19's semantics (deepspeed/runtime/fp16/loss_scaler.py:
// LossScaler for a static scale, DynamicLossScaler as ZeRO stages 1-3 build it through
// CreateLossScaler, i.e. raise_error_at_min_scale = true). Checked step by step against
// DeepSpeed itself by tests/unit/loss_scaler_test.cc (fixture:
// scripts/make_loss_scaler_reference.py).
//
// Static (loss_scale > 0): the scale never changes; an overflowing step is still skipped.
// Dynamic (loss_scale == 0): scale starts at 2^initial_scale_power, the hysteresis counter h at
// `hysteresis`. update(overflow) is called once per optimizer step t = 0, 1, 2, ...:
//   overflow:  the step is skipped.
//              If hysteresis == 1 or h == 1: error if scale == min_loss_scale, otherwise
//              scale = max(scale / 2, min_loss_scale) (so a scale below the minimum jumps up to
//              it). Else h -= 1 (scale unchanged, even at the minimum).
//              Either way last_overflow = t (a hysteresis-absorbed overflow also restarts the
//              clean-step count).
//   clean:     if consecutive_hysteresis, h = hysteresis.
//              stable = t - last_overflow - 1 (clean steps before this one since the last
//              overflow; last_overflow starts at -1). If stable > 0 and stable % window == 0:
//              scale *= 2, and h = hysteresis when not consecutive_hysteresis.
//   So the scale first doubles on the (window + 1)-th consecutive clean step, then every
//   `window` clean steps after that (doubling does not restart the count). h is not refilled
//   by halving: with hysteresis 2 and no consecutive_hysteresis, after the first absorbed
//   overflow every later overflow halves until a doubling refills h.
// The engine must unscale this step's gradients by scale() read BEFORE update() (DeepSpeed's
// prev_scale); update() sets the scale for the next step's backward.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "zero/deepspeed_defaults.h"

namespace zt {

// The ds_config "fp16" keys (trainer/ds_config.h validates them: window, hysteresis >= 1,
// min_loss_scale > 0; the constructor checks those as invariants).
struct LossScalerConfig {
  double loss_scale = 0;  // 0 = dynamic; > 0 = static scale
  int initial_scale_power = ds_default::kInitialScalePower;
  int loss_scale_window = ds_default::kLossScaleWindow;
  int hysteresis = ds_default::kHysteresis;
  bool consecutive_hysteresis = false;
  double min_loss_scale = ds_default::kMinLossScale;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  // Multiply the loss (the backward's seed gradient) by this.
  double scale() const { return scale_; }
  bool dynamic() const { return config_.loss_scale == 0; }

  // Called once per optimizer step with whether any rank saw a non-finite gradient (the engine
  // reduces the flag across ranks first). Returns whether to skip this step and updates the
  // scale. Error (state unchanged) on an overflow that would halve a scale already at
  // min_loss_scale, as DeepSpeed raises there.
  absl::StatusOr<bool> update(bool overflow);

  int64_t skipped_steps() const { return skipped_steps_; }

  // Everything update() depends on, for checkpoints: restoring it continues bit for bit.
  struct State {
    double scale;
    int hysteresis_left;
    int64_t iter, last_overflow, skipped_steps;
  };
  State state() const { return {scale_, hysteresis_left_, iter_, last_overflow_, skipped_steps_}; }
  void restore(const State& s) {
    scale_ = s.scale, hysteresis_left_ = s.hysteresis_left, iter_ = s.iter;
    last_overflow_ = s.last_overflow, skipped_steps_ = s.skipped_steps;
  }

 private:
  LossScalerConfig config_;
  double scale_;
  int hysteresis_left_;         // DeepSpeed's cur_hysteresis
  int64_t iter_ = 0;            // cur_iter: update() calls so far
  int64_t last_overflow_ = -1;  // last_overflow_iter
  int64_t skipped_steps_ = 0;
};

}  // namespace zt

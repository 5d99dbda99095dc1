// fp16 loss scaler; the rules are stated in loss_scaler.h.
#include "zero/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"

namespace zt {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config),
      scale_(config.loss_scale > 0 ? config.loss_scale
                                   : std::ldexp(1.0, config.initial_scale_power)),
      hysteresis_left_(config.hysteresis) {
  ZT_CHECK(config.loss_scale >= 0);
  if (dynamic()) {
    ZT_CHECK(config.loss_scale_window >= 1);
    ZT_CHECK(config.hysteresis >= 1);
    ZT_CHECK(config.min_loss_scale > 0);
  }
}

absl::StatusOr<bool> LossScaler::update(bool overflow) {
  if (!dynamic()) {
    if (overflow) ++skipped_steps_;
    return overflow;
  }
  if (overflow) {
    if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ == config_.min_loss_scale) {
        return absl::FailedPreconditionError(absl::StrCat(
            "fp16 gradients overflowed at the minimum loss scale ", scale_,
            " (fp16.min_loss_scale); cannot decrease the scale any further (DeepSpeed stops "
            "the run here too). Lower fp16.min_loss_scale, lower the learning rate, or train "
            "in bf16."));
      }
      scale_ = std::max(scale_ / 2, config_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_ = iter_;
    ++skipped_steps_;
  } else {
    if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
    int64_t stable = iter_ - last_overflow_ - 1;
    if (stable > 0 && stable % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
      scale_ *= 2;
    }
  }
  ++iter_;
  return overflow;
}

}  // namespace zt

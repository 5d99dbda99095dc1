// DeepSpeed 0.19 LR schedules as pure functions of the step (see lr_schedule.h).
#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace zt {
namespace {

// Warm-up factor g(t) for t < W, in [0, 1): ln(t+1)/ln(W) or t/W.
double warmup_factor(WarmupType type, double t, double w) {
  if (type == WarmupType::kLog) return (1.0 / std::log(w)) * std::log(t + 1.0);
  return t / w;
}

}  // namespace

double lr_at(const SchedulerConfig& s, double base_lr, int64_t step) {
  if (s.type == SchedulerType::kNone) return base_lr;
  const int64_t t = step - 1;  // DeepSpeed's last_batch_iteration
  const int64_t w = std::max<int64_t>(2, s.warmup_num_steps);
  const double td = static_cast<double>(t), wd = static_cast<double>(w);
  const double total = static_cast<double>(s.total_num_steps);

  if (s.type == SchedulerType::kWarmupCosineLR) {
    if (t < 0) return 0.0;  // DeepSpeed: lr 0 before the first scheduler step
    double ratio;
    if (t < w) {
      ratio =
          s.warmup_min_ratio + warmup_factor(s.warmup_type, td, wd) * (1.0 - s.warmup_min_ratio);
    } else {
      double progress = std::min(1.0, (td - wd + 1.0) / std::max(1.0, total - wd));
      double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
    }
    return base_lr * ratio;
  }

  // WarmupLR and WarmupDecayLR.
  const double min_lr = s.warmup_min_lr;
  const double max_lr = s.warmup_max_lr.value_or(base_lr);
  if (t < 0) return min_lr;
  double gamma;
  if (t < w) {
    gamma = warmup_factor(s.warmup_type, td, wd);
  } else if (s.type == SchedulerType::kWarmupLR) {
    gamma = 1.0;
  } else {
    gamma = std::max(0.0, (total - td) / std::max(1.0, total - wd));
  }
  return min_lr + (max_lr - min_lr) * gamma;
}

}  // namespace zt

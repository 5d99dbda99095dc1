// Learning-rate schedules of DeepSpeed 0.19 (deepspeed/runtime/lr_schedules.py): WarmupLR,
// WarmupDecayLR, WarmupCosineLR; no scheduler -> constant lr.
#pragma once

#include <cstdint>

#include "trainer/ds_config.h"

namespace zt {

// The learning rate of optimizer step `step` (0-based: `step` optimizer steps have already
// been applied; fp16 steps skipped for overflow do not count, as DeepSpeed does not step its
// scheduler on them). `base_lr` is the optimizer's lr (optimizer.params.lr).
//
// Step indexing, as DeepSpeed's engine: the scheduler is built with last_batch_iteration = -1
// and sets the lr for the first step; after each applied optimizer step it calls
// scheduler.step(), so step k runs with the schedule at t = k - 1. Hence step 0 runs at
// warmup_min_lr (WarmupLR, WarmupDecayLR) or at lr 0 (WarmupCosineLR), and step 1 at t = 0
// (the same value for the default log or linear warm-up with warmup_min_ratio 0).
//
// With W = max(2, warmup_num_steps), T = total_num_steps, t = step - 1 >= 0:
//   warm-up factor g(t) = ln(t + 1) / ln(W) (log) or t / W (linear), for t < W.
//   WarmupLR:       lr = min + (max - min) · (t < W ? g(t) : 1)
//   WarmupDecayLR:  lr = min + (max - min) · (t < W ? g(t) : max(0, (T - t) / max(1, T - W)))
//     with min = warmup_min_lr, max = warmup_max_lr (WarmupLR default: base_lr).
//   WarmupCosineLR: lr = base_lr · r(t), r = w + (1 - w) g(t) for t < W (w = warmup_min_ratio),
//     else r = max(0, c + (1 - c)(1 + cos(π · min(1, (t - W + 1) / max(1, T - W)))) / 2),
//     c = cos_min_ratio.
double lr_at(const SchedulerConfig& s, double base_lr, int64_t step);

}  // namespace zt

// `zerotrain estimate --recommend`: the layouts that fit a model on a device and host memory
// budget, ranked by the step-time model. Enumerates stage x offload (optimizer none / cpu /
// nvme, and parameters at stage 3) x micro-batch (1-32) x activation checkpointing x the delayed
// update; keeps those the estimator (zero/estimator.h) fits in --device_memory and
// --host_memory a rank (on the CPU backend also both together in 90% of the machine's RAM,
// where the device pool lives); ranks them by predicted tokens/s (zero/step_time.h, --hardware);
// prints the best three with their memory and time, and with --write writes the best as a ds_config
// (DeepSpeed's keys; a zerotrain block only for checkpointing and the delayed update).
// The choice DeepSpeed's autotuner makes by running experiments, made here by the models.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "trainer/estimate_options.h"

namespace zt {

// Errors: a missing --model, --seq_len or memory budget; nothing fits (what was tried and what
// to change); --write not writable (named).
absl::StatusOr<std::string> recommend_text(const EstimateOptions& o);

}  // namespace zt

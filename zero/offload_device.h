// Where offloaded state lives (ds_config zero_optimization.offload_optimizer.device /
// offload_param.device): shared by the config parser, the estimator and the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/trace.h"

namespace zt {

enum class OffloadDevice { kNone, kCpu, kNvme };

// Milliseconds offload spent since it was set up, by phase (wall_clock_breakdown prints the
// per-step differences). Waits count the time a caller was blocked, not the transfer itself
// when it ran behind other work.
struct OffloadTimes {
  double grad_out_ms = 0;    // gradients device -> host
  double cpu_step_ms = 0;    // the optimizer step on the CPU (whichever optimizer)
  double param_in_ms = 0;    // parameters host -> device (updated working copies, shard loads)
  double nvme_read_ms = 0;   // waiting for reads from the drive
  double nvme_write_ms = 0;  // waiting for writes to the drive
  OffloadTimes operator+(const OffloadTimes& o) const {
    return {grad_out_ms + o.grad_out_ms, cpu_step_ms + o.cpu_step_ms, param_in_ms + o.param_in_ms,
            nvme_read_ms + o.nvme_read_ms, nvme_write_ms + o.nvme_write_ms};
  }
  OffloadTimes operator-(const OffloadTimes& o) const {
    return {grad_out_ms - o.grad_out_ms, cpu_step_ms - o.cpu_step_ms, param_in_ms - o.param_in_ms,
            nvme_read_ms - o.nvme_read_ms, nvme_write_ms - o.nvme_write_ms};
  }
};

// OffloadTimes added to from several threads (the delayed update's and the training loop's).
class OffloadClock {
 public:
  enum Phase { kGradOut, kCpuStep, kParamIn, kNvmeRead, kNvmeWrite, kPhases };
  // Also a span on the trace's track of the phase, when a traced step runs (common/trace.h).
  void add(Phase p, double ms) {
    us_[p].fetch_add((int64_t)(ms * 1e3));
    static constexpr Track kTracks[kPhases] = {Track::kDeviceToHost, Track::kOptimizer,
                                               Track::kHostToDevice, Track::kNvmeRead,
                                               Track::kNvmeWrite};
    static constexpr const char* kNames[kPhases] = {"gradients to host", "optimizer step",
                                                    "parameters to device", "read", "write"};
    trace_elapsed(kTracks[p], kNames[p], ms);
  }
  OffloadTimes times() const {
    auto ms = [this](Phase p) { return us_[p].load() / 1e3; };
    return {ms(kGradOut), ms(kCpuStep), ms(kParamIn), ms(kNvmeRead), ms(kNvmeWrite)};
  }

 private:
  std::atomic<int64_t> us_[kPhases] = {};
};
// Whether the optimizer keeps its fp32 master weights apart from the working copy: with 16-bit
// parameters, or with the optimizer or the parameters offloaded; otherwise the fp32 device
// working copy is the master (the engine's states alias it). Read by the estimator's memory and
// the step-time model's update bytes.
inline bool master_apart(bool fp32_params, OffloadDevice optimizer, OffloadDevice params) {
  return !fp32_params || optimizer != OffloadDevice::kNone || params != OffloadDevice::kNone;
}
std::string_view offload_device_name(OffloadDevice d);  // "none", "cpu", "nvme"
absl::StatusOr<OffloadDevice> parse_offload_device(std::string_view s);

}  // namespace zt

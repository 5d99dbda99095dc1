// Where offloaded state lives (ds_config zero_optimization.offload_optimizer.device /
// offload_param.device): shared by the config parser, the estimator and the engine.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

namespace zt {

enum class OffloadDevice { kNone, kCpu, kNvme };
std::string_view offload_device_name(OffloadDevice d);  // "none", "cpu", "nvme"
absl::StatusOr<OffloadDevice> parse_offload_device(std::string_view s);

}  // namespace zt

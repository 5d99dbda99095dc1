// `zerotrain estimate`: analytic memory per device (zero/estimator.h) from a model preset or a
// parameter count, the ZeRO paper's Table 1, or DeepSpeed's estimator formulas.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/estimate_options.h"

namespace zt {

// Prints the estimate to stdout. Errors name the flag to change.
absl::Status run_estimate(const EstimateOptions& o);
// The text run_estimate prints (tests).
absl::StatusOr<std::string> estimate_text(const EstimateOptions& o);

}  // namespace zt

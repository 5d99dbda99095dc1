// DeepSpeed 0.19's defaults for the keys that more than one layer carries (the ds_config parser
// in trainer/, the engine, the loss scaler, the estimator, offload), written once: each struct
// that holds one of these keys initialises it from here. Source: DeepSpeed's runtime/zero/
// config.py, offload_config.py and precision_config.py.
#pragma once

#include <cstdint>

namespace zt::ds_default {

// zero_optimization
inline constexpr int64_t kSubGroupSize = 1'000'000'000;               // 1e9 elements
inline constexpr int64_t kStage3PrefetchBucketSize = 50'000'000;      // 5e7
inline constexpr int64_t kStage3ParamPersistenceThreshold = 100'000;  // 1e5
inline constexpr int64_t kStage3MaxLiveParameters = 1'000'000'000;    // 1e9
inline constexpr int64_t kStage3MaxReuseDistance = 1'000'000'000;     // 1e9
// zero_optimization.offload_param
inline constexpr int64_t kParamBufferCount = 5;
inline constexpr int64_t kParamBufferSize = 100'000'000;  // 1e8 elements
inline constexpr int64_t kParamMaxInCpu = 1'000'000'000;  // 1e9 elements
// fp16 (the dynamic loss scaler)
inline constexpr int kInitialScalePower = 16;
inline constexpr int kLossScaleWindow = 1000;
inline constexpr int kHysteresis = 2;
inline constexpr int kMinLossScale = 1;

}  // namespace zt::ds_default

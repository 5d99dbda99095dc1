// The ds_config -> ZeRO engine mapping, in one place: the EngineOptions a validated DsConfig
// asks for, and where its optimizer state lives (device, or offload_optimizer's host memory).
#pragma once

#include <memory>

#include "model/backend.h"
#include "trainer/ds_config.h"
#include "zero/engine.h"
#include "zero/optimizer_state.h"

namespace zt {

// Precision (bf16 / fp16 with DeepSpeed's loss scaler), optimizer.params, gradient_clipping and
// the zero_optimization keys the engine honours.
EngineOptions engine_options(const DsConfig& ds);
// zero_optimization.offload_optimizer.device "cpu": host memory and CPU Adam with pin_memory
// and sub_group_size; otherwise on the device behind `be`.
std::unique_ptr<OptimizerState> optimizer_state(const DsConfig& ds, Backend* be);

}  // namespace zt

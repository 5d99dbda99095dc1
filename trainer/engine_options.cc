#include "trainer/engine_options.h"

#include "offload/cpu_optimizer.h"

namespace zt {

EngineOptions engine_options(const DsConfig& ds) {
  EngineOptions eo;
  if (ds.bf16.enabled) eo.param_dtype = eo.grad_dtype = DType::kBF16;
  if (ds.fp16.enabled) {  // fp16 weights and gradients, DeepSpeed's loss scaler
    eo.param_dtype = eo.grad_dtype = DType::kF16;
    eo.loss_scaling = true;
    const Fp16Config& f = ds.fp16;
    eo.loss_scaler = {f.loss_scale,      (int)f.initial_scale_power, (int)f.loss_scale_window,
                      (int)f.hysteresis, f.consecutive_hysteresis,   (double)f.min_loss_scale};
  }
  eo.adam.beta1 = ds.optimizer.beta1;
  eo.adam.beta2 = ds.optimizer.beta2;
  eo.adam.eps = ds.optimizer.eps;
  eo.adam.weight_decay = ds.optimizer.weight_decay;
  eo.adam.adam_w_mode = ds.optimizer.decoupled_weight_decay;  // as DeepSpeed resolves it
  eo.adam.bias_correction = ds.optimizer.bias_correction;
  eo.gradient_clipping = static_cast<float>(ds.gradient_clipping);
  const ZeroConfig& z = ds.zero;
  eo.zero.stage = z.stage;
  eo.zero.overlap_comm = z.overlap_comm;
  eo.zero.reduce_scatter = z.reduce_scatter;
  eo.zero.stage3_prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  eo.zero.stage3_param_persistence_threshold = z.stage3_param_persistence_threshold;
  eo.zero.stage3_max_live_parameters = z.stage3_max_live_parameters;
  eo.zero.stage3_max_reuse_distance = z.stage3_max_reuse_distance;
  return eo;
}

std::unique_ptr<OptimizerState> optimizer_state(const DsConfig& ds, Backend* be) {
  const OffloadOptimizerConfig& o = ds.zero.offload_optimizer;
  if (o.device == OffloadDevice::kCpu)
    return make_cpu_optimizer_state(be, {o.pin_memory, ds.zero.sub_group_size});
  return make_device_optimizer_state(be);  // nvme is refused by the config parser until it lands
}

}  // namespace zt

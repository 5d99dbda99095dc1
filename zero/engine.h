// The ZeRO engine (DESIGN.md "ZeRO engine"): owns parameters, gradients and optimizer state
// per unit and implements the transformer's four calls plus step(). This build has stage 0 on
// one rank: full working params, full gradients, full fp32 optimizer state; the sharded
// stages and communicators plug in behind the same calls.
//
// Bytes per parameter (Ψ): working params dtype_size(param_dtype), grads dtype_size(grad_dtype),
// optimizer K = 12 (fp32 master, m, v) when params are not fp32, else 8 (m, v: the fp32
// params are the master weights).
#pragma once

#include <span>
#include <vector>

#include "common/dtype.h"
#include "model/backend.h"
#include "model/layout.h"
#include "model/unit_engine.h"

namespace zt {

// Adam hyper-parameters (DeepSpeed "optimizer.params"; lr comes per step from the schedule).
struct AdamParams {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  bool adam_w_mode = true;      // decoupled weight decay (AdamW); false: L2 (classic Adam)
  bool bias_correction = true;
};

struct EngineOptions {
  DType param_dtype = DType::kF32;  // working parameters
  DType grad_dtype = DType::kF32;   // stored (accumulated) gradients
  AdamParams adam;
  float gradient_clipping = 0.f;    // max global L2 norm; 0 disables
};

struct StepStats {
  double grad_norm = 0;   // global L2 norm before clipping
  double clip_coef = 1;   // factor applied to the gradients (<= 1)
  int step = 0;           // optimizer steps taken, after this one
};

class Engine final : public UnitEngine {
 public:
  Engine(const ParamLayout& layout, Backend* be, const EngineOptions& opt);
  ~Engine() override;

  // Host fp32 values of unit u (layout order, numel elements) in / out; sets master weights
  // and working copy.
  void set_unit_params(int u, std::span<const float> host);
  void get_unit_params(int u, std::span<float> host) const;
  // Stored gradients of unit u as fp32 (tests, diagnostics).
  void get_unit_grads(int u, std::span<float> host) const;

  const float* fetch(int unit) override;
  void release(int unit) override;
  float* grads(int unit) override;
  void reduce_gradients(int unit) override;

  // One optimizer step at learning rate lr: global grad norm, clipping (DeepSpeed:
  // coef = clip / (norm + 1e-6) when norm > clip), AdamW on the fp32 master weights, refresh of
  // the working copy, gradients zeroed.
  StepStats step(float lr);
  void zero_grad();
  int steps_taken() const { return t_; }

 private:
  struct UnitState;
  const ParamLayout& layout_;
  Backend* be_;
  EngineOptions opt_;
  std::vector<UnitState> units_;
  int t_ = 0;
};

}  // namespace zt

// Each optimizer's hyper-parameters, one struct per optimizer with DeepSpeed's defaults (the
// class DeepSpeed builds for its optimizer.type: FusedAdam / DeepSpeedCPUAdam, FusedLion /
// DeepSpeedCPULion, torch.optim.Adagrad / DeepSpeedCPUAdagrad, MuonWithAuxAdam). The
// ds_config parser fills one (ParamsReader, trainer/ds_optimizer.cc), the engine's optimizer
// rule turns it into each step's scalars (optimizer_step below, zero/optimizer_rule.h); the
// learning rate comes per step from the schedule. A new optimizer adds its struct to
// OptimizerParams in the order of OptimizerKind (model/optimizer_math.h).
#pragma once

#include <cstddef>
#include <type_traits>
#include <variant>

#include "model/optimizer_math.h"

namespace zt {

struct AdamWParams {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool adam_w_mode = true;  // decoupled weight decay; false: L2 added to the gradient (Adam)
  bool bias_correction = true;
};
struct LionParams {
  double beta1 = 0.9, beta2 = 0.999, weight_decay = 0;
};
struct AdagradParams {
  double eps = 1e-10, weight_decay = 0, lr_decay = 0;
};
struct MuonParams {
  double momentum = 0.95;  // the hidden matrices'
  // Its AdamW half (every other element) and the weight decay of both halves.
  AdamWParams adam{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-10};
};

// Indexed as OptimizerKind.
using OptimizerParams = std::variant<AdamWParams, LionParams, AdagradParams, MuonParams>;
template <OptimizerKind K>
using ParamsOf = std::variant_alternative_t<static_cast<size_t>(K), OptimizerParams>;
static_assert(std::is_same_v<ParamsOf<OptimizerKind::kAdamW>, AdamWParams> &&
                  std::is_same_v<ParamsOf<OptimizerKind::kLion>, LionParams> &&
                  std::is_same_v<ParamsOf<OptimizerKind::kAdagrad>, AdagradParams> &&
                  std::is_same_v<ParamsOf<OptimizerKind::kMuon>, MuonParams>,
              "OptimizerParams must list the structs in OptimizerKind's order");

inline OptimizerKind optimizer_kind(const OptimizerParams& p) {
  return static_cast<OptimizerKind>(p.index());
}
// One step's scalars of p (OptimizerStep: what the backends' kernels read) at learning rate lr,
// step t >= 1, every gradient multiplied by grad_scale first. aux_lr: the learning rate of the
// optimizer's second parameter group (Muon's AdamW elements; < 0: lr).
inline OptimizerStep optimizer_step(const OptimizerParams& p, double lr, int t, double grad_scale,
                                    double aux_lr = -1) {
  OptimizerStep s{.lr = lr, .t = t, .grad_scale = grad_scale, .kind = optimizer_kind(p)};
  auto adamw = [&s](const AdamWParams& a) {
    s.beta1 = a.beta1, s.beta2 = a.beta2, s.eps = a.eps, s.weight_decay = a.weight_decay;
    s.adam_w_mode = a.adam_w_mode, s.bias_correction = a.bias_correction;
  };
  if (const auto* a = std::get_if<AdamWParams>(&p)) adamw(*a);
  if (const auto* l = std::get_if<LionParams>(&p))
    s.beta1 = l->beta1, s.beta2 = l->beta2, s.weight_decay = l->weight_decay;
  if (const auto* g = std::get_if<AdagradParams>(&p))
    s.eps = g->eps, s.weight_decay = g->weight_decay, s.lr_decay = g->lr_decay;
  if (const auto* m = std::get_if<MuonParams>(&p)) {
    adamw(m->adam);
    s.momentum = m->momentum;
    s.aux_lr = aux_lr;
  }
  return s;
}

}  // namespace zt

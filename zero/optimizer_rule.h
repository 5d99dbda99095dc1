// The optimizer as the engine sees it: a rule chosen once from the hyper-parameters
// (model/optimizer_params.h), which gives each step's scalars and runs a unit's update on the
// optimizer state (zero/optimizer_state.h, wherever it lives). The engine names no optimizer.
// An element-wise optimizer (each element's update reads only its own gradient and states) is
// the base rule: one OptimizerState::update per unit, anywhere, on any thread. An optimizer
// whose update needs whole matrices (optimizer_info(kind).whole_matrices: Muon,
// zero/muon_rule.h) runs its passes and collectives around the element updates, on the
// training thread.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "model/backend.h"
#include "model/layout.h"
#include "model/optimizer_params.h"
#include "zero/comm.h"
#include "zero/optimizer_state.h"

namespace zt {

// The learning rate of the optimizer's second parameter group (Muon's AdamW elements) for the
// step after `applied` applied steps: DeepSpeed schedules each group from its own base rate.
// Null: the step's lr.
using GroupLr = std::function<double(int applied)>;

// The elements of one unit a rank updates: [owned_begin, owned_begin + owned) of unit `unit`.
// sharded: every rank owns `owned` of them in rank order (an update that communicates is then
// collective over the engine's ranks); else this rank holds the whole unit.
struct UnitSlice {
  int unit = 0;
  size_t owned_begin = 0, owned = 0;
  bool sharded = false;
};

class OptimizerRule {
 public:
  OptimizerRule(const OptimizerParams& params, GroupLr second_group_lr)
      : params_(params), second_group_lr_(std::move(second_group_lr)) {}
  virtual ~OptimizerRule() = default;

  OptimizerKind kind() const { return optimizer_kind(params_); }
  // Step t's scalars (t >= 1, t - 1 steps applied before it) at learning rate lr, every
  // gradient multiplied by grad_scale first (1 / loss scale times the clip coefficient).
  OptimizerStep step(double lr, int t, double grad_scale) const {
    return optimizer_step(params_, lr, t, grad_scale,
                          second_group_lr_ ? second_group_lr_(t - 1) : -1);
  }
  // True when update() communicates (a whole-matrix optimizer's gather): every rank calls it
  // for each unit in the same order, on the training thread. The engine runs the others'
  // updates on the update pipeline's worker as OptimizerState::update (zero/update_pipeline.h),
  // which is all the base rule's update() does; the trainer reads the same optimizer_info
  // (trainer/engine_options.cc offload_pipeline_runs).
  bool collective() const { return optimizer_info(kind()).whole_matrices; }
  // Unit `slice.unit`'s update of this rank's elements; io as OptimizerState::update takes it
  // (the gradient, where the new weights go).
  virtual void update(OptimizerState& state, const UnitSlice& slice, const OptimizerState::Io& io,
                      const OptimizerStep& s) {
    state.update(slice.unit, io, s);
  }
  // After every unit's update of a step: frees the step's buffers.
  virtual void end_step() {}

 private:
  OptimizerParams params_;
  GroupLr second_group_lr_;
};

// The rule for params. layout, be and comm (the ranks the engine shards over) serve a rule that
// needs whole matrices; they must outlive it.
std::unique_ptr<OptimizerRule> make_optimizer_rule(const OptimizerParams& params,
                                                   GroupLr second_group_lr,
                                                   const ParamLayout& layout, Backend* be,
                                                   Communicator* comm);

}  // namespace zt

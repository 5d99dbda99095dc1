// Muon's rule (zero/optimizer_rule.h) at every ZeRO stage and offload placement
// (model/optimizer_math.h): the optimizer whose update needs whole matrices, where ZeRO holds
// flat slices. Each rank runs pass 1 on the elements it owns (momentum, and AdamW on the
// non-matrix elements), leaving u; a sharded unit's u is all-gathered, so every rank holds whole
// each matrix its slice touches and orthogonalises those (model/newton_schulz.h); pass 2 applies
// the rank's slice of the result. Gathering rather than cutting shards at matrix boundaries keeps
// ZeRO's equal shards and the partition plan (zero/partition.h) unchanged, and is what DeepSpeed
// does for ZeRO 1-2 (its Muon groups all-gather gradient and momentum). u is gathered in fp32: Ψ_u
// elements of each block unit per step, twice the bytes of a bf16 parameter all-gather; a matrix
// spanning two shards is orthogonalised on both ranks. The step's buffers (u, the gathered u, the
// update: 4 bytes per element of the largest unit each, and Newton-Schulz's workspace) are freed at
// its end; the estimator counts them as workspace (zero/estimator.cc).
#pragma once

#include <utility>
#include <vector>

#include "model/backend.h"
#include "model/layout.h"
#include "zero/comm.h"
#include "zero/optimizer_rule.h"

namespace zt {

class MuonRule final : public OptimizerRule {
 public:
  // layout: the units' hidden matrices (ParamLayout::hidden_matrices); comm: the ranks the
  // engine shards over. Both outlive the rule.
  MuonRule(const MuonParams& params, GroupLr adam_lr, const ParamLayout& layout, Backend* be,
           Communicator* comm)
      : OptimizerRule(params, std::move(adam_lr)), layout_(layout), be_(be), comm_(comm) {}

  // Muon's step on the slice (s.kind == kMuon; s.muon_pass, spans and offset are set here):
  // pass 1, the gather and Newton-Schulz on every matrix the slice touches, pass 2.
  void update(OptimizerState& state, const UnitSlice& slice, const OptimizerState::Io& io,
              const OptimizerStep& s) override;
  // Frees the step's fp32 buffers (u, gathered u, the update), so the next forward and
  // backward do not hold them.
  void end_step() override { u_owned_.reset(), u_full_.reset(), update_.reset(), ns_.reset(); }

 private:
  const ParamLayout& layout_;
  Backend* be_;
  Communicator* comm_;
  DeviceBuffer u_owned_, u_full_, update_, ns_;  // fp32, grown to the largest unit (matrix)
};

}  // namespace zt

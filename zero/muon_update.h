// Muon at every ZeRO stage and offload placement (model/optimizer_math.h): the optimizer whose
// update needs whole matrices, where ZeRO holds flat slices. Each rank runs pass 1 on the
// elements it owns (momentum, and AdamW on the non-matrix elements), leaving u; a sharded
// unit's u is all-gathered, so every rank holds whole each matrix its slice touches and
// orthogonalises those (model/newton_schulz.h); pass 2 applies the rank's slice of the result.
// Gathering rather than cutting shards at matrix boundaries keeps ZeRO's equal shards and the
// partition plan (zero/partition.h) unchanged, and is what DeepSpeed does for ZeRO 1-2 (its
// Muon groups all-gather gradient and momentum). u is gathered in fp32: Ψ_u elements of each
// block unit per step, twice the bytes of a bf16 parameter all-gather; a matrix spanning two
// shards is orthogonalised on both ranks. The step's buffers (u, the gathered u, the update:
// 4 bytes per element of the largest unit each, and Newton-Schulz's workspace) are freed at its
// end; the estimator counts them as workspace (zero/estimator.cc).
#pragma once

#include <vector>

#include "model/backend.h"
#include "model/layout.h"
#include "zero/comm.h"
#include "zero/optimizer_state.h"

namespace zt {

class MuonUpdate {
 public:
  MuonUpdate(Backend* be, Communicator* comm) : be_(be), comm_(comm) {}

  // Muon's step on unit u of `state` (s.kind == kMuon; s.muon_pass, spans and offset are set
  // here). matrices: the unit's hidden matrices (ParamLayout::hidden_matrices). This rank owns
  // the unit's elements [owned_begin, owned_begin + owned); sharded: every rank owns `owned`
  // of them in rank order (collective: every rank calls it for the unit), else the whole unit.
  // io: as OptimizerState::update takes it (the gradient, where the new weights go).
  void update(OptimizerState& state, int u, const std::vector<MatrixSlot>& matrices,
              size_t owned_begin, size_t owned, bool sharded, const OptimizerState::Io& io,
              OptimizerStep s);
  // Frees the step's fp32 buffers (u, gathered u, the update), so the next forward and
  // backward do not hold them.
  void end_step() { u_owned_.reset(), u_full_.reset(), update_.reset(), ns_.reset(); }

 private:
  Backend* be_;
  Communicator* comm_;
  DeviceBuffer u_owned_, u_full_, update_, ns_;  // fp32, grown to the largest unit (matrix)
};

}  // namespace zt

// The engine's per-unit state, shared by its files (zero/engine.cc: construction and the
// transformer's calls; engine_step.cc: the step and the update off the training thread;
// engine_checkpoint.cc: checkpoint and test access). The gradients are zero/gradients.h's.
// Internal to zero/.
#pragma once

#include "zero/engine.h"

namespace zt {

struct Engine::UnitState {
  size_t numel = 0;             // Ψ of the unit
  size_t shard = 0;             // elements per rank (numel when replicated)
  size_t padded = 0;            // shard * N_d (numel when replicated)
  bool replicated = false;      // whole on every rank: stage 0, or stage 3 under the threshold
  bool sharded_params = false;  // stage 3 and not replicated
  DeviceBuffer params;          // working dtype: the whole unit (padded), or this rank's shard
  void* shared = nullptr;       // node-shared: the whole unit's working copy (params unused)
  int store = -1;               // stage 3 with parameter offload: the shard's ParamStore handle
  DeviceBuffer fetched;         // fp32 view while in use, when the working dtype is not fp32
  bool update_pending = false;  // its pipelined update is not waited for yet (Engine::publish)
  // Its new weights are in place (the copy from staging queued: copy_in) but not yet published
  // (joined, and all-gathered at stages 1-2): Engine::publish.
  bool publish_pending = false;
  uint64_t copy_in = 0;  // the copy from staging not joined yet (0: none)
  // The delayed update's new weights, swapped with params when published, where that costs no
  // memory (Engine::swaps_params): allocated with params.
  DeviceBuffer next_params;

  size_t owned() const { return replicated ? numel : shard; }
  // This rank's working copy: the whole unit or its shard (params), or the node's (shared).
  void* working() const { return shared ? shared : params.data(); }
};

}  // namespace zt

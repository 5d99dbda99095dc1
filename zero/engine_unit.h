// The engine's per-unit state and in-flight reductions, shared by its files (zero/engine.cc:
// construction and the transformer's calls; engine_gradients.cc: the gradient buffers and their
// reduction; engine_step.cc: the step and the delayed update; engine_checkpoint.cc: checkpoint
// and test access). Internal to zero/.
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
  DeviceBuffer grads;           // stored: whole unit (stages 0-1, replicated) or shard (2-3),
                                // none when the optimizer state holds it (host_grads)
  bool host_grads = false;
  DeviceBuffer scratch;  // fp32 whole-unit gradient while a backward writes it
  // What the stored gradient holds since the last step:
  //   kZero      zeros: nothing to read;
  //   kStale     the zeros it stands for, but the buffer still holds the last step's values: its
  //              next writer overwrites it (scale_add without accumulate), or settle_stale
  //              zeroes it, so the step did not spend a pass zeroing it;
  //   kWritten   this step's gradient, written by the engine's passes (or, direct_grads, added
  //              by the backward's kernels);
  //   kKernelsAdd  this step's gradient, which grads_stored handed to the backward's kernels to
  //              add into: the step leaves it zeroed (as for direct_grads).
  enum class Stored { kZero, kStale, kWritten, kKernelsAdd } stored = Stored::kZero;
  bool holds_values() const { return stored == Stored::kWritten || stored == Stored::kKernelsAdd; }
  // A pass wrote (or added to) this step's gradient.
  void mark_written() {
    if (stored != Stored::kKernelsAdd) stored = Stored::kWritten;
  }
  // Σ g² of the owned gradient as step() reads it: not known yet (step() sums it), zero (no
  // backward wrote it), or in the unit's norm slot, summed on the device by the pass that last
  // wrote the gradient.
  enum class SumSq { kUnknown, kZero, kInSlot } owned_ss = SumSq::kUnknown;
  DeviceBuffer reduced;  // stage 1: fp32 averaged shard after the boundary reduce-scatter, or none
  bool update_pending = false;  // its pipelined update is not published yet (Engine::publish)

  size_t owned() const { return replicated ? numel : shard; }
  // This rank's working copy: the whole unit or its shard (params), or the node's (shared).
  void* working() const { return shared ? shared : params.data(); }
};

// A gradient reduction in flight (overlap_comm): its buffers live until it completes.
struct Engine::PendingReduce {
  int unit;
  CommRequest req;
  DeviceBuffer send;                 // fp32 whole-unit gradient being reduced
  DeviceBuffer recv;                 // fp32 shard (reduce-scatter) or empty (all-reduce in place)
  bool shard_of_all_reduce = false;  // reduce_scatter false: recv is cut from send
  bool boundary = false;             // of the step's last micro-batch: its result is final
  QuantizedReduce qgz;               // ZeRO++ qgZ: the quantized reduction in place of req
};

}  // namespace zt

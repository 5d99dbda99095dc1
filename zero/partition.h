// The partition plan: how each unit is split into shards and where its pieces live, one row per
// unit, computed once by one rule from the units, N_d and the options. The engine allocates
// from it, the estimator counts from it and the trainer sizes the parameter store's buffers
// from it, so the three cannot drift apart (tests/mpi/zero_stages_test.cc holds them to it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "zero/offload_device.h"

namespace zt {

// True when stage 3 keeps a unit of `numel` elements whole on every rank instead of sharding
// it: DeepSpeed 0.19's mark_persistent_parameters (runtime/zero/parameter_offload.py) keeps a
// parameter with `ds_numel <= stage3_param_persistence_threshold`. The comparison is
// DeepSpeed's; the granularity differs: DeepSpeed tests each tensor, zerotrain each unit (an
// embedding, a block, the head), which it gathers whole. A threshold of 0 shards every unit.
constexpr bool stage3_keeps_whole(int64_t numel, int64_t persistence_threshold) {
  return numel <= persistence_threshold;
}

// Elements each of `world` (N_d) ranks owns of a sharded unit of `numel`: ceil(numel / N_d).
// The unit is padded to N_d times this, and rank r owns [r * shard, (r + 1) * shard).
constexpr int64_t shard_numel(int64_t numel, int64_t world) { return (numel + world - 1) / world; }

// Where a unit's working parameters live between uses: on the device (whole, or this rank's
// shard), or (stage 3 with offload_param) the shard in host memory or in a file on a drive.
enum class ParamHome { kDevice, kHost, kDrive };

// What the plan depends on besides the units.
struct PartitionOptions {
  int stage = 0;                      // ZeRO stage, 0-3
  int world = 1;                      // N_d
  int64_t persistence_threshold = 0;  // stage3_param_persistence_threshold (elements)
  bool host_grads = false;            // the gradient shards go to host memory (offloaded optimizer)
  bool offload_param = false;         // stage 3: parameter shards off the device
  // offload_param: elements of shards (in unit order) kept in host memory before the rest go
  // to the drive: "cpu" all (INT64_MAX), "nvme" max_in_cpu (DeepSpeed's key).
  int64_t param_host_elems = 0;
};

// One unit's row of the plan, for one rank.
struct UnitPartition {
  int64_t numel = 0;        // Ψ_u
  int stage = 0;            // the stage it is split at: the run's, or 0 when stage 3 keeps it whole
  bool replicated = false;  // whole on every rank: stage 0, kept whole, or one rank, nothing off
  int64_t shard = 0;        // elements this rank owns: ceil(Ψ_u / N_d); Ψ_u when replicated
  int64_t padded = 0;       // shard · N_d; Ψ_u when replicated
  bool sharded_params = false;  // stage 3, not replicated: parameters kept as a shard
  bool whole_grads = false;     // the stored gradient is the whole (padded) unit: stages 0-1
  bool host_grads = false;      // the gradient shard lives in host memory (zero/gradients.h)
  ParamHome params = ParamHome::kDevice;
  int64_t owned() const { return replicated ? numel : shard; }  // elements this rank updates
  int64_t grad_numel() const { return whole_grads ? padded : shard; }
};

// The plan for units of these sizes (elements, in order). A single rank still shards (into one
// shard) when anything is offloaded, so that the offloaded state leaves the device.
std::vector<UnitPartition> plan_partition(std::span<const int64_t> unit_numel,
                                          const PartitionOptions& o);

}  // namespace zt

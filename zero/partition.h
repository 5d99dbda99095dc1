// How a unit is split into shards: the one rule the engine allocates by, the estimator counts
// by and the trainer sizes offload buffers by, so the three cannot drift apart.
#pragma once

#include <cstdint>

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

}  // namespace zt

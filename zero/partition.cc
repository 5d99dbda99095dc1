// The partition plan's one rule (partition.h).
#include "zero/partition.h"

namespace zt {

std::vector<UnitPartition> plan_partition(std::span<const int64_t> unit_numel,
                                          const PartitionOptions& o) {
  const bool offloaded = o.host_grads || o.offload_param;
  std::vector<UnitPartition> plan;
  int64_t in_host = 0;  // offload_param: shard elements kept in host memory so far
  for (int64_t n : unit_numel) {
    UnitPartition u;
    u.numel = n;
    const bool whole = o.stage == 3 && stage3_keeps_whole(n, o.persistence_threshold);
    u.stage = whole ? 0 : o.stage;
    u.replicated = u.stage == 0 || (o.world == 1 && !offloaded);
    u.shard = u.replicated ? n : shard_numel(n, o.world);
    u.padded = u.replicated ? n : u.shard * o.world;
    u.sharded_params = u.stage == 3 && !u.replicated;
    u.whole_grads = u.replicated || u.stage <= 1;
    u.host_grads = o.host_grads && !u.whole_grads;
    if (u.sharded_params && o.offload_param) {
      const bool fits = in_host + u.shard <= o.param_host_elems;
      if (fits) in_host += u.shard;
      u.params = fits ? ParamHome::kHost : ParamHome::kDrive;
    }
    plan.push_back(u);
  }
  return plan;
}

}  // namespace zt

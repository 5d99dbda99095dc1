// Parameter offload for stage 3 (zero/param_store.h; ZeRO-Infinity, Rajbhandari et al. SC21;
// DeepSpeed's zero_optimization.offload_param). Each rank's working-dtype parameter shards live
// in host memory ("cpu") or in files on a drive ("nvme") and reach the device only to be
// gathered.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "model/backend.h"
#include "offload/nvme_swapper.h"
#include "zero/deepspeed_defaults.h"
#include "zero/param_store.h"

namespace zt {

// offload_param's keys (DeepSpeed's names and defaults).
struct ParamOffloadOptions {
  bool pin_memory = true;             // page-locked host memory (falls back to pageable)
  // nvme: host buffers shards are swapped through (>= 1), and the elements one holds (the
  // largest shard fits).
  int64_t buffer_count = ds_default::kParamBufferCount;
  int64_t buffer_size = ds_default::kParamBufferSize;
  // nvme: the first shards (in unit order) whose elements add up to at most max_in_cpu stay in
  // host memory and never touch the drive (DeepSpeed keeps max_in_cpu elements of its flat
  // 16-bit partition in CPU memory the same way).
  int64_t max_in_cpu = ds_default::kParamMaxInCpu;
  // nvme: read the next shards of the recorded unit order ahead (ParamStore::prefetch); needs
  // buffer_count >= 3. Off: ZEROTRAIN_PARAM_READ_AHEAD=0 (benchmarks/param_read_ahead.py).
  bool read_ahead = true;
};

// offload_param.device "cpu": every shard in (pinned) host memory, category kParams.
std::unique_ptr<ParamStore> make_host_param_store(Backend* be, bool pin_memory);

// offload_param.device "nvme": the shards the partition plan puts on the drive (past
// max_in_cpu elements: host_elems()) in one file each on `swapper`'s drive (rounded to 4 KiB,
// kNvme), read through buffer_count host buffers (kPinnedHost) of the largest such shard, which
// also keep the most recently used shards (a shard still in one is not read again).
std::unique_ptr<ParamStore> make_nvme_param_store(Backend* be, const ParamOffloadOptions& o,
                                                  std::unique_ptr<NvmeSwapper> swapper);

// The start-up checks of an NVMe parameter store, before anything is allocated: every shard
// that goes to the drive (largest_shard elements) must fit in one buffer, and the buffers
// (buffer_count x buffer_size elements of elem_bytes) in host memory (host_bytes). Errors
// (InvalidArgument) name the key, the size needed and what to change.
absl::Status check_param_buffers(const ParamOffloadOptions& o, int64_t largest_shard,
                                 size_t elem_bytes, int64_t host_bytes);

}  // namespace zt

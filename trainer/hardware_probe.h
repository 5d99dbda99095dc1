// `estimate --time --hardware this`: this machine's rates for the step-time model
// (zero/step_time.h), measured once and cached: OpenBLAS sgemm FLOP/s on a GPT-2 block GEMM
// (all threads), copy bandwidth (bytes read and written a second, 256 MiB over all threads, and
// on one thread), a one-thread GEMM's slowdown beside a busy core, and
// the drive under `disk_dir` as the NVMe offload uses it (zerotrain's swapper: io_uring, O_DIRECT;
// 256 MiB written and read back, the mean rate). The CPU backend runs device, host, copies and
// collectives all in this memory, so one bandwidth serves every memory path. Cached in
// $XDG_CACHE_HOME (or ~/.cache)/zerotrain/hardware_this.json for this host name and core count;
// `refresh` measures again. Takes about 3 s.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "zero/step_time.h"

namespace zt {

// Errors: `disk_dir` not writable (named). `report` (optional) says where the numbers came from.
absl::StatusOr<Hardware> measure_this_machine(const std::string& disk_dir, bool refresh,
                                              std::string* report);

// `name`: a built-in profile (zero/step_time.h), "this" (measure_this_machine, the drive under
// disk_dir), or "this-refresh" (measured again). `source` says where the numbers come from.
absl::StatusOr<Hardware> hardware_named(const std::string& name, const std::string& disk_dir,
                                        std::string* source);

}  // namespace zt

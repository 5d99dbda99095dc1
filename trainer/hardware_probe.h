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
#include "model/config.h"
#include "trainer/ds_config.h"
#include "zero/step_time.h"

namespace zt {

// Errors: `disk_dir` not writable (named). `report` (optional) says where the numbers came from.
absl::StatusOr<Hardware> measure_this_machine(const std::string& disk_dir, bool refresh,
                                              std::string* report);

// `name`: a built-in profile (zero/step_time.h), "this" (measure_this_machine, the drive under
// disk_dir), or "this-refresh" (measured again). `source` says where the numbers come from.
absl::StatusOr<Hardware> hardware_named(const std::string& name, const std::string& disk_dir,
                                        std::string* source);

// The CPU backend's forward and backward of one micro-batch of B x T tokens of model c, as the
// run `ds` runs the first micro-batch of a step on one rank (its dtypes, stage and offloaded
// state, a drive's in host memory: at stages 2-3 the gradients' way out, and stage 3's
// parameters' way in, are timed with the compute; each pass is followed by an untimed step at
// learning rate 0), on `threads` OpenMP threads: the model cut to one block and to three, their
// passes alternating (5 each after a warm-up, fewer once they took 8 s; medians), so a block's
// time is half their
// difference and the rest (embedding, head, loss) what the one-block model leaves. With
// `beside_busy_core` the three-block pass is timed again beside a thread streaming memory as the
// CPU optimizer does, for the slowdown the offload pipeline's optimizer thread causes the
// compute beside it. What a constant efficiency misses (docs/estimator.md: 0.5 to 0.87 of sgemm
// by shape on one VM): the non-GEMM work of a short micro-batch, the head's share, the
// gradients' copies. Seconds; 15-25 s for gpt2-124m at 1 x 32 tokens on a 2-core VM, 44 s at
// 32 x 32. Errors: FailedPrecondition when the two cut models would take more than a quarter of
// this machine's memory (the caller then predicts from FLOPs); the run's optimizer state or
// parameter store failing to be made.
struct MicroBatchTimes {
  double block_s = 0, rest_s = 0;  // seconds: one block; embedding, head and loss
  double busy_core_slowdown = 1;   // the three-block pass beside the streaming thread / alone
  double seconds(const ModelConfig& c) const { return rest_s + c.n_layer * block_s; }
};
absl::StatusOr<MicroBatchTimes> measure_micro_batch(const ModelConfig& c, const DsConfig& ds,
                                                    int B, int T, int threads,
                                                    bool beside_busy_core);

}  // namespace zt

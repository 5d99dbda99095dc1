// Faults at named points, for tests only: when the environment variable ZEROTRAIN_FAULT_POINT
// names a point ("save.renamed", or "save.renamed:3" for its third pass), the process kills
// itself there with SIGKILL, as a crash, an OOM kill or a scheduler's kill -9 would, so a test
// hits each window of a save or a swap every run instead of by chance. With
// ZEROTRAIN_FAULT_ACTION=stop it stops itself there instead (SIGSTOP: a rank that hangs, as on
// a hung file system). Unset (every normal run) a point costs one branch. The points are listed
// in docs/checkpoints.md ("Faults at named points").
#pragma once

namespace zt {

// Kills this process (SIGKILL) if ZEROTRAIN_FAULT_POINT names `point` and this is the pass it
// names (1 when it gives none). Thread-safe; counts passes per process.
void fault_point(const char* point);

// Whether ZEROTRAIN_FAULT_POINT names `point` and this is the pass it names or a later one, for
// a point that fails in a way of its own: "device_alloc" makes that device allocation and every
// later one fail as past the device-memory limit (common/memory.h check_memory_limit), as a
// limit once crossed stays crossed. Thread-safe; counts passes.
bool fault_fires(const char* point);

// Forced fp16 overflows, for tests only: ZEROTRAIN_FORCE_OVERFLOW="2,5,6" makes the 2nd, 5th
// and 6th call (one per optimizer step, on every rank alike) return true, and the engine then
// treats that step's gradients as overflowed (the loss scaler's trajectory under a chosen
// pattern, against DeepSpeed's). Unset: always false. Thread-safe; counts calls per process.
bool forced_overflow();

}  // namespace zt

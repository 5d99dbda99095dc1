// Optimizer offload to CPU memory (Ren et al., "ZeRO-Offload", USENIX ATC 2021; DeepSpeed's
// zero_optimization.offload_optimizer.device "cpu"): the fp32 master weights and Adam moments
// of the owned elements live in host memory and CPU Adam (model/cpu/cpu_adam.h) updates them.
// Per unit and per sub-group (zero_optimization.sub_group_size elements): the 16-bit (or
// fp32) gradient moves device -> host, CPU Adam runs, the updated working copy moves host ->
// device. The device keeps no fp32 state: K = 12 bytes per owned parameter move to the host,
// and each step moves the owned gradient out and the owned working copy in (the paper's 2Ψ/N_d
// + 2Ψ/N_d in 16-bit).
#pragma once

#include <cstdint>
#include <memory>

#include "model/backend.h"
#include "offload/nvme_swapper.h"
#include "zero/deepspeed_defaults.h"
#include "zero/optimizer_state.h"

namespace zt {

struct CpuOffloadOptions {
  bool pin_memory = true;                  // offload_optimizer.pin_memory: page-locked host state
  // Elements per CPU step granule (staging buffers).
  int64_t sub_group_size = ds_default::kSubGroupSize;
  // nvme (offload_optimizer.pipeline_read / pipeline_write): read the next sub-group ahead /
  // write the updated one behind while CPU Adam works; either adds a second host window.
  bool pipeline_read = false, pipeline_write = false;
  OptimizerKind kind = OptimizerKind::kAdamW;  // whose states it keeps (optimizer.type)
};

// The state for `be`'s device: host buffers are allocated as the engine registers units (K =
// optimizer_bytes_per_param(o.kind, false) bytes per owned element: AdamW 12, Lion and
// Adagrad 8; category kOptimizer of host_tracker()), the two staging buffers of
// min(sub_group_size, largest owned unit) fp32 elements at the first update (kPinnedHost, also
// when the OS refused to pin them). Throws std::bad_alloc when host memory runs out.
std::unique_ptr<OptimizerState> make_cpu_optimizer_state(Backend* be, const CpuOffloadOptions& o);

// offload_optimizer.device "nvme" (ZeRO-Infinity): the same update, with master weights and
// states in one file per unit on `swapper`'s drive (K bytes per owned element, rounded to
// 4 KiB per sub-group region, counted as kNvme in host_tracker()). Each sub-group is read into
// a host window, updated, and written back; host memory holds only the window and staging.
// A failed read or write (e.g. the drive is full) throws std::runtime_error with the OS error.
std::unique_ptr<OptimizerState> make_nvme_optimizer_state(Backend* be, const CpuOffloadOptions& o,
                                                          std::unique_ptr<NvmeSwapper> swapper);

}  // namespace zt

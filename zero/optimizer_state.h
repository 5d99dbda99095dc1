// Where a rank's optimizer state lives (docs/architecture.md "Offload"): the fp32 master weights
// and the optimizer's state tensors (model/optimizer_math.h, optimizer_info: named as
// torch.optim names them) of the elements it owns, and the update on them. The engine keeps the
// stage logic (what is owned, reduced, gathered) and calls this per unit, so offloading the state
// (offload/: host memory or NVMe) changes no stage code. The device implementation below is the
// engine's behaviour without offload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/dtype.h"
#include "common/memory.h"
#include "model/backend.h"
#include "model/optimizer_math.h"
#include "zero/offload_device.h"

namespace zt {

class OptimizerState {
 public:
  virtual ~OptimizerState() = default;

  // Registers the next unit (0, 1, ... in order) with `owned` elements. fp32_working is the
  // device fp32 working copy of exactly those elements, which a device state uses as its master
  // (K = 8 bytes per parameter instead of 12); null when the working copy is 16-bit.
  virtual void add_unit(size_t owned, float* fp32_working) = 0;
  // The fp32 master weights of unit u's owned elements, from or to host memory (owned floats).
  virtual void set_master(int u, const float* host) = 0;
  virtual void get_master(int u, float* host) = 0;
  // The optimizer's states of unit u's owned elements (optimizer_info(kind()).num_states
  // arrays of owned floats, in its order), from or to host memory: checkpoints save and
  // restore them.
  virtual void set_states(int u, const float* const* host) = 0;
  virtual void get_states(int u, float* const* host) = 0;
  // The optimizer whose states this holds; update() takes steps of this kind only.
  virtual OptimizerKind kind() const = 0;
  // True when unit u's master is its device working copy, so update() needs no `out`.
  virtual bool master_is_working_copy(int u) const = 0;
  // The buffers of one update (owned elements each).
  struct Io {
    // The gradient in grad_t: device memory, left all zeros when OptimizerStep::zero_grad; or
    // host memory when grad_on_host (zero/gradients.h's host shard or landed copy; left as it
    // is; offloaded states only).
    void* grad = nullptr;
    DType grad_t = DType::kF32;
    bool grad_on_host = false;
    // Receives the updated weights rounded to out_t, or null; device memory, or host memory
    // when out_on_host (stage-3 parameter offload, the delayed update's staging).
    void* out = nullptr;
    DType out_t = DType::kF32;
    bool out_on_host = false;
  };
  // The optimizer's update on unit u (model/optimizer_math.h; s.kind == kind()).
  virtual void update(int u, const Io& io, const OptimizerStep& s) = 0;

  // Waits for writes still in flight (NVMe write-behind), so their errors surface now; the
  // engine calls it at the end of every step.
  virtual void flush() {}
  // Makes the buffers the update's device copies use (pinned staging: a call into the GPU's
  // driver) on the calling thread, before an update runs on another (zero/update_pipeline.h).
  virtual void prepare_staging() {}

  // Host memory of an offloaded state, by category (null when everything is on the device).
  virtual const MemoryTracker* host_tracker() const { return nullptr; }
  // Bytes copied device -> host and host -> device since construction (offload traffic).
  virtual int64_t bytes_to_host() const { return 0; }
  virtual int64_t bytes_to_device() const { return 0; }
  // Time spent by phase since construction (zeros when nothing is offloaded).
  virtual OffloadTimes times() const { return {}; }
};

// Elements an offloaded state updates at once for a unit of `owned` elements (its sub-group):
// zero_optimization.sub_group_size (<= 0: the whole unit), at most the unit, rounded up to a
// multiple of `align` elements. NVMe uses align = 1024, so every fp32 region of a sub-group is
// whole 4 KiB blocks (O_DIRECT) and only a unit's last sub-group carries padding. Shared by
// offload/cpu_optimizer.cc and the estimator.
inline size_t offload_granule(size_t owned, int64_t sub_group_size, size_t align = 1) {
  size_t g = owned > 0 ? owned : 1;
  if (sub_group_size > 0 && (size_t)sub_group_size < g) g = (size_t)sub_group_size;
  return (g + align - 1) / align * align;
}
// Elements of each of an offloaded state's two staging buffers (gradient, working copy) for
// sub-groups of at most `granule`: two tiles of half a sub-group, so the copy stream moves one
// tile while the CPU optimizer works on the other. Shared by offload/cpu_optimizer.cc and the
// estimator.
inline size_t staging_elems(size_t granule) { return (granule + 1) / 2 * 2; }
// NVMe bytes of one unit's state: whole sub-groups of the master and the optimizer's states
// (4 bytes an element for the master and for each state).
inline size_t nvme_state_bytes(size_t owned, int64_t sub_group_size, OptimizerKind kind) {
  const size_t g = offload_granule(owned, sub_group_size, 1024);
  return (owned + g - 1) / g * (1 + optimizer_info(kind).num_states) * g * 4;
}

// Master weights (unless aliased) and states in the backend's memory, category kOptimizer,
// updated by the backend's fused optimizer step.
std::unique_ptr<OptimizerState> make_device_optimizer_state(Backend* be, OptimizerKind kind);

}  // namespace zt

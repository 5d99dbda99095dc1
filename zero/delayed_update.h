// The delayed parameter update (DPU; Ren et al., "ZeRO-Offload", USENIX ATC 2021, Section 5.2):
// an offloaded optimizer's step on host snapshots of the owned gradients, run on a thread of
// its own while the next forward and backward run on the weights as they were, its new weights
// staged in host memory until the engine publishes them (zero/engine.h delayed_update_after).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "common/memory.h"
#include "model/backend.h"
#include "zero/optimizer_state.h"

namespace zt {

class DelayedUpdate {
 public:
  // One unit's owned slice: its elements and the dtype its gradient is stored in.
  struct Slice {
    size_t owned = 0;
    DType grad_t = DType::kF32;
  };
  // state: the offloaded optimizer state the update runs on (host memory or NVMe); slices: per
  // unit; out_t: the working dtype the new weights are staged in. The host snapshots are
  // allocated at the first start() and kept for the run (host_tracker counts them).
  DelayedUpdate(Backend* be, OptimizerState* state, std::vector<Slice> slices, DType out_t)
      : be_(be), state_(state), slices_(std::move(slices)), out_t_(out_t) {}
  ~DelayedUpdate() { wait_quietly(); }

  // Snapshots every unit's owned gradient into host memory, device_grad(u) of unit u's slice
  // (device memory, slices[u].grad_t), or the state's own host store where it is null
  // (OptimizerState::copy_gradient), then starts the step `as` on all units in the background.
  // Not while one runs.
  void start(const std::function<const void*(int)>& device_grad, const OptimizerStep& as);
  bool running() const { return worker_.joinable(); }
  // Waits for the running update (no-op when none); rethrows its error (e.g. NVMe).
  void wait();
  // After wait(): publish(u, bytes, n) for each unit the update wrote, with its new owned
  // weights in out_t (n bytes of host memory), in unit order.
  void for_each_result(const std::function<void(int, const void*, size_t)>& publish);

  const MemoryTracker& host_tracker() const { return host_; }
  int64_t bytes_to_host() const { return to_host_; }  // gradient snapshots copied off the device

 private:
  struct Unit {
    std::vector<uint8_t> grad, out;
    bool active = false;  // part of the update now running, or run and not yet published
  };
  void wait_quietly() {
    if (worker_.joinable()) worker_.join();
  }

  Backend* be_;
  OptimizerState* state_;
  std::vector<Slice> slices_;
  DType out_t_;
  std::vector<Unit> units_;
  std::thread worker_;
  std::exception_ptr error_;
  MemoryTracker host_;
  int64_t to_host_ = 0;
};

}  // namespace zt

// An offloaded optimizer's step off the training thread (docs/offload.md "The offload
// pipeline"): a worker thread with OpenMP threads of its own (zerotrain.optimizer_threads) runs
// the update unit by unit in forward order and says when each unit is done, so the engine can
// publish that unit's new weights as soon as the next forward needs them. Two uses:
//   - the offload pipeline (zerotrain.offload_pipeline): the step ends when the update starts;
//     the next forward's fetch of unit u waits for unit u alone (ZeRO-Offload's overlap of the
//     CPU step with compute, Ren et al., USENIX ATC 2021, Section 4.2, taken unit by unit);
//   - the delayed parameter update (Section 5.2): the update reads gradients the next backward
//     does not write, and its new weights wait (in staging, or in a second working copy) until
//     the next step puts them in place, each unit's published at its next fetch (one step
//     stale).
// Each unit's update is the same call the training thread would make, on the same tiles, so a
// pipelined run is bitwise the serial one.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/memory.h"
#include "model/backend.h"
#include "zero/host_buffer.h"
#include "zero/optimizer_state.h"
#include "zero/partition.h"

namespace zt {

class UpdatePipeline {
 public:
  // One unit's owned slice: its elements and the dtype its gradient is stored in.
  struct Slice {
    size_t owned = 0;
    DType grad_t = DType::kF32;
  };
  // state: the offloaded optimizer state the update runs on (host memory or NVMe); slices: per
  // unit; out_t: the working dtype of the new weights; threads (>= 1): the worker's OpenMP
  // threads; be: the backend the staging's copies are queued on (their waits, release()).
  // Staging slots are allocated at their first use and kept for the run (host_tracker counts
  // them as kParams), page-locked by be when `pin` so that their copies to a GPU run on its copy
  // engine while it computes.
  UpdatePipeline(OptimizerState* state, std::vector<Slice> slices, DType out_t, int threads,
                 Backend* be, bool pin);
  // Ends the running update early and waits for it (its error is dropped) and for every copy
  // still reading a slot.
  ~UpdatePipeline();
  UpdatePipeline(const UpdatePipeline&) = delete;
  UpdatePipeline& operator=(const UpdatePipeline&) = delete;

  // Where unit u's update reads its gradient and writes its weights.
  struct Source {
    // The gradient (grad_t, owned elements), in host memory: read in place by the update, which
    // the caller keeps unwritten until it is done (the delayed update hands the buffer over:
    // Gradients::hand_off).
    const void* grad = nullptr;
    // Host memory the new weights go to directly (the working copy, where the backend's memory
    // is the host's); null: host staging, handed out by take().
    void* out = nullptr;
  };
  // Starts the step `as` on every unit in forward order on the worker and returns. Not while
  // one runs (running()). staging_slots (>= 1): how many units' weights may wait in staging at
  // once; unit u takes slot u % staging_slots (as large as the largest unit it holds), and the
  // worker waits for it to be released. The delayed update, whose weights all wait for the next
  // step, gives one per unit; the pipeline kStagingSlots, so staging stays two units however
  // large the model.
  void start(const std::function<Source(int)>& source, const OptimizerStep& as, int staging_slots);
  static constexpr int kStagingSlots = 2;
  // Where unit u's new weights go: one rule the engine and the estimator read. host_addressable:
  // the backend's device memory is the host's (the CPU backend). The pipeline writes the working
  // copy itself where the host can address it and it is on the device (not an offloaded shard);
  // elsewhere staging, copied in.
  static bool writes_working_copy(const UnitPartition& u, bool host_addressable) {
    return host_addressable && u.params == ParamHome::kDevice;
  }
  // The delayed update, whose next forward still reads the working copy, writes a second one
  // that its publication swaps in, where the pipeline would write the working copy and that
  // copy is the owned slice whole (one rank at stages 1-2, a replicated unit), so the second
  // copy costs what staging would; not stage-3 shards (the gatherer holds their address).
  static bool swaps_working_copy(const UnitPartition& u, bool host_addressable) {
    return writes_working_copy(u, host_addressable) && !u.sharded_params && u.owned() == u.padded;
  }
  // An update started and not yet waited for whole (wait_all).
  bool running() const { return running_; }
  // Waits until unit u's update is done (at once when it is, or none runs). Rethrows
  // the update's error (e.g. NVMe); after one, every later wait rethrows it too.
  void wait(int u);
  // Waits for every unit and for the state's writes behind (OptimizerState::flush).
  void wait_all();
  // After wait(u): unit u's new weights in staging (out_t, owned elements), once; empty when
  // they went straight to Source::out or were taken. Units are taken in forward order;
  // release(u, copy) hands the slot back to the worker, which waits for the backend's copy
  // `copy` (the one that reads the slot; 0: none) before it writes the slot again, so the
  // training thread never waits for a copy. Every taken slot must be released before the next
  // start().
  std::span<const uint8_t> take(int u);
  void release(int u, uint64_t copy);

  // The state's times (OptimizerState::times) when the running update started: the engine
  // reports a running update's time once it is done, so that a step's breakdown holds whole
  // updates.
  const OffloadTimes& state_times_at_start() const { return times_at_start_; }
  const MemoryTracker& host_tracker() const { return host_; }

 private:
  struct Unit {
    const void* grad_ptr = nullptr;  // what the update reads (host memory)
    void* out_ptr = nullptr;         // what it writes: the caller's memory, or null (a slot)
    bool staged = false;             // its weights wait in its slot for take()
  };
  struct Slot {
    HostBuffer out;
    bool free = true;   // guarded by mu_
    uint64_t copy = 0;  // the copy still reading out, waited for before it is written (or freed)
  };
  void wait_copy(Slot& sl);  // sl.copy done, then none
  void run();  // the worker's loop
  Slot& slot(int u) { return slots_[u % slots_used_]; }

  OptimizerState* state_;
  std::vector<Slice> slices_;
  DType out_t_;
  int threads_;
  std::vector<Unit> units_;
  std::vector<Slot> slots_;
  int slots_used_ = 1;  // this job's staging_slots
  OptimizerStep step_;
  OffloadTimes times_at_start_;
  Backend* be_;
  bool pin_;
  bool running_ = false;  // training thread's view: started and not wait_all'ed
  MemoryTracker host_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool job_ = false, stop_ = false;  // guarded by mu_
  bool abandon_ = false;             // the destructor: the job ends at the next unit, mu_
  size_t done_ = 0;                  // units finished in this job (in order), guarded by mu_
  std::exception_ptr error_;         // guarded by mu_
  std::thread worker_;               // last: started once everything above exists
};

}  // namespace zt

// One owner for every unit's gradient from the backward to the update (docs/architecture.md
// "ZeRO engine"): the fp32 scratch a backward writes, the stored gradient (the whole unit at
// stages 0-1 and for units kept whole, this rank's shard at stages 2-3), stage 1's reduced
// shard, the reductions in flight, and each unit's Σ g² for the global norm. The engine says
// when (a unit's backward, its reduction, the step); this class says where the gradient is and
// what it holds. Where the optimizer state is offloaded, the stage 2-3 shards live here in host
// memory (ZeRO-Offload, Ren et al. 2021, Section 4.1: the reduced gradient partition moves to
// the CPU, 2Ψ/N_d bytes per step in 16-bit; DeepSpeed's CPU offload does the same), and the
// update reads them through owned()'s view: the optimizer state keeps no gradient.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "common/dtype.h"
#include "common/memory.h"
#include "model/backend.h"
#include "zero/comm.h"
#include "zero/host_buffer.h"
#include "zero/offload_device.h"
#include "zero/partition.h"
#include "zero/zeropp.h"

namespace zt {

class Gradients {
 public:
  struct Options {
    DType grad_dtype = DType::kF32;  // the stored gradient's (DeepSpeed's grad accumulation dtype)
    bool overlap_comm = false;       // one reduction stays in flight behind the next backward
    bool reduce_scatter = true;      // false: all-reduce, keep the shard (DeepSpeed's option)
    // Host gradients (plan rows with host_grads) page-locked through it
    // (offload_optimizer.pin_memory), or pageable when null.
    Backend* pin_with = nullptr;
    // The offloaded optimizer's update runs off the training thread (the offload pipeline, the
    // delayed update): a gradient the device keeps (stage 1's reduced shard, a unit kept
    // whole) lands in host memory as soon as it is final, on the copy stream behind the rest
    // of the backward, so that the step finds every owned gradient on the host.
    bool land_on_host = false;
  };
  // plan: the engine's partition (zero/partition.h), a row per unit. comm: the ranks the shards
  // are over (the world, or the MiCS group); world: every rank (N_d, the mean's denominator,
  // replicated units' all-reduce); zeropp: qgZ's and MiCS's groups. note_wait(ms): the training
  // thread waited for a reduction. All must outlive it. Throws std::bad_alloc when host memory
  // runs out.
  Gradients(Backend* be, Communicator* comm, Communicator* world, const ZeroppGroups& zeropp,
            const std::vector<UnitPartition>& plan, const Options& o,
            std::function<void(double)> note_wait);
  ~Gradients();  // waits (without finishing) for the reductions and copies in flight
  Gradients(const Gradients&) = delete;
  Gradients& operator=(const Gradients&) = delete;

  // ---- the backward (UnitEngine's calls for unit u) ----
  // Where unit u's backward adds its fp32 gradient (padded elements): the stored gradient
  // itself where it is a whole fp32 unit (stages 0-1, units kept whole), else a zeroed scratch.
  float* backward_target(int u);
  // Where the backend's kernels may add in the stored dtype (a whole unit in a dtype the backend
  // adds into, not offloaded), else backward_target(u) as fp32.
  TensorRef kernels_target(int u);
  // The backward of unit u ended: the scratch goes into the stored gradient, and the reduction
  // starts (stages 0-1 at the accumulation boundary only, stages 2-3 every micro-batch).
  void reduce(int u, bool boundary);
  // Finishes reductions in flight, oldest first, until `keep` remain.
  void drain(size_t keep);

  // ---- the step ----
  // Σ g² of the owned gradients of the units counted(u) selects, in unit order, in double:
  // this rank's share of the global norm (the device waited for once). Call after drain(0).
  double owned_sum_squares(const std::function<bool(int)>& counted);
  // Unit u's owned gradient as the update reads it, in its stored dtype (no conversion pass):
  // stage 1's reduced fp32 shard (zeros when no backward ran since the last step), else the
  // stored gradient; in host memory at stages 2-3 with the optimizer offloaded, and for every
  // unit with land_on_host (its copy landed). A gradient stale since the last step is zeroed first.
  // A device view stays valid until end_step() (stage 1's shard is freed there) or the unit's next
  // backward; a host view stays unwritten until the unit's next reduce(), so a caller that hands it
  // to another thread must have that thread's update done before it calls backward_target(u) for
  // the next backward (the engine's publish(u)).
  struct View {
    void* data = nullptr;
    DType dtype = DType::kF32;
    bool host = false;  // data is host memory
  };
  View owned(int u);
  // The dtype owned(u)'s view has: fp32 for stage 1's reduced shard, else the stored dtype.
  DType owned_dtype(int u) const {
    return units_[u].reduced_view() ? DType::kF32 : opt_.grad_dtype;
  }
  // The delayed update takes unit u's host gradient (after owned(u)) instead of a copy of it:
  // returns the view owned(u) gave, which stays unwritten until the next hand_off(u), and the
  // unit's next backward writes into a second buffer (allocated at the first hand-off, in the
  // same memory), so the two alternate and no pass copies the shard (ZeRO-Offload's delayed
  // update, Ren et al. 2021, Section 5.2, double-buffers the same way). Host views only (owned
  // returns one).
  View hand_off(int u);
  // Whether the update may zero unit u's gradient as it reads it (OptimizerStep::zero_grad): the
  // backward's kernels add into it next, so it must hold zeros, and one pass does both.
  bool zero_as_read(int u) const;
  // The update read unit u's gradient, zeroing it when `zeroed` (else its next writer
  // overwrites it).
  void read(int u, bool zeroed);
  // The step ended: every gradient stands for zeros (an fp32 one the backward adds into is
  // zeroed now, the others are stale: overwritten by their next writer, or zeroed by
  // kernels_target), stage 1's reduced shards are freed, the copies to the host have landed.
  void end_step();

  // Unit u's owned gradient as fp32 into `out` (device memory, owned elements): tests and
  // get_unit_grads. Call after drain(0).
  void owned_f32(int u, float* out);

  // Host gradients, for reports: bytes by category (kGrads, and kPinnedHost for the fp32 tile
  // gradient accumulation moves through), bytes copied device -> host, and the time spent
  // moving them (OffloadClock::kGradOut).
  const MemoryTracker& host_tracker() const { return host_; }
  // Elements of that tile: the largest host shard, at most this (the estimator counts it).
  static constexpr size_t kAccumulateTile = size_t(1) << 20;
  int64_t bytes_to_host() const { return to_host_; }
  OffloadTimes times() const { return clock_.times(); }

 private:
  struct Unit {
    size_t numel = 0, shard = 0, padded = 0;  // as the plan's row
    bool replicated = false;                  // whole on every rank, all-reduced
    bool whole = false;      // the stored gradient is the whole unit (the plan's whole_grads)
    bool host = false;       // the shard lives in host memory
    bool lands = false;      // land_on_host: the device's final gradient is copied to host_stored
    bool landed = false;     // lands: its copy of this step is queued (else the step reads zeros)
    DeviceBuffer stored;     // the whole unit (stages 0-1, replicated) or shard; none when host
    HostBuffer host_stored;  // host: the shard, in the gradient's dtype; lands: owned(u)'s copy
    HostBuffer handed_off;   // the other buffer of hand_off's pair, read by the update
    std::optional<double> host_ss;  // host: Σ g² of host_stored, summed as it was written
    DeviceBuffer scratch;           // fp32 whole-unit gradient while a backward writes it
    DeviceBuffer reduced;  // stage 1: fp32 averaged shard after the boundary's reduce-scatter
    // What the stored gradient holds since the last step:
    //   kZero        zeros: nothing to read;
    //   kStale       the zeros it stands for, but the buffer still holds the last step's
    //                values: its next writer overwrites it (scale_add without accumulate), or
    //                settle_stale zeroes it, so the step did not spend a pass zeroing it;
    //   kWritten     this step's gradient, written by passes here (or, direct, added by the
    //                backward's kernels);
    //   kKernelsAdd  this step's gradient, which kernels_target handed to the backward's
    //                kernels to add into: the serial update zeroes it as it reads it
    //                (zero_as_read), else end_step leaves it stale.
    enum class Stored { kZero, kStale, kWritten, kKernelsAdd } state = Stored::kZero;
    // Σ g² of the owned gradient: not known yet (the step sums it), zero, or in the unit's
    // norm slot, summed on the device by the pass that last wrote the gradient.
    enum class SumSq { kUnknown, kZero, kInSlot } ss = SumSq::kUnknown;
    size_t owned() const { return replicated ? numel : shard; }
    // Stage 1: the step reads the reduced fp32 shard, not the stored (whole) gradient.
    bool reduced_view() const { return whole && !replicated; }
    bool holds_values() const { return state == Stored::kWritten || state == Stored::kKernelsAdd; }
    void mark_written() {
      if (state != Stored::kKernelsAdd) state = Stored::kWritten;
    }
  };
  // A reduction in flight (overlap_comm): its buffers live until it completes.
  struct Pending {
    int unit;
    CommRequest req;
    DeviceBuffer send;                 // fp32 whole-unit gradient being reduced
    DeviceBuffer recv;                 // fp32 shard (reduce-scatter) or empty (all-reduce)
    bool shard_of_all_reduce = false;  // reduce_scatter false: recv is cut from send
    bool boundary = false;             // of the step's last micro-batch: its result is final
    QuantizedReduce qgz;               // ZeRO++ qgZ: the quantized reduction in place of req
  };
  Unit& unit(int u) { return units_[u]; }
  double* norm_slot(int u);
  bool direct(const Unit& s) const;
  bool kernels_add_to_stored(const Unit& s) const;
  void settle_stale(int u);
  void reduce_to_shard(Pending& p, Unit& s);
  void finish(Pending& p);
  // host_stored = (accumulate ? host_stored : 0) + scale * x, rounded as Backend::scale_add
  // rounds; x: device fp32, the shard.
  void accumulate_host(int u, const float* x, float scale, bool accumulate);
  // lands: unit u's final owned gradient `src` (device, owned_dtype(u)) to host_stored, on the
  // copy stream; `source` (if any) is src's buffer, kept until the copy lands. Its Σ g² must be
  // in the norm slot or summed here.
  void land(int u, const void* src, DeviceBuffer source);
  // Queues the copy of `src` (device) into all of unit u's host_stored on the copy stream, after
  // the one in flight; `source` (src's buffer where it is a temporary) lives until it lands.
  void copy_out(int u, const void* src, DeviceBuffer source);
  void settle_copy();  // waits for the copy to the host in flight and frees its source

  Backend* be_;
  Communicator* comm_;
  Communicator* world_;
  const ZeroppGroups& zeropp_;
  Options opt_;
  std::function<void(double)> note_wait_;
  int rank_ = 0;  // in comm_
  int dp_ = 1;    // N_d
  std::vector<Unit> units_;
  // One double per unit on the device: Σ g² of its owned gradient, written by the pass that
  // wrote the gradient, so the step waits for the device once, not per unit.
  DeviceBuffer norm_ss_;
  std::deque<Pending> pending_;
  MemoryTracker host_;
  HostBuffer stage_;                        // fp32, the tile an accumulated gradient moves through
  struct Copy {                             // the copy to the host in flight (one at a time)
    bool active = false;
    uint64_t ticket = 0;
    DeviceBuffer source;  // its source where it is a temporary
  } copy_;
  int64_t to_host_ = 0;
  OffloadClock clock_;
};

}  // namespace zt

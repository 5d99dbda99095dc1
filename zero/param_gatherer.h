// Stage 3's parameter gatherer (docs/architecture.md "ZeRO engine"; Rajbhandari et al., SC20,
// Section 5.3; DeepSpeed's partitioned_param_coordinator): who uses which unit, and for a
// sharded unit the all-gather of its shards into the whole unit while it is used. It learns the
// step's unit sequence (the trace) in the first step, then, with overlap_comm, gathers the next
// units ahead (stage3_prefetch_bucket_size, within stage3_max_live_parameters), keeps a
// released unit that is fetched again within stage3_max_reuse_distance parameters, and with
// parameters offloaded to a drive starts their reads ahead. The engine composes it. ZeRO++
// (zero/zeropp.h) plugs in here: qwZ sends the shards quantized, hpZ gathers a unit's backward
// uses from the secondary shards its forward gather left within the hpZ group.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/dtype.h"
#include "common/memory.h"
#include "model/backend.h"
#include "zero/comm.h"
#include "zero/param_store.h"
#include "zero/partition.h"
#include "zero/zeropp.h"

namespace zt {

class ParamGatherer {
 public:
  // Where a sharded unit's shard lives between gathers: device memory (`device`), or the
  // parameter store's handle `store` (offloaded).
  struct Shard {
    const void* device = nullptr;
    int store = -1;
  };
  // plan: the partition plan, a row per unit; shards: per unit (unused for units whose
  // parameters are not sharded). be, comm and store (null: no parameter offload) outlive it.
  // Shards are param_dtype; the stage3_* options of `zero` apply. quantized_weights: ZeRO++'s
  // qwZ; hpz (null: off): the hpZ group; world (null: comm): every rank, whose unit sequences
  // must agree (under MiCS comm is one group of them). All outlive the gatherer.
  ParamGatherer(Backend* be, Communicator* comm, ParamStore* store, DType param_dtype,
                int64_t prefetch_bucket_size, int64_t max_live_parameters,
                int64_t max_reuse_distance, bool overlap_comm,
                const std::vector<UnitPartition>& plan, std::vector<Shard> shards,
                bool quantized_weights = false, Communicator* hpz = nullptr,
                Communicator* world = nullptr);
  ~ParamGatherer();  // no all-gather may still write into a freed buffer
  ParamGatherer(const ParamGatherer&) = delete;
  ParamGatherer& operator=(const ParamGatherer&) = delete;

  // Called with a unit's index before its shard is read (gathered, loaded or read ahead): the
  // engine publishes the unit's pipelined update there (zero/update_pipeline.h).
  void set_before_read(std::function<void(int)> fn) { before_read_ = std::move(fn); }
  // A user of unit u begins. A sharded unit is gathered (the trace records the fetch, and the
  // units after it are prefetched and read ahead): returns the whole unit, padded elements of
  // param_dtype in the backend's memory, valid until its last release. Other units: null.
  const void* fetch(int u);
  // A user of unit u ends; true when it was the last one. A sharded unit is then freed, unless
  // it is fetched again soon (stage3_max_reuse_distance).
  bool release(int u);
  // A forward(/backward) pass starts: the sequence is matched against the trace from its start.
  void begin_pass();
  // Frees units still gathered (kept for reuse or prefetched) that nobody uses.
  void drop_gathered();
  // The step ended: the recorded sequence becomes the trace, and nothing stays gathered (the
  // parameters changed).
  void end_step();

  // Milliseconds spent waiting for all-gathers since the last reset.
  double comm_wait_ms() const { return comm_wait_ms_; }
  void reset_comm_wait() { comm_wait_ms_ = 0; }
  // Parameters (padded elements) gathered now, and at most at once.
  int64_t gathered_numel() const { return gathered_; }
  int64_t peak_gathered_numel() const { return peak_gathered_; }

 private:
  struct Unit {
    int64_t numel = 0, shard = 0, padded = 0;
    bool sharded = false;
    Shard home;
    DeviceBuffer gathered;  // the whole unit while gathered
    CommRequest req;
    QuantizedAllGather qwz;  // qwZ: the quantized gather in place of req
    bool pending = false;    // req not waited for yet
    int live = 0;            // users now (nested fetches)
    // hpZ: this rank's 1/H of the whole unit, kept from the forward's gather to the step's end;
    // refresh_secondary: the gather in flight is a forward's, which refreshes it.
    DeviceBuffer secondary;
    bool refresh_secondary = false;
  };
  // Collective: every rank fetches the same unit, else each throws std::runtime_error.
  void check_unit_sequence(int u);
  // Issue the all-gather of unit u; `backward`: a use after the pass's first (hpZ gathers it
  // from the secondary shards).
  void gather(int u, bool backward);
  size_t secondary_numel(const Unit& s) const;  // hpZ: padded / H, this rank's secondary shard
  void wait_gathered(Unit& s);                  // complete it
  void free_gathered(Unit& s);
  void make_room(int64_t numel);  // evict kept, not-live units above the live limit
  bool keep_for_reuse(int u) const;
  void prefetch_after(size_t cursor);     // overlap_comm
  void read_ahead(size_t cursor);         // parameters on a drive
  bool in_host_memory_soon(int u) const;  // the prefetcher may gather it without a read stall
  void restart_reads_ahead();             // a new pass or step: from the trace's start

  Backend* be_;
  Communicator* comm_;
  ParamStore* store_;
  DType dtype_;
  int64_t prefetch_bucket_size_, max_live_, max_reuse_distance_;
  bool overlap_comm_;
  bool quantized_weights_;
  Communicator* hpz_;
  Communicator* world_comm_;
  int rank_, world_;
  std::vector<Unit> units_;
  // The unit sequence of the previous step and our place in this one.
  std::vector<int> trace_, recording_;
  // Per entry of each: its unit was used before in the pass (a backward use; hpZ).
  std::vector<char> trace_backward_, recording_backward_;
  bool trace_valid_ = false;
  // Parameter reads ahead: fetches so far, and per unit the fetch at which its shard's read
  // began (-1: none), so the prefetcher gathers only shards read for at least a unit's compute.
  int64_t fetches_ = 0;
  std::vector<int64_t> read_at_;
  int64_t gathered_ = 0, peak_gathered_ = 0;
  double comm_wait_ms_ = 0;
  std::function<void(int)> before_read_;
};

}  // namespace zt

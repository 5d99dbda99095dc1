// Communicators (docs/architecture.md "Communicator"): the collectives ZeRO needs, blocking and
// non-blocking, on device buffers. Implementations: single-process (world size 1), MPI (host
// buffers: the CPU backend's device memory is host memory), NCCL (CUDA device buffers, unique id
// broadcast over MPI). Every communicator counts what each rank moves per collective kind, in
// the ZeRO paper's convention (Rajbhandari et al. 2020, section 7): a reduce-scatter or
// all-gather over a buffer of n elements counts n, an all-reduce 2n, an all-to-all its send
// buffer. Scalar reductions (loss, norms, overflow flags, checks) are counted apart and
// excluded from that volume.
//
// Links: a communicator knows whether its ranks span more than one node (spans_nodes()); every
// byte a collective of one that does is counted as between nodes, the rest as within a node.
// That is the ZeRO++ paper's accounting (Wang et al. 2023, Section 3: a collective is bound by
// the slowest link it crosses), and what a hierarchical collective saves shows there: its
// node-local steps run on a split() of the world that stays inside one node.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/memory.h"

namespace zt {

class CommLogger;

enum class CollKind {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBroadcast,
  kScalar,
  kCount
};
inline constexpr size_t kNumCollKinds = static_cast<size_t>(CollKind::kCount);
const char* coll_kind_name(CollKind k);

struct CollCounters {
  int64_t calls = 0;
  int64_t elements = 0;  // paper convention: RS/AG over n elements -> n, all-reduce -> 2n
  int64_t bytes = 0;     // elements x element size (quantized: the bytes sent)
  int64_t inter_node_bytes = 0;  // of bytes, those of collectives whose ranks span nodes
};
using CommStats = std::array<CollCounters, kNumCollKinds>;

// Completion of a non-blocking collective. wait() blocks until the buffers may be used; a
// default-constructed request is already complete.
class CommRequest {
 public:
  CommRequest() = default;
  explicit CommRequest(std::function<void()> wait) : wait_(std::move(wait)) {}
  void wait() {
    if (wait_) wait_();
    wait_ = nullptr;
  }

 private:
  std::function<void()> wait_;
};

enum class ScalarOp { kSum, kMax, kMin };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Rank within this node and ranks on this node (GPU selection, thread counts).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // Sum over ranks, in place: buf (n) of dtype t (fp32 on MPI; fp32/bf16/fp16 on NCCL).
  virtual CommRequest all_reduce(void* buf, size_t n, DType t) = 0;
  // out (n) on rank r = sum over ranks of in[r*n, (r+1)*n); in holds n * world_size elements.
  virtual CommRequest reduce_scatter(const void* in, void* out, size_t n, DType t) = 0;
  // out (n * world_size) = concatenation of every rank's in (n), in rank order. in may be this
  // rank's own slice of out (out + rank * n): the all-gather is then in place.
  virtual CommRequest all_gather(const void* in, void* out, size_t n, DType t) = 0;
  // Opaque bytes: out (bytes * world_size) = every rank's in (bytes), in rank order; `elements`
  // is how many parameters a rank's bytes carry (quantized weights), for the volume. in and out
  // do not overlap.
  virtual CommRequest all_gather_bytes(const void* in, void* out, size_t bytes,
                                       int64_t elements) = 0;
  // Opaque bytes: in holds world_size pieces of `bytes`, piece r for rank r; out receives piece
  // `rank()` of every rank, in rank order. `elements`: the values a piece carries (quantized
  // gradients), for the volume. in and out do not overlap.
  virtual CommRequest all_to_all_bytes(const void* in, void* out, size_t bytes,
                                       int64_t elements) = 0;
  // bytes of device buffer buf from rank root to every rank; blocking.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Host scalars reduced over ranks in place; blocking; counted as kScalar.
  virtual void all_reduce_scalars(double* v, int k, ScalarOp op) = 0;

  // How a rank waits in a collective that other ranks have not joined (zerotrain.
  // collective_timeout and collective_report_interval, seconds > 0): after report_interval_s it
  // says on stderr which collective (its name and sequence number) it waits in, again every
  // report_interval_s, and after timeout_s it ends every rank (exit 2) with that error; waiting
  // sleeps between polls rather than spinning. For this communicator and the groups split from
  // it. Defaults: 60 s and 600 s (PyTorch's for an NCCL process group). No effect on one
  // process, and none on NCCL's collectives yet (their host scalars and barriers go through the
  // MPI bootstrap, which is watched): wait_watched is what their CUDA events would be polled by.
  virtual void set_wait_limits(double /*report_interval_s*/, double /*timeout_s*/) {}

  // The ranks with the same `color` (>= 0), ordered by `key`, as a communicator of their own
  // (MPI_Comm_split, ncclCommSplit): hierarchical collectives run their node-local steps on one.
  // Collective over this communicator. The group counts into this communicator's counters (one
  // report for all) and logs to its logger; it must not outlive this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Whether the ranks of this communicator are on more than one node.
  bool spans_nodes() const { return spans_nodes_; }

  // Cumulative counters since construction (or reset_stats()), of this communicator and every
  // group split from it.
  const CommStats& stats() const { return root_->stats_; }
  void reset_stats() { root_->stats_ = {}; }
  // comms_logger (zero/comm_logger.h): each collective's time from here on goes to `logger`
  // (null: none). The MPI communicator times them on its communication thread; the others
  // do not log yet.
  void set_logger(CommLogger* logger) { root_->logger_.store(logger); }
  virtual bool logs_collectives() const { return false; }

 protected:
  void count(CollKind k, int64_t elements, size_t elem_bytes) {
    count_bytes(k, elements, elements * static_cast<int64_t>(elem_bytes));
  }
  void count_bytes(CollKind k, int64_t elements, int64_t bytes) {
    CollCounters& c = root_->stats_[static_cast<size_t>(k)];
    ++c.calls;
    c.elements += elements;
    c.bytes += bytes;
    if (spans_nodes_) c.inter_node_bytes += bytes;
  }
  CommLogger* logger() const { return root_->logger_.load(); }
  // A group split from `parent` counts and logs through the parent's root.
  void join(const Communicator& parent) { root_ = parent.root_; }
  bool spans_nodes_ = false;

 private:
  Communicator* root_ = this;
  CommStats stats_{};
  std::atomic<CommLogger*> logger_{nullptr};
};

class Backend;

// Communicator::set_wait_limits's two durations, in seconds.
struct WaitLimits {
  double report_interval_s = 60;
  double timeout_s = 600;
};

// For communicator implementations: waits until done() (a non-blocking test of collective
// `what`, e.g. "all_reduce #12 of 4 ranks") returns true, polling it back to back for the first
// millisecond, where most collectives end, then sleeping a sixteenth of the time waited so far
// (at most 1 ms, so a long collective is still polled and a rank that waits for a stuck one
// uses no core). Every report interval it says on stderr what it waits in; past the timeout it
// ends every rank (abort_all_ranks, exit 2): neither MPI nor NCCL can cancel one collective and
// go on (PyTorch's watchdog ends the process likewise).
void wait_watched(const std::function<bool()>& done, const WaitLimits& limits,
                  const std::string& what);

// World size 1: collectives copy (reduce-scatter / all-gather) or do nothing, and still count,
// so a single-rank run reports the same volume formula. Buffers live on `be`'s device and are
// copied by it (a GPU's memory is not the host's); with be null they are host memory.
std::unique_ptr<Communicator> make_single_process_communicator(Backend* be = nullptr);

// Every rank learns whether every rank's `st` is ok (one scalar reduction, so it cannot hang
// when some ranks failed): a failing rank gets its own error back, the others Aborted saying
// "another rank failed <what>; see its message". Collective.
absl::Status agree_on_all_ranks(Communicator& comm, const absl::Status& st,
                                const std::string& what);

// Agrees across ranks that `what` (e.g. a hash of the config and model) is identical; error on
// every rank naming `label` and the ranks that differ, so misconfigured launches fail fast.
absl::Status check_same_on_all_ranks(Communicator& comm, const std::string& label,
                                     const std::string& what);

// Host memory of `bytes` (> 0, zero-filled) that every rank of `comm` maps at once: rank 0
// creates it (common/memory.h SharedMemory), the others map it by name, and the name is removed
// once all have, so nothing of it outlives the run. For buffers that each rank writes a
// disjoint part of and every rank reads after a barrier (EngineOptions::node_shared_params).
// Collective, on a host communicator (MPI: its broadcast carries the name from a host buffer);
// the same verdict on every rank, so none hangs. Errors: FailedPrecondition when
// the ranks are not all on one node; the OS's error on the rank that got it (e.g. a full
// /dev/shm), Aborted on the others.
absl::StatusOr<SharedMemory> map_node_shared(Communicator& comm, size_t bytes);

}  // namespace zt

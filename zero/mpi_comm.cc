// MPI communicator: one communication thread runs every MPI call in issue order, for the world
// communicator and every group split from it (see mpi_comm.h). Volume counted in the ZeRO paper's convention: all-reduce of n -> 2n,
// reduce-scatter / all-gather over the full buffer (n * world_size) -> n * world_size.
#include "zero/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cleanup.h"
#include "common/status.h"
#include "common/timer.h"
#include "common/trace.h"
#include "zero/comm_logger.h"

namespace zt {
namespace {

// An all-reduce of this many bytes or more runs as MPI's blocking one after a watched barrier
// (MpiCommunicator::all_reduce).
constexpr size_t kBarrierFirstBytes = size_t{1} << 20;

// World rank of this process for messages (set once MPI is up; -1 before).
std::atomic<int> g_world_rank{-1};

// Internal invariant failure on one rank: file:line, then end every rank.
[[noreturn]] void fail_at(const char* file, int line, const std::string& msg) {
  abort_all_ranks(1, absl::StrCat("zerotrain internal error at ", file, ":", line, ": ", msg));
}
#define ZT_MPI_FAIL(msg) fail_at(__FILE__, __LINE__, (msg))

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// The one thread that runs every MPI call of a communicator and of the groups split from it,
// in the order they were issued (MPI_THREAD_SERIALIZED; non-blocking collectives would only
// progress when polled).
class CommThread {
 public:
  CommThread() : thread_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_one();
    thread_.join();  // drains the queue first
  }
  // Queues `op`; the request waits until it has run.
  CommRequest issue(std::function<void()> op) {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(op));
      seq = ++issued_;
    }
    work_cv_.notify_one();
    return CommRequest([this, seq] {
      std::unique_lock<std::mutex> lk(mu_);
      done_cv_.wait(lk, [&] { return completed_ >= seq; });
    });
  }

  // Communicator::set_wait_limits, for every communicator on this thread.
  void set_wait_limits(double report_interval_s, double timeout_s) {
    report_s_.store(report_interval_s);
    timeout_s_.store(timeout_s);
  }
  // The collective the ops run next belong to (on this thread): for the messages of complete().
  void set_current(const char* name, uint64_t seq, int ranks) { current_ = {name, seq, ranks}; }

  // Completes `rq`, a non-blocking collective that set_current named, on this thread (MPI
  // progresses it only when polled), watched as set_wait_limits says (wait_watched).
  void complete(MPI_Request& rq) {
    wait_watched(
        [&rq] {
          int done = 0;
          ZT_CHECK_MPI(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
          return done != 0;
        },
        WaitLimits{report_s_.load(), timeout_s_.load()},
        absl::StrCat(current_.name, " #", current_.seq, " of ", current_.ranks, " ranks"));
  }

 private:
  struct Current {
    const char* name = "";
    uint64_t seq = 0;  // this collective's number among those of its communicator, from 1
    int ranks = 0;
  };

  void loop() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop requested and drained
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      // An exception cannot reach the issuing thread from here, and this rank would be missing
      // from the collective the others run: end every rank with it (a buffer the host cannot
      // allocate, say).
      try {
        op();
      } catch (const std::exception& e) {
        abort_all_ranks(kUserErrorExitCode,
                        absl::StrCat("the communication thread failed: ", e.what()));
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        ++completed_;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t issued_ = 0,
           completed_ = 0;  // ops run in order, so op `seq` is done iff completed_ >= seq
  bool stop_ = false;
  std::atomic<double> report_s_{60}, timeout_s_{600};
  Current current_;  // the communication thread's alone
  std::thread thread_;  // last: starts once the rest is constructed
};

// Every rank learns the smallest and largest node id over `comm`: whether it spans nodes.
bool spans_nodes_of(MPI_Comm comm, int node) {
  int mm[2] = {node, -node};
  ZT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_INT, MPI_MAX, comm));
  return mm[0] != -mm[1];
}

class MpiCommunicator final : public Communicator {
 public:
  // Over a duplicate of MPI_COMM_WORLD. Nodes as MPI's shared-memory split finds them, or with
  // ranks_per_node > 0 consecutive groups of that many ranks (several "nodes" on one machine,
  // for tests of hierarchical collectives).
  explicit MpiCommunicator(int ranks_per_node) {
    ZT_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    ZT_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    ZT_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    ZT_CHECK_MPI(MPI_Comm_size(comm_, &world_));
    if (ranks_per_node > 0) {
      node_ = rank_ / ranks_per_node;
      local_rank_ = rank_ % ranks_per_node;
      local_size_ = std::min(ranks_per_node, world_ - node_ * ranks_per_node);
    } else {
      MPI_Comm node;
      ZT_CHECK_MPI(
          MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
      ZT_CHECK_MPI(MPI_Comm_rank(node, &local_rank_));
      ZT_CHECK_MPI(MPI_Comm_size(node, &local_size_));
      node_ = rank_;  // a node's id: the smallest world rank on it
      ZT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &node_, 1, MPI_INT, MPI_MIN, node));
      ZT_CHECK_MPI(MPI_Comm_free(&node));
    }
    spans_nodes_ = spans_nodes_of(comm_, node_);
    g_world_rank.store(rank_);
    // From here on only the communication thread calls MPI (thread start orders the calls above
    // before it: MPI_THREAD_SERIALIZED).
    thread_ = std::make_shared<CommThread>();
  }
  // A group split from `parent` (on the communication thread).
  MpiCommunicator(const MpiCommunicator& parent, MPI_Comm comm)
      : comm_(comm),
        thread_(parent.thread_),
        node_(parent.node_),
        local_rank_(parent.local_rank_),
        local_size_(parent.local_size_) {
    join(parent);
    thread_
        ->issue([this] {
          ZT_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
          ZT_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
          ZT_CHECK_MPI(MPI_Comm_size(comm_, &world_));
          spans_nodes_ = spans_nodes_of(comm_, node_);
        })
        .wait();
  }

  ~MpiCommunicator() override {
    thread_
        ->issue([this] {
          int finalized = 0;
          MPI_Finalized(&finalized);
          if (!finalized) MPI_Comm_free(&comm_);
        })
        .wait();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  bool logs_collectives() const override { return true; }
  void set_wait_limits(double report_interval_s, double timeout_s) override {
    thread_->set_wait_limits(report_interval_s, timeout_s);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (color < 0) ZT_MPI_FAIL(absl::StrCat("split color ", color, " is negative"));
    MPI_Comm sub = MPI_COMM_NULL;
    thread_->issue([this, color, key, &sub] {
      ZT_CHECK_MPI(MPI_Comm_split(comm_, color, key, &sub));
    }).wait();
    return std::make_unique<MpiCommunicator>(*this, sub);
  }

  CommRequest all_reduce(void* buf, size_t n, DType t) override {
    require_f32("all_reduce", t);
    count(CollKind::kAllReduce, 2 * static_cast<int64_t>(n), dtype_size(t));
    return issue("all_reduce", n * dtype_size(t), [this, buf, n] {
      auto* p = static_cast<float*>(buf);
      for (size_t off = 0; off < n;) {  // MPI counts are int: chunk huge buffers
        const int c = static_cast<int>(std::min<size_t>(n - off, size_t{1} << 30));
        MPI_Request rq;
        if (static_cast<size_t>(c) * sizeof(float) >= kBarrierFirstBytes) {
          // Every rank waits in the watched barrier, then the blocking all-reduce runs: Open
          // MPI's non-blocking one (libnbc) took twice as long on 32 MiB on 2 ranks. A rank
          // that stops inside it leaves the others waiting unwatched.
          ZT_CHECK_MPI(MPI_Ibarrier(comm_, &rq));
          thread_->complete(rq);
          ZT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, p + off, c, MPI_FLOAT, MPI_SUM, comm_));
        } else {
          ZT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, p + off, c, MPI_FLOAT, MPI_SUM, comm_, &rq));
          thread_->complete(rq);
        }
        off += static_cast<size_t>(c);
      }
    });
  }

  CommRequest reduce_scatter(const void* in, void* out, size_t n, DType t) override {
    require_f32("reduce_scatter", t);
    require_int_count("reduce_scatter", n);
    count(CollKind::kReduceScatter, static_cast<int64_t>(n) * world_, dtype_size(t));
    return issue("reduce_scatter", n * world_ * dtype_size(t), [this, in, out, n] {
      const int c = static_cast<int>(n);
      const size_t out_bytes = n * sizeof(float), in_bytes = out_bytes * world_;
      MPI_Request rq;
      if (in == out) {  // result lands in the first n elements of the buffer
        ZT_CHECK_MPI(
            MPI_Ireduce_scatter_block(MPI_IN_PLACE, out, c, MPI_FLOAT, MPI_SUM, comm_, &rq));
        thread_->complete(rq);
      } else if (overlaps(in, in_bytes, out, out_bytes)) {  // e.g. out = own shard of in
        std::vector<float> tmp(n);
        ZT_CHECK_MPI(
            MPI_Ireduce_scatter_block(in, tmp.data(), c, MPI_FLOAT, MPI_SUM, comm_, &rq));
        thread_->complete(rq);
        std::memcpy(out, tmp.data(), out_bytes);
      } else {
        ZT_CHECK_MPI(MPI_Ireduce_scatter_block(in, out, c, MPI_FLOAT, MPI_SUM, comm_, &rq));
        thread_->complete(rq);
      }
    });
  }

  CommRequest all_gather(const void* in, void* out, size_t n, DType t) override {
    require_int_count("all_gather", n);
    count(CollKind::kAllGather, static_cast<int64_t>(n) * world_, dtype_size(t));
    // Moved as opaque elements of the dtype's size (no arithmetic).
    MPI_Datatype dt = dtype_size(t) == 4 ? MPI_FLOAT : MPI_UINT16_T;
    return issue("all_gather", n * world_ * dtype_size(t),
                 [this, in, out, n, dt, esize = dtype_size(t)] {
                   const int c = static_cast<int>(n);
                   const size_t in_bytes = n * esize, out_bytes = in_bytes * world_;
                   char* own = static_cast<char*>(out) + static_cast<size_t>(rank_) * in_bytes;
                   MPI_Request rq;
                   if (in == own) {  // shard already in place in the full buffer
                     ZT_CHECK_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, dt, out, c, dt, comm_, &rq));
                   } else if (overlaps(in, in_bytes, out, out_bytes)) {
                     std::memmove(own, in, in_bytes);
                     ZT_CHECK_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, dt, out, c, dt, comm_, &rq));
                   } else {
                     ZT_CHECK_MPI(MPI_Iallgather(in, c, dt, out, c, dt, comm_, &rq));
                   }
                   thread_->complete(rq);
                 });
  }

  CommRequest all_gather_bytes(const void* in, void* out, size_t bytes,
                               int64_t elements) override {
    require_int_count("all_gather_bytes", bytes);
    count_bytes(CollKind::kAllGather, elements * world_, static_cast<int64_t>(bytes) * world_);
    return issue("all_gather", bytes * world_, [this, in, out, bytes] {
      const int c = static_cast<int>(bytes);
      MPI_Request rq;
      ZT_CHECK_MPI(MPI_Iallgather(in, c, MPI_BYTE, out, c, MPI_BYTE, comm_, &rq));
      thread_->complete(rq);
    });
  }

  CommRequest all_to_all_bytes(const void* in, void* out, size_t bytes,
                               int64_t elements) override {
    require_int_count("all_to_all_bytes", bytes);
    count_bytes(CollKind::kAllToAll, elements * world_, static_cast<int64_t>(bytes) * world_);
    return issue("all_to_all", bytes * world_, [this, in, out, bytes] {
      const int c = static_cast<int>(bytes);
      MPI_Request rq;
      ZT_CHECK_MPI(MPI_Ialltoall(in, c, MPI_BYTE, out, c, MPI_BYTE, comm_, &rq));
      thread_->complete(rq);
    });
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (root < 0 || root >= world_)
      ZT_MPI_FAIL(absl::StrCat("broadcast root ", root, " outside world of ", world_));
    count(CollKind::kBroadcast, static_cast<int64_t>(bytes), 1);
    issue("broadcast", bytes, [this, buf, bytes, root] {
      auto* p = static_cast<char*>(buf);
      for (size_t off = 0; off < bytes;) {
        const int c = static_cast<int>(std::min<size_t>(bytes - off, size_t{1} << 30));
        MPI_Request rq;
        ZT_CHECK_MPI(MPI_Ibcast(p + off, c, MPI_BYTE, root, comm_, &rq));
        thread_->complete(rq);
        off += static_cast<size_t>(c);
      }
    }).wait();
  }

  void barrier() override {
    issue("barrier", 0, [this] {
      MPI_Request rq;
      ZT_CHECK_MPI(MPI_Ibarrier(comm_, &rq));
      thread_->complete(rq);
    }).wait();
  }

  void all_reduce_scalars(double* v, int k, ScalarOp op) override {
    count(CollKind::kScalar, k, sizeof(double));
    MPI_Op mop = op == ScalarOp::kSum ? MPI_SUM : op == ScalarOp::kMax ? MPI_MAX : MPI_MIN;
    issue("all_reduce (scalars)", k * sizeof(double), [this, v, k, mop] {
      MPI_Request rq;
      ZT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, v, k, MPI_DOUBLE, mop, comm_, &rq));
      thread_->complete(rq);
    }).wait();
  }

 private:
  static void require_f32(const char* what, DType t) {
    if (t != DType::kF32) {
      ZT_MPI_FAIL(absl::StrCat("MPI ", what, " sums fp32 only (got ", std::string(dtype_name(t)),
                               "); MPI has no bf16/fp16 sum, so reduce in fp32"));
    }
  }
  static void require_int_count(const char* what, size_t n) {
    if (n > static_cast<size_t>(INT_MAX))
      ZT_MPI_FAIL(absl::StrCat("MPI ", what, " of ", n, " elements per rank exceeds INT_MAX"));
  }

  // Queues `op` for the communication thread; the request waits until it has run. `name` and
  // `bytes` (the buffer the collective spans) label its span in a trace (common/trace.h) and its
  // line in the comms_logger.
  CommRequest issue(const char* name, size_t bytes, std::function<void()> op) {
    return thread_->issue([this, name, bytes, seq = ++issued_, op = std::move(op)] {
      thread_->set_current(name, seq, world_);
      TraceSpan span(Track::kCommunication, name, -1, (int64_t)bytes);
      Timer t;
      op();
      if (CommLogger* log = logger())
        log->record(name, (int64_t)bytes, t.ms(), world_, spans_nodes_);
    });
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::shared_ptr<CommThread> thread_;
  uint64_t issued_ = 0;  // collectives issued on this communicator (the issuing thread's)
  int rank_ = 0, world_ = 1, node_ = 0, local_rank_ = 0, local_size_ = 1;
};

}  // namespace

int rank_for_messages() {
  int r = g_world_rank.load();
  if (r >= 0) return r;
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 0;
}

void mpi_fatal(int rc, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) std::snprintf(msg, sizeof msg, "code %d", rc);
  fail_at(file, line, absl::StrCat("MPI call failed: ", call, ": ", msg));
}

bool launched_under_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (MPI_Get_library_version(text, &n) != MPI_SUCCESS) return "unknown";
  const std::string v(text, strnlen(text, std::min<size_t>(n, sizeof text)));
  return v.substr(0, v.find('\n'));
}

bool mpi_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

absl::StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::init(int* argc, char*** argv) {
  int provided = 0;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&provided);
  } else if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return absl::UnavailableError(
        "MPI_Init_thread failed; check the MPI installation and launcher");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    if (!initialized) MPI_Finalize();
    return absl::FailedPreconditionError(absl::StrCat(
        "the MPI library provides thread level ", provided,
        " but zerotrain needs MPI_THREAD_SERIALIZED (its communication thread calls MPI); use an "
        "MPI built with thread support"));
  }
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  g_world_rank.store(r);
  return std::unique_ptr<MpiRuntime>(new MpiRuntime(!initialized));
}

MpiRuntime::~MpiRuntime() {
  if (owns_ && mpi_active()) MPI_Finalize();
}

absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(int ranks_per_node) {
  if (!mpi_active()) {
    return absl::FailedPreconditionError(
        "MPI is not initialised: create MpiRuntime in main before the MPI communicator");
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(
        "MPI was initialised below MPI_THREAD_SERIALIZED; the MPI communicator's thread needs it");
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(ranks_per_node));
}

absl::StatusOr<std::unique_ptr<Communicator>> make_host_communicator() {
  if (mpi_active()) return make_mpi_communicator();
  return make_single_process_communicator();
}

void abort_all_ranks(int exit_code, const std::string& message) {
  std::fprintf(stderr, "error: [rank %d] %s\n", rank_for_messages(), message.c_str());
  std::fflush(stderr);
  run_cleanups();  // no destructor runs past MPI_Abort: swap files go now
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace zt

// Communicator helpers shared by every implementation, and the single-process communicator.
#include "zero/comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "model/backend.h"
#include "zero/mpi_comm.h"

namespace zt {

const char* coll_kind_name(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce: return "all_reduce";
    case CollKind::kReduceScatter: return "reduce_scatter";
    case CollKind::kAllGather: return "all_gather";
    case CollKind::kAllToAll: return "all_to_all";
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kScalar: return "scalar";
    case CollKind::kCount: break;
  }
  return "unknown";
}

void wait_watched(const std::function<bool()>& done, const WaitLimits& limits,
                  const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  // MPI and NCCL do not say which ranks have not joined a collective: how to find them instead.
  const std::string who =
      "not every rank has joined it, or it moves that slowly (MPI does not say which ranks are "
      "missing: a rank that is stopped, swapping or stuck in I/O or on its GPU prints no such "
      "line, or one with an earlier number)";
  double next_report = limits.report_interval_s;
  while (!done()) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited >= limits.timeout_s)
      abort_all_ranks(kUserErrorExitCode,
                      absl::StrFormat("collective %s timed out: waited %.0f s "
                                      "(zerotrain.collective_timeout); %s. Find why that rank "
                                      "stopped; raise zerotrain.collective_timeout only if a rank "
                                      "legitimately spends longer between collectives",
                                      what, waited, who));
    if (waited >= next_report) {
      std::fprintf(stderr,
                   "warning: [rank %d] waiting %.0f s in collective %s: %s; the job ends at %.0f "
                   "s (zerotrain.collective_timeout)\n",
                   rank_for_messages(), waited, what.c_str(), who.c_str(), limits.timeout_s);
      std::fflush(stderr);
      next_report += limits.report_interval_s;
    }
    if (waited > 1e-3)
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(waited / 16, 1e-3)));
  }
}

namespace {

// World size 1. Volume in the paper's convention with world_size = 1: all-reduce of n counts 2n,
// reduce-scatter / all-gather over the full buffer (n * 1 elements) count n.
class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(Backend* be) : be_(be) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }

  CommRequest all_reduce(void* /*buf*/, size_t n, DType t) override {
    count(CollKind::kAllReduce, 2 * static_cast<int64_t>(n), dtype_size(t));
    return {};
  }
  CommRequest reduce_scatter(const void* in, void* out, size_t n, DType t) override {
    count(CollKind::kReduceScatter, static_cast<int64_t>(n), dtype_size(t));
    move(out, in, n * dtype_size(t));
    return {};
  }
  CommRequest all_gather(const void* in, void* out, size_t n, DType t) override {
    count(CollKind::kAllGather, static_cast<int64_t>(n), dtype_size(t));
    move(out, in, n * dtype_size(t));
    return {};
  }
  CommRequest all_gather_bytes(const void* in, void* out, size_t bytes,
                               int64_t elements) override {
    count_bytes(CollKind::kAllGather, elements, (int64_t)bytes);
    move(out, in, bytes);
    return {};
  }
  CommRequest all_to_all_bytes(const void* in, void* out, size_t bytes,
                               int64_t elements) override {
    count_bytes(CollKind::kAllToAll, elements, (int64_t)bytes);
    move(out, in, bytes);
    return {};
  }
  std::unique_ptr<Communicator> split(int color, int /*key*/) override {
    ZT_CHECK(color >= 0);
    auto c = std::make_unique<SingleProcessCommunicator>(be_);
    c->join(*this);
    return c;
  }
  void broadcast(void* /*buf*/, size_t bytes, int root) override {
    ZT_CHECK(root == 0);
    count(CollKind::kBroadcast, static_cast<int64_t>(bytes), 1);
  }
  void barrier() override {}
  void all_reduce_scalars(double* /*v*/, int k, ScalarOp /*op*/) override {
    count(CollKind::kScalar, k, sizeof(double));
  }

 private:
  // in and out are the same buffer or disjoint ones (the engine's collectives never overlap
  // partly), so the device's copy serves.
  void move(void* out, const void* in, size_t bytes) {
    if (in == out || bytes == 0) return;
    if (be_)
      be_->copy(out, in, bytes);
    else
      std::memmove(out, in, bytes);
  }
  Backend* be_;
};

// 64-bit FNV-1a.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator(Backend* be) {
  return std::make_unique<SingleProcessCommunicator>(be);
}

absl::Status agree_on_all_ranks(Communicator& comm, const absl::Status& st,
                                const std::string& what) {
  double ok = st.ok() ? 1 : 0;
  comm.all_reduce_scalars(&ok, 1, ScalarOp::kMin);
  if (!st.ok()) return st;
  if (ok == 0)
    return absl::AbortedError(absl::StrCat("another rank failed ", what, "; see its message"));
  return absl::OkStatus();
}

absl::StatusOr<SharedMemory> map_node_shared(Communicator& comm, size_t bytes) {
  // Every rank sees the same answer: either all ranks share this node or none sees all.
  if (comm.local_size() != comm.world_size())
    return absl::FailedPreconditionError(absl::StrCat("the ", comm.world_size(),
                                                      " ranks are on more than one node (",
                                                      comm.local_size(), " on this one)"));
  absl::StatusOr<SharedMemory> mem =
      absl::AbortedError("rank 0 could not create the node-shared memory; see its message");
  char name[64] = {};
  if (comm.rank() == 0) {
    mem = SharedMemory::create(bytes);
    if (mem.ok()) std::snprintf(name, sizeof name, "%s", mem->name().c_str());
  }
  comm.broadcast(name, sizeof name, 0);
  if (comm.rank() != 0 && name[0]) mem = SharedMemory::open(name, bytes);
  const absl::Status agreed = agree_on_all_ranks(comm, mem.status(), "to map node-shared memory");
  if (mem.ok() && comm.rank() == 0) mem->unlink();  // every rank has mapped it
  if (!agreed.ok()) return agreed;
  return mem;
}

// Every rank contributes (hash as four 16-bit parts, length) to its own slot of a zeroed
// (world_size, 5) table of doubles; one scalar sum gives every rank the whole table (exact: each
// value < 2^53), so all ranks compare the same data and return the same verdict. One collective
// on every rank whatever the inputs, so it cannot hang.
absl::Status check_same_on_all_ranks(Communicator& comm, const std::string& label,
                                     const std::string& what) {
  constexpr int kFields = 5;
  const int world = comm.world_size();
  const uint64_t h = fnv1a(what);
  std::vector<double> table(static_cast<size_t>(world) * kFields, 0.0);
  double* mine = table.data() + static_cast<size_t>(comm.rank()) * kFields;
  for (int i = 0; i < 4; ++i) mine[i] = static_cast<double>((h >> (16 * i)) & 0xffffu);
  mine[4] = static_cast<double>(what.size());
  comm.all_reduce_scalars(table.data(), static_cast<int>(table.size()), ScalarOp::kSum);

  auto row_equal = [&](int a, int b) {
    for (int i = 0; i < kFields; ++i) {
      if (table[static_cast<size_t>(a) * kFields + i] !=
          table[static_cast<size_t>(b) * kFields + i])
        return false;
    }
    return true;
  };
  std::vector<int> differ;
  for (int r = 1; r < world; ++r) {
    if (!row_equal(0, r)) differ.push_back(r);
  }
  if (differ.empty()) return absl::OkStatus();

  std::string ranks;
  constexpr size_t kMaxListed = 16;
  for (size_t i = 0; i < differ.size() && i < kMaxListed; ++i) {
    absl::StrAppend(&ranks, i ? ", " : "", differ[i]);
  }
  if (differ.size() > kMaxListed) absl::StrAppend(&ranks, ", ... (", differ.size(), " in all)");
  return absl::InvalidArgumentError(
      absl::StrCat(label, " differs across ranks: rank(s) ", ranks, " of ", world,
                   " disagree with rank 0 (this rank is ", comm.rank(),
                   "); launch every rank with the same ", label));
}

}  // namespace zt

// NCCL communicator (see nccl_comm.h). Volume counted as in every communicator: all-reduce of
// n -> 2n, reduce-scatter / all-gather over the full buffer (n * world_size) -> n * world_size.
#include "zero/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zero/mpi_comm.h"

namespace zt {
namespace {

// Fail fast with file:line on every rank (abort_all_ranks ends the whole job).
#define ZT_CHECK_NCCL(call)                                                                       \
  do {                                                                                            \
    ncclResult_t zt_nccl_rc_ = (call);                                                            \
    if (zt_nccl_rc_ != ncclSuccess)                                                               \
      ::zt::abort_all_ranks(1, absl::StrCat("zerotrain NCCL error at ", __FILE__, ":", __LINE__,  \
                                            ": ", #call, ": ", ncclGetErrorString(zt_nccl_rc_))); \
  } while (0)
#define ZT_NCCL_CHECK_CUDA(call)                                                                  \
  do {                                                                                            \
    cudaError_t zt_cuda_rc_ = (call);                                                             \
    if (zt_cuda_rc_ != cudaSuccess)                                                               \
      ::zt::abort_all_ranks(1, absl::StrCat("zerotrain CUDA error at ", __FILE__, ":", __LINE__,  \
                                            ": ", #call, ": ", cudaGetErrorString(zt_cuda_rc_))); \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
  }
  return ncclFloat32;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute)
      : boot_(bootstrap), device_(device), compute_(compute) {
    ZT_NCCL_CHECK_CUDA(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (boot_.rank() == 0) ZT_CHECK_NCCL(ncclGetUniqueId(&id));
    boot_.broadcast(&id, sizeof id, 0);
    ZT_CHECK_NCCL(ncclCommInitRank(&comm_, boot_.world_size(), id, boot_.rank()));
    spans_nodes_ = boot_.spans_nodes();
    init_streams();
  }
  // A group split from `parent`: NCCL's split of its communicator, with the same split of the
  // bootstrap for the host scalars.
  NcclCommunicator(NcclCommunicator& parent, int color, int key)
      : own_boot_(parent.boot_.split(color, key)),
        boot_(*own_boot_),
        device_(parent.device_),
        compute_(parent.compute_) {
    join(parent);
    spans_nodes_ = boot_.spans_nodes();
    ZT_CHECK_NCCL(ncclCommSplit(parent.comm_, color, key, &comm_, nullptr));
    init_streams();
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return boot_.rank(); }
  int world_size() const override { return boot_.world_size(); }
  int local_rank() const override { return boot_.local_rank(); }
  int local_size() const override { return boot_.local_size(); }

  CommRequest all_reduce(void* buf, size_t n, DType t) override {
    count(CollKind::kAllReduce, 2 * static_cast<int64_t>(n), dtype_size(t));
    after_compute();
    ZT_CHECK_NCCL(ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, comm_, stream_));
    return completion();
  }
  CommRequest reduce_scatter(const void* in, void* out, size_t n, DType t) override {
    count(CollKind::kReduceScatter, static_cast<int64_t>(n) * world_size(), dtype_size(t));
    after_compute();
    ZT_CHECK_NCCL(ncclReduceScatter(in, out, n, nccl_type(t), ncclSum, comm_, stream_));
    return completion();
  }
  CommRequest all_gather(const void* in, void* out, size_t n, DType t) override {
    count(CollKind::kAllGather, static_cast<int64_t>(n) * world_size(), dtype_size(t));
    after_compute();
    ZT_CHECK_NCCL(ncclAllGather(in, out, n, nccl_type(t), comm_, stream_));
    return completion();
  }
  CommRequest all_gather_bytes(const void* in, void* out, size_t bytes,
                               int64_t elements) override {
    count_bytes(CollKind::kAllGather, elements * world_size(), (int64_t)bytes * world_size());
    after_compute();
    ZT_CHECK_NCCL(ncclAllGather(in, out, bytes, ncclUint8, comm_, stream_));
    return completion();
  }
  // One send and one receive per peer in a group (NCCL has no all-to-all collective).
  CommRequest all_to_all_bytes(const void* in, void* out, size_t bytes,
                               int64_t elements) override {
    count_bytes(CollKind::kAllToAll, elements * world_size(), (int64_t)bytes * world_size());
    after_compute();
    ZT_CHECK_NCCL(ncclGroupStart());
    for (int r = 0; r < world_size(); ++r) {
      ZT_CHECK_NCCL(ncclSend(static_cast<const char*>(in) + (size_t)r * bytes, bytes, ncclUint8,
                             r, comm_, stream_));
      ZT_CHECK_NCCL(ncclRecv(static_cast<char*>(out) + (size_t)r * bytes, bytes, ncclUint8, r,
                             comm_, stream_));
    }
    ZT_CHECK_NCCL(ncclGroupEnd());
    return completion();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<NcclCommunicator>(*this, color, key);
  }
  // buf is device memory here.
  void broadcast(void* buf, size_t bytes, int root) override {
    count(CollKind::kBroadcast, static_cast<int64_t>(bytes), 1);
    after_compute();
    ZT_CHECK_NCCL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_));
    ZT_NCCL_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }
  void barrier() override {
    ZT_NCCL_CHECK_CUDA(cudaStreamSynchronize(stream_));
    boot_.barrier();
  }
  // Host scalars: reduced over the bootstrap (MPI) communicator.
  void all_reduce_scalars(double* v, int k, ScalarOp op) override {
    count(CollKind::kScalar, k, sizeof(double));
    boot_.all_reduce_scalars(v, k, op);
  }

 private:
  void init_streams() {
    ZT_NCCL_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ZT_NCCL_CHECK_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  // The comm stream waits for everything issued so far on the compute stream.
  // (On the rank's GPU whichever host thread issues the collective: events and streams are a
  // device's.)
  void after_compute() {
    int current = -1;
    ZT_NCCL_CHECK_CUDA(cudaGetDevice(&current));
    if (current != device_) ZT_NCCL_CHECK_CUDA(cudaSetDevice(device_));
    ZT_NCCL_CHECK_CUDA(cudaEventRecord(ready_, compute_));
    ZT_NCCL_CHECK_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  // An event after the collective; the request's wait() blocks the host on it. The events are
  // reused: one created and destroyed per collective cost the host microseconds each, for a
  // hundred or more collectives a step. An event goes back to the pool when the last copy of
  // its request is gone, whoever holds it then (the pool outlives the communicator if need be).
  struct EventPool {
    std::mutex mu;
    std::vector<cudaEvent_t> spare;
    ~EventPool() {
      for (cudaEvent_t e : spare) cudaEventDestroy(e);
    }
  };
  CommRequest completion() {
    cudaEvent_t ev = nullptr;
    {
      std::lock_guard<std::mutex> lock(events_->mu);
      if (!events_->spare.empty()) {
        ev = events_->spare.back();
        events_->spare.pop_back();
      }
    }
    if (!ev) ZT_NCCL_CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    ZT_NCCL_CHECK_CUDA(cudaEventRecord(ev, stream_));
    auto owned = std::shared_ptr<CUevent_st>(ev, [pool = events_](cudaEvent_t e) {
      std::lock_guard<std::mutex> lock(pool->mu);
      pool->spare.push_back(e);
    });
    return CommRequest([owned] { ZT_NCCL_CHECK_CUDA(cudaEventSynchronize(owned.get())); });
  }

  std::unique_ptr<Communicator> own_boot_;  // a split group's bootstrap (else null)
  Communicator& boot_;
  int device_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::shared_ptr<EventPool> events_ = std::make_shared<EventPool>();
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::string nccl_report() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "linked, but ncclGetVersion failed";
  return absl::StrCat("NCCL ", v / 10000, ".", v % 10000 / 100, ".", v % 100);
}

absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                                     int device,
                                                                     void* compute_stream) {
  // Every rank learns whether all ranks have their device before any rank enters the NCCL
  // bootstrap, so a missing GPU is an error on all ranks instead of a hang.
  int n = 0;
  double ok = cudaGetDeviceCount(&n) == cudaSuccess && device >= 0 && device < n ? 1.0 : 0.0;
  double all_ok = ok;
  bootstrap.all_reduce_scalars(&all_ok, 1, ScalarOp::kMin);
  if (all_ok == 0.0) {
    if (ok != 0.0) {
      return absl::FailedPreconditionError(
          "another rank has no usable CUDA device; launch at most one rank per GPU on each node");
    }
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", bootstrap.rank(), ": CUDA device ", device, " not available (", n,
                     " visible); launch at most one rank per GPU on each node"));
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(bootstrap, device, static_cast<cudaStream_t>(compute_stream)));
}

}  // namespace zt

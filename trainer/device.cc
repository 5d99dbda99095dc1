// Backend and communicator choice for --device (see device.h).
#include "trainer/device.h"

#include <algorithm>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/cuda/cuda_backend.h"
#include "zero/nccl_comm.h"

namespace zt {

absl::StatusOr<Device> parse_device(std::string_view name) {
  if (name == "auto") return Device::kAuto;
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("--device '", std::string(name), "' is not one of auto, cpu, cuda"));
}

absl::StatusOr<std::unique_ptr<Backend>> make_backend(Device d, int local_rank, int local_size,
                                                      int threads, AttentionImpl attention) {
  const int gpus = d == Device::kCpu ? 0 : cuda_device_count();
  if (d == Device::kCpu || (d == Device::kAuto && gpus == 0)) {
    if (attention == AttentionImpl::kCudnn)
      return absl::FailedPreconditionError(
          "attention cudnn (--attention, zerotrain.attention) runs on the CUDA backend, and this "
          "run has the CPU's (no GPU visible, or --device cpu); use --attention auto or flash");
    return make_cpu_backend(threads);
  }
  if (gpus == 0)
    return absl::FailedPreconditionError(
        "--device cuda: no CUDA device is visible (check nvidia-smi, CUDA_VISIBLE_DEVICES and "
        "that this zerotrain was built with the CUDA toolkit); use --device cpu or auto");
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, make_cuda_backend(local_rank % gpus, attention));
  // The emulation's one device serves any number of ranks; a real GPU serves one rank (NCCL
  // refuses two ranks on one device).
  if (!be->host_addressable() && local_size > gpus)
    return absl::FailedPreconditionError(absl::StrCat(
        local_size, " ranks on this node but ", gpus,
        " GPU(s) visible: launch at most one rank per GPU (mpirun -np ", gpus, " per node)"));
  return be;
}

ThreadSplit split_threads(int cores, Device d, bool off_thread, int compute_flag,
                          int optimizer_key) {
  const bool cpu = d == Device::kCpu || (d == Device::kAuto && cuda_device_count() == 0);
  ThreadSplit s;
  const bool halve = cpu && off_thread;
  s.optimizer = optimizer_key > 0 ? optimizer_key : halve ? std::max(1, cores / 2) : cores;
  s.compute = compute_flag > 0 ? compute_flag : halve ? std::max(1, cores - s.optimizer) : cores;
  return s;
}

absl::StatusOr<std::unique_ptr<Communicator>> make_device_communicator(Communicator& host,
                                                                       Backend& be) {
  if (host.world_size() == 1) return make_single_process_communicator(&be);
  if (be.host_addressable()) return std::unique_ptr<Communicator>();
  return make_nccl_communicator(host, host.local_rank() % cuda_device_count(), be.stream_handle());
}

}  // namespace zt

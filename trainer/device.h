// `--device auto|cpu|cuda`: which backend runs the model, and the communicator for collectives
// on its memory (issue 8; docs/architecture.md "Backend", "Communicator"). One binary serves both:
// the CUDA backend and NCCL are linked in when the build found them, and asking for them otherwise
// is a clear error.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/backend.h"
#include "zero/comm.h"

namespace zt {

enum class Device { kAuto, kCpu, kCuda };

// "auto", "cpu" or "cuda"; else InvalidArgument naming the three.
absl::StatusOr<Device> parse_device(std::string_view name);

// The backend of a rank that is local_rank of local_size ranks on its node: the CPU backend
// with `threads` OpenMP threads (<= 0: OpenMP's default), or CUDA device local_rank (each rank
// binds its node-local GPU, as torchrun and DeepSpeed do). kAuto is CUDA when a GPU is visible.
// Errors (FailedPrecondition): cuda without a visible GPU or in a build without CUDA, or more
// ranks on the node than GPUs; kCudnn on the CPU backend, or where cuDNN cannot load.
absl::StatusOr<std::unique_ptr<Backend>> make_backend(
    Device d, int local_rank, int local_size, int threads,
    AttentionImpl attention = AttentionImpl::kAuto);

// A rank's threads (docs/offload.md "Threads"): `compute` runs the model's kernels (the
// training thread's OpenMP team), `optimizer` the offloaded optimizer's update off the training
// thread (the offload pipeline, the delayed update), set apart so that both can run at once.
struct ThreadSplit {
  int compute = 1, optimizer = 1;
};
// cores: this rank's share of the node's cores (>= 1); off_thread: an update will run off the
// training thread; compute_flag (--threads) and optimizer_key (zerotrain.optimizer_threads, or
// --optimizer_threads): > 0 as given, 0 chosen. Chosen: on a GPU the optimizer takes every core
// (the kernels need one thread to launch them); on the CPU backend, with an update off the
// thread, the cores are halved between the two (at least one each), else compute takes all.
ThreadSplit split_threads(int cores, Device d, bool off_thread, int compute_flag,
                          int optimizer_key);

// The communicator for collectives on `be`'s memory, given this process's host communicator
// (MPI, or single-process): single-process copying through `be` for one rank; null when the
// host communicator serves as it is (its buffers are host-addressable); NCCL bootstrapped over
// `host` for a GPU backend on several ranks, which `host` must outlive. Collective: every rank
// calls it. Errors: several ranks on a GPU in a build without NCCL; NCCL's own.
absl::StatusOr<std::unique_ptr<Communicator>> make_device_communicator(Communicator& host,
                                                                       Backend& be);

}  // namespace zt

// The NCCL communicator (docs/architecture.md "Communicator"): collectives on CUDA device buffers,
// built only when CUDA and NCCL are found (target zt_zero_nccl, which defines ZT_HAVE_NCCL).
// Bootstrap: rank 0 creates the NCCL unique id and broadcasts it over `bootstrap` (the MPI
// communicator); host-side operations (barrier, scalar reductions) also go to `bootstrap`.
// Collectives run on a dedicated CUDA stream that first waits for `compute_stream` (the
// backend's stream, as a cudaStream_t), so they see every kernel issued before the call.
// Non-blocking requests wait (host) on a CUDA event recorded after the collective.
// Sums in fp32, bf16 or fp16; all_gather and broadcast of any dtype. Same call order on every
// rank, from one thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "zero/comm.h"

namespace zt {

// `bootstrap` must outlive the returned communicator; `device` is the CUDA ordinal (usually
// bootstrap.local_rank()).
absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                                     int device,
                                                                     void* compute_stream);

// The NCCL linked in, for `zerotrain --version`: "NCCL 2.27.3" (ncclGetVersion), or "not built".
std::string nccl_report();

}  // namespace zt

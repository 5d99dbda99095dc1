// Asynchronous copies from global to shared memory (sm_80 and later; PTX ISA, "cp.async"), one
// spelling on the GPU and in the CUDA emulation: a thread issues 16-byte copies, commits them as
// a group, and later waits until all but its newest N groups have landed; then a __syncthreads
// makes every thread's copies visible to the block. The copies run while the thread computes,
// which is what double-buffered tiles are for (FlashAttention-2's K/V tiles).
//
// The emulation lands a copy only when its thread waits for it, and fills the destination with
// 0xFF bytes (NaN in bf16, fp16 and fp32) when it is issued: a read that did not wait sees NaN,
// and the race detector sees the issue as a write, so a copy issued into a buffer that another
// thread still reads is reported.
#pragma once

#include <cstdint>

#include "model/cuda/cuda_common.cuh"

namespace zt {

// 16 bytes from global `src` to shared `dst` (both 16-byte aligned), or 16 zero bytes when `in`
// is false (src-size 0: `src` is not read, but must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in) {
#ifdef ZT_CUDA_EMU
  emu::AsyncCopies& q = emu::async_copies();
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
    emu::kernel_fault("cp.async of 16 bytes from or to an address that is not 16-byte aligned");
  if (emu::is_device_pointer(dst))
    emu::kernel_fault("cp.async into device memory: its destination must be shared memory");
  if (q.count == emu::AsyncCopies::kMax)
    emu::kernel_fault(
        "a thread has more than 64 cp.async copies in flight (the emulation's "
        "limit): wait for some first");
  auto* d = static_cast<emu::Bytes16*>(dst);
  *d = emu::Bytes16{{~0u, ~0u, ~0u, ~0u}};
  q.pending[q.count++] = {d, in ? static_cast<const emu::Bytes16*>(src) : nullptr, q.committed};
#else
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
               "r"(in ? 16 : 0));
#endif
}

// Closes the thread's copies issued since the last commit into one group (possibly empty).
__device__ __forceinline__ void cp_async_commit() {
#ifdef ZT_CUDA_EMU
  ++emu::async_copies().committed;
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most the thread's newest N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef ZT_CUDA_EMU
  emu::AsyncCopies& q = emu::async_copies();
  int kept = 0;
  for (int i = 0; i < q.count; ++i) {
    const emu::AsyncCopy c = q.pending[i];
    if (c.group + N < q.committed) {
      *c.dst = c.src ? *c.src : emu::Bytes16{};
    } else {
      q.pending[kept++] = c;
    }
  }
  q.count = kept;
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace zt

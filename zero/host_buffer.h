// Host memory for offloaded state: page-locked when asked, through the backend that copies
// from and to it (Backend::pin_host: cudaHostRegister on a GPU, so its copies run by DMA on the
// copy stream; mlock on the CPU backend), accounted by category in a host MemoryTracker, freed
// by RAII. When the OS refuses to lock (RLIMIT_MEMLOCK, `ulimit -l`), the memory stays
// pageable, pinned() is false, and one warning per process says how much was asked and how to
// allow it (DeepSpeed's pin_memory falls back the same way, silently).
#pragma once

#include <cstddef>

#include "common/memory.h"
#include "model/backend.h"

namespace zt {

class HostBuffer {
 public:
  HostBuffer() = default;
  // bytes (>= 0) of `align`-aligned host memory (a power of two >= 64; 4096 for O_DIRECT),
  // pageable when pin_with is null, else pinned by it in whole pages of its own (so no two
  // buffers register one page); throws std::bad_alloc when there is none.
  HostBuffer(size_t bytes, MemCategory c, MemoryTracker* tracker, Backend* pin_with,
             size_t align = 64);
  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& o) noexcept { *this = static_cast<HostBuffer&&>(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void reset();

  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  char* data_bytes() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_by_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::kPinnedHost;
  MemoryTracker* tracker_ = nullptr;
  size_t alloc_bytes_ = 0;  // what alloc_streaming was asked for (whole pages when pinned)
  Backend* pinned_by_ = nullptr;
};

}  // namespace zt

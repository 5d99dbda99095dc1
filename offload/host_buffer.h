// Host memory for offloaded state: page-locked when asked (mlock on the CPU backend; the CUDA
// backend will register the same pages for DMA), accounted by category in a host
// MemoryTracker, freed by RAII. When the OS refuses to lock (RLIMIT_MEMLOCK, `ulimit -l`), the
// memory stays pageable, pinned() is false, and one warning per process says how much was
// asked and how to allow it (DeepSpeed's pin_memory falls back the same way, silently).
#pragma once

#include <cstddef>

#include "common/memory.h"

namespace zt {

class HostBuffer {
 public:
  HostBuffer() = default;
  // bytes (>= 0) of `align`-aligned host memory (a power of two >= 64; 4096 for O_DIRECT);
  // throws std::bad_alloc when there is none.
  HostBuffer(size_t bytes, MemCategory c, MemoryTracker* tracker, bool pin, size_t align = 64);
  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& o) noexcept { *this = static_cast<HostBuffer&&>(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void reset();

  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::kPinnedHost;
  MemoryTracker* tracker_ = nullptr;
  bool pinned_ = false;
};

}  // namespace zt

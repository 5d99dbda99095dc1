#include "offload/host_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace zt {

HostBuffer::HostBuffer(size_t bytes, MemCategory c, MemoryTracker* tracker, bool pin, size_t align)
    : bytes_(bytes), cat_(c), tracker_(tracker) {
  if (bytes == 0) return;
  ptr_ = alloc_streaming(bytes, std::max<size_t>(align, 64));
  if (!ptr_) throw std::bad_alloc();
  std::memset(ptr_, 0, bytes);  // first touch now, not on the step's path
  if (pin) {
    pinned_ = mlock(ptr_, bytes) == 0;
    static std::atomic<bool> warned{false};
    if (!pinned_ && !warned.exchange(true))
      std::fprintf(stderr,
                   "warning: could not page-lock %zu bytes of offload memory (%s); it stays "
                   "pageable. Raise the limit (ulimit -l, or memlock in "
                   "/etc/security/limits.conf) or set pin_memory false to silence this\n",
                   bytes, std::strerror(errno));
  }
  if (tracker_) tracker_->on_alloc(cat_, bytes_);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_, bytes_ = o.bytes_, cat_ = o.cat_, tracker_ = o.tracker_, pinned_ = o.pinned_;
    o.ptr_ = nullptr, o.bytes_ = 0, o.pinned_ = false;
  }
  return *this;
}

void HostBuffer::reset() {
  if (!ptr_) return;
  if (pinned_) munlock(ptr_, bytes_);
  std::free(ptr_);
  if (tracker_) tracker_->on_free(cat_, bytes_);
  ptr_ = nullptr, bytes_ = 0, pinned_ = false;
}

}  // namespace zt

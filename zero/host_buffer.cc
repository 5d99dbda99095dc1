#include "zero/host_buffer.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace zt {

HostBuffer::HostBuffer(size_t bytes, MemCategory c, MemoryTracker* tracker, Backend* pin_with,
                       size_t align)
    : bytes_(bytes), cat_(c), tracker_(tracker) {
  if (bytes == 0) return;
  constexpr size_t kPage = 4096;
  // Pinned: whole pages, since cudaHostRegister refuses a page registered twice.
  alloc_bytes_ = pin_with ? (bytes + kPage - 1) / kPage * kPage : bytes;
  ptr_ = alloc_streaming(alloc_bytes_, std::max<size_t>(align, pin_with ? kPage : 64));
  if (!ptr_) throw std::bad_alloc();
  std::memset(ptr_, 0, bytes);  // first touch now, not on the step's path
  // Locking from a staggered start (common/memory.h) splits the block's first huge page into
  // 4 KiB pages: one page per buffer, kept for the alignment O_DIRECT and pinning need.
  if (pin_with) {
    if (pin_with->pin_host(ptr_, alloc_bytes_)) pinned_by_ = pin_with;
    static std::atomic<bool> warned{false};
    if (!pinned_by_ && !warned.exchange(true))
      std::fprintf(stderr,
                   "warning: could not page-lock %zu bytes of offload memory (%s); it stays "
                   "pageable. Raise the memlock limit (ulimit -l, or memlock in "
                   "/etc/security/limits.conf; a GPU driver may refuse for its own reasons) or "
                   "set pin_memory false to silence this\n",
                   bytes, std::strerror(errno));
  }
  if (tracker_) tracker_->on_alloc(cat_, bytes_);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_, bytes_ = o.bytes_, cat_ = o.cat_, tracker_ = o.tracker_;
    pinned_by_ = o.pinned_by_, alloc_bytes_ = o.alloc_bytes_;
    o.ptr_ = nullptr, o.bytes_ = 0, o.pinned_by_ = nullptr, o.alloc_bytes_ = 0;
  }
  return *this;
}

void HostBuffer::reset() {
  if (!ptr_) return;
  if (pinned_by_) pinned_by_->unpin_host(ptr_, alloc_bytes_);
  free_streaming(ptr_, alloc_bytes_);
  if (tracker_) tracker_->on_free(cat_, bytes_);
  ptr_ = nullptr, bytes_ = 0, pinned_by_ = nullptr, alloc_bytes_ = 0;
}

}  // namespace zt

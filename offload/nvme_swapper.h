// The NVMe swapper (ZeRO-Infinity, Rajbhandari et al. SC21, Section 6; DeepSpeed's
// AsyncIOHandle): tensors in files on a fast drive, read and written with io_uring (liburing)
// and O_DIRECT in block_size requests, queue_depth of them in flight (DeepSpeed's "aio" keys).
// Files are created in a private directory under nvme_path (mode 0700, files 0600) and
// unlinked as soon as they are open, so no way the process ends leaves their data behind; the
// empty directory goes with the swapper, or through common/cleanup.h on SIGTERM / SIGINT /
// SIGHUP or a multi-rank abort; a directory left by SIGKILL is removed by the next swapper on
// the same nvme_path (each swapper holds a flock on its own). A file system without O_DIRECT
// falls back to buffered I/O with one warning; where io_uring cannot be had (the memlock limit,
// a seccomp filter, an old kernel, or ZEROTRAIN_NO_IO_URING set), transfers use pread/pwrite
// threads, with one warning naming the cause.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zt {

// ds_config "aio" (DeepSpeed's defaults).
struct AioOptions {
  int64_t block_size = 1'048'576;  // bytes per request
  int64_t queue_depth = 8;         // requests in flight
  bool single_submit = false;      // submit each request on its own (else all queued at once)
};

class NvmeSwapper {
 public:
  // Buffers and offsets given to read/write must be multiples of this (O_DIRECT's rule).
  static constexpr size_t kAlign = 4096;

  // Creates the private directory under nvme_path (first removing stale ones of ended runs).
  // Errors: the path is missing, not a directory, or not writable (naming it and what to do).
  static absl::StatusOr<std::unique_ptr<NvmeSwapper>> open(const std::string& nvme_path,
                                                           const AioOptions& aio);
  ~NvmeSwapper();  // removes every file and the directory
  NvmeSwapper(const NvmeSwapper&) = delete;
  NvmeSwapper& operator=(const NvmeSwapper&) = delete;

  // A new file of `bytes` (rounded up to kAlign); returns its handle. Call before any read or
  // write (the I/O thread indexes the files without a lock).
  absl::StatusOr<int> create(size_t bytes);
  // bytes from/to [offset, offset + bytes) of file h. buf, offset and bytes: multiples of
  // kAlign (bytes may end at the file's rounded end). Errors carry the OS error (ENOSPC: the
  // drive is full) and the file.
  absl::Status write(int h, const void* buf, size_t bytes, size_t offset);
  absl::Status read(int h, void* buf, size_t bytes, size_t offset);
  // The same, started now and finished by the swapper's I/O thread in the order issued; the
  // future holds the result. buf must stay untouched until then.
  std::future<absl::Status> write_async(int h, const void* buf, size_t bytes, size_t offset);
  std::future<absl::Status> read_async(int h, void* buf, size_t bytes, size_t offset);

  // Lets transfers that lie inside [buf, buf + bytes) use io_uring fixed buffers (fio's
  // fixedbufs): the kernel pins those pages once, here, instead of at every request. Best
  // effort: where the kernel refuses (registered pages count against RLIMIT_MEMLOCK) or the
  // table is full, transfers go on as before. For windows reused by many transfers; the memory
  // must outlive the swapper. Ordered with the transfers (it runs on the I/O thread).
  void register_buffer(void* buf, size_t bytes);
  int64_t registered_bytes() const { return registered_; }

  const std::string& directory() const { return dir_; }
  bool direct_io() const { return direct_; }
  bool uses_io_uring() const { return ring_ != nullptr; }  // false: pread/pwrite threads
  int64_t bytes_written() const { return written_; }
  int64_t bytes_read() const { return read_; }
  // io_uring_submit calls that handed the kernel requests: one per request with
  // aio.single_submit, one per batch of up to queue_depth otherwise (0 without io_uring).
  int64_t submissions() const { return submissions_; }

 private:
  NvmeSwapper() = default;
  absl::Status transfer(int h, void* buf, size_t bytes, size_t offset, bool write);
  absl::Status transfer_threads(int h, void* buf, size_t bytes, size_t offset, bool write);
  std::future<absl::Status> enqueue(int h, void* buf, size_t bytes, size_t offset, bool write);

  struct Ring;
  std::unique_ptr<Ring> ring_;
  // The I/O thread: the only user of the ring, running queued transfers in order.
  struct Worker;
  std::unique_ptr<Worker> worker_;
  AioOptions aio_;
  std::string dir_;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
  bool direct_ = true;
  int dir_fd_ = -1;        // holds the directory's flock (stale-directory removal)
  int cleanup_slot_ = -1;  // common/cleanup.h: removal on SIGTERM or a multi-rank abort
  std::atomic<int64_t> written_{0}, read_{0};  // updated by the I/O thread
  std::atomic<int64_t> submissions_{0};
  // io_uring's tables, touched only by the I/O thread: a file's slot (-1: use its descriptor;
  // the table is registered sparse at open) and the registered buffer ranges.
  struct Fixed {
    char* begin;
    size_t bytes;
  };
  std::vector<int> fixed_file_;
  std::vector<Fixed> fixed_buf_;
  bool files_table_ = false, buffers_table_ = false;
  std::atomic<int64_t> registered_{0};
};

}  // namespace zt

#include "offload/nvme_swapper.h"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cleanup.h"
#include "common/fault.h"

namespace zt {
namespace {
constexpr unsigned kMaxFixed = 256;                 // slots in each io_uring table
constexpr size_t kMaxFixedBytes = size_t{1} << 30;  // the kernel's limit per fixed buffer
constexpr char kSwapPrefix[] = "zerotrain_swap_";
constexpr int kMaxFallbackThreads = 8;  // pread/pwrite threads per transfer without io_uring

// Why io_uring_queue_init failed (-rc), and what to do about it.
std::string io_uring_cause(int rc, int64_t queue_depth) {
  if (rc == ENOMEM) {
    // The submission entries (64 bytes each) and the rings (16-byte completions, twice as
    // many, and the index arrays) in whole pages.
    const int64_t page = ::sysconf(_SC_PAGESIZE);
    const int64_t need = (queue_depth * 64 + page - 1) / page * page +
                         (queue_depth * 36 + 320 + page - 1) / page * page;
    rlimit lim{};
    ::getrlimit(RLIMIT_MEMLOCK, &lim);
    if (lim.rlim_cur != RLIM_INFINITY && (int64_t)lim.rlim_cur < need)
      return absl::StrCat("the locked-memory limit RLIMIT_MEMLOCK is ", lim.rlim_cur / 1024,
                          " KiB (ulimit -l), and a ring of queue_depth ", queue_depth,
                          " locks about ", need / 1024,
                          " KiB; raise it (ulimit -l unlimited; memlock in "
                          "/etc/security/limits.conf; docker run --ulimit memlock=-1)");
    return absl::StrCat("the kernel could not allocate a ring of queue_depth ", queue_depth,
                        " (out of memory, or the cgroup's memory limit)");
  }
  if (rc == EPERM)
    return "io_uring is not permitted for this process (sysctl kernel.io_uring_disabled, or a "
           "container's seccomp profile); allow it for the fastest NVMe offload";
  if (rc == ENOSYS)
    return "this kernel has no io_uring (Linux 5.1+ has it) or a seccomp filter (a container's "
           "default profile) blocks it";
  return std::strerror(rc);
}

// Removes the empty swap directories of runs that ended without removing theirs (SIGKILL, a
// node failure): a directory whose lock no live swapper holds and that is not brand new (a
// swapper locks its directory right after creating it).
void remove_stale_swap_dirs(const std::string& nvme_path) {
  DIR* d = ::opendir(nvme_path.c_str());
  if (!d) return;
  const std::time_t now = std::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, kSwapPrefix, std::strlen(kSwapPrefix)) != 0) continue;
    const std::string path = nvme_path + "/" + e->d_name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || now - st.st_mtime < 10) continue;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::rmdir(path.c_str());  // fails unless empty
    ::close(fd);
  }
  ::closedir(d);
}
}  // namespace

struct NvmeSwapper::Ring {
  io_uring ring;
};

struct NvmeSwapper::Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::packaged_task<absl::Status()>> jobs;
  bool stop = false;
  std::thread thread;

  explicit Worker() {
    thread = std::thread([this] {
      for (;;) {
        std::packaged_task<absl::Status()> job;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [this] { return stop || !jobs.empty(); });
          if (jobs.empty()) return;  // stopping, and every job done
          job = std::move(jobs.front());
          jobs.pop_front();
        }
        job();
      }
    });
  }
  // Queues job behind the others; its result arrives in the future.
  std::future<absl::Status> submit(std::packaged_task<absl::Status()> job) {
    std::future<absl::Status> done = job.get_future();
    {
      std::lock_guard<std::mutex> lock(mu);
      jobs.push_back(std::move(job));
    }
    cv.notify_one();
    return done;
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_one();
    thread.join();
  }
};

absl::StatusOr<std::unique_ptr<NvmeSwapper>> NvmeSwapper::open(const std::string& nvme_path,
                                                               const AioOptions& aio) {
  struct stat st;
  if (nvme_path.empty() || ::stat(nvme_path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::NotFoundError(absl::StrCat(
        "nvme_path '", nvme_path,
        "' is not an existing directory; create it on the NVMe drive or fix the path"));
  remove_stale_swap_dirs(nvme_path);
  std::unique_ptr<NvmeSwapper> s(new NvmeSwapper());
  // The private directory, locked while the swapper lives (the kernel drops the lock however
  // the process ends), so a later run removes it only when no one holds it. Another run's
  // remover may take the lock between mkdtemp and flock (a stalled process, a skewed clock on a
  // network file system): a directory found removed once locked is made again.
  for (int attempt = 0; s->dir_fd_ < 0; ++attempt) {
    std::string templ = nvme_path + "/" + kSwapPrefix + "XXXXXX";
    if (!::mkdtemp(templ.data()))  // mode 0700
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create a swap directory in nvme_path '", nvme_path,
                       "': ", std::strerror(errno), "; give a directory this user can write"));
    const int fd = ::open(templ.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat held;
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &held) == 0 &&
        held.st_nlink > 0) {
      s->dir_ = templ;
      s->dir_fd_ = fd;
    } else {
      if (fd >= 0) ::close(fd);
      ::rmdir(templ.c_str());  // ours, if still there
      if (attempt == 3)
        return absl::InternalError(
            absl::StrCat("cannot hold a swap directory in nvme_path '", nvme_path,
                         "': another process keeps removing it; give this run its own nvme_path"));
    }
  }
  s->cleanup_slot_ = register_cleanup_dir(s->dir_.c_str());  // SIGTERM, aborts
  s->aio_ = aio;
  // Requests of 4 KiB to 1 GiB (io_uring lengths are 32-bit), at most 4096 in flight.
  s->aio_.block_size =
      std::clamp<int64_t>(aio.block_size / kAlign * kAlign, kAlign, int64_t{1} << 30);
  s->aio_.queue_depth = std::clamp<int64_t>(aio.queue_depth, 1, 4096);
  s->ring_ = std::make_unique<Ring>();
  const bool refused = std::getenv("ZEROTRAIN_NO_IO_URING") != nullptr;
  const int rc =
      refused ? -EPERM : io_uring_queue_init((unsigned)s->aio_.queue_depth, &s->ring_->ring, 0);
  if (rc < 0) {  // pread/pwrite threads instead, with one warning per cause
    s->ring_.reset();
    const std::string cause =
        refused ? "ZEROTRAIN_NO_IO_URING is set" : io_uring_cause(-rc, s->aio_.queue_depth);
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(cause).second)
      std::fprintf(stderr,
                   "warning: NVMe offload cannot use io_uring: %s. It falls back to pread/pwrite "
                   "on up to %d threads (slower)\n",
                   cause.c_str(), (int)std::min<int64_t>(s->aio_.queue_depth, kMaxFallbackThreads));
  } else {
    // Sparse tables (Linux 5.19+) filled as files and windows come; without them every request
    // names its descriptor and buffer, as before.
    s->files_table_ = io_uring_register_files_sparse(&s->ring_->ring, kMaxFixed) == 0;
    s->buffers_table_ = io_uring_register_buffers_sparse(&s->ring_->ring, kMaxFixed) == 0;
  }
  s->worker_ = std::make_unique<Worker>();
  return s;
}

NvmeSwapper::~NvmeSwapper() {
  worker_.reset();  // finishes what was queued: the kernel may still write into the buffers
  if (ring_) io_uring_queue_exit(&ring_->ring);
  for (int fd : fds_) ::close(fd);  // the files were unlinked at creation
  if (!dir_.empty()) ::rmdir(dir_.c_str());
  if (dir_fd_ >= 0) ::close(dir_fd_);
  unregister_cleanup_dir(cleanup_slot_);
}

absl::StatusOr<int> NvmeSwapper::create(size_t bytes) {
  const std::string path = absl::StrCat(dir_, "/t", fds_.size());
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | (direct_ ? O_DIRECT : 0), 0600);
  if (fd < 0 && direct_ && errno == EINVAL) {  // no O_DIRECT on this file system
    ::unlink(path.c_str());                    // the failed open may have created it
    direct_ = false;
    // One warning per nvme_path, however many swappers (optimizer, parameters) use it.
    static std::mutex mu;
    static std::set<std::string> warned;
    const std::string parent = dir_.substr(0, dir_.rfind('/'));
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(parent).second)
      std::fprintf(stderr,
                   "warning: %s does not support O_DIRECT; NVMe offload uses buffered I/O (the "
                   "page cache) there, which is slower and uses host memory\n",
                   parent.c_str());
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create swap file ", path, ": ", std::strerror(errno)));
  // Unlinked at once: the data lives as long as the descriptor, so no way the process ends
  // (even SIGKILL) leaves a swap file behind; only the empty directory needs removing.
  ::unlink(path.c_str());
  fds_.push_back(fd);
  paths_.push_back(path);
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  // Reserve the space now, so a drive too small fails here, before training, and not in the
  // middle of a swap (copy-on-write file systems can still run out later: that error is
  // reported with the file). File systems without fallocate just get the size.
  const int rc = rounded > 0 ? ::posix_fallocate(fd, 0, (off_t)rounded) : 0;
  if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", rounded, " bytes for swap file ", path, " (",
                     std::strerror(rc), "); free space on nvme_path or offload less"));
  if (rc != 0 && ::ftruncate(fd, (off_t)rounded) != 0)
    return absl::ResourceExhaustedError(absl::StrCat("cannot size swap file ", path, " to ",
                                                     rounded, " bytes: ", std::strerror(errno)));
  return (int)fds_.size() - 1;
}

absl::Status NvmeSwapper::write(int h, const void* buf, size_t bytes, size_t offset) {
  return write_async(h, buf, bytes, offset).get();
}
absl::Status NvmeSwapper::read(int h, void* buf, size_t bytes, size_t offset) {
  return read_async(h, buf, bytes, offset).get();
}
std::future<absl::Status> NvmeSwapper::write_async(int h, const void* buf, size_t bytes,
                                                   size_t offset) {
  return enqueue(h, const_cast<void*>(buf), bytes, offset, true);
}
std::future<absl::Status> NvmeSwapper::read_async(int h, void* buf, size_t bytes, size_t offset) {
  return enqueue(h, buf, bytes, offset, false);
}

void NvmeSwapper::register_buffer(void* buf, size_t bytes) {
  worker_->submit(std::packaged_task<absl::Status()>([=, this] {
    char* p = static_cast<char*>(buf);
    for (size_t at = 0; buffers_table_ && at < bytes && fixed_buf_.size() < kMaxFixed;) {
      const size_t len = std::min(kMaxFixedBytes, bytes - at);
      iovec iov{p + at, len};
      const unsigned slot = (unsigned)fixed_buf_.size();
      if (io_uring_register_buffers_update_tag(&ring_->ring, slot, &iov, nullptr, 1) != 1)
        break;  // refused (memlock limit): plain requests for the rest
      fixed_buf_.push_back({p + at, len});
      registered_ += (int64_t)len;
      at += len;
    }
    return absl::OkStatus();
  }));
}

std::future<absl::Status> NvmeSwapper::enqueue(int h, void* buf, size_t bytes, size_t offset,
                                               bool write) {
  return worker_->submit(std::packaged_task<absl::Status()>(
      [=, this] { return transfer(h, buf, bytes, offset, write); }));
}

// Splits [offset, offset + bytes) into block_size requests and keeps up to queue_depth in
// flight; a short transfer is resubmitted for its remainder.
absl::Status NvmeSwapper::transfer(int h, void* buf, size_t bytes, size_t offset, bool write) {
  if (h < 0 || h >= (int)fds_.size()) return absl::InvalidArgumentError("bad swap handle");
  if (reinterpret_cast<uintptr_t>(buf) % kAlign || offset % kAlign)
    return absl::InvalidArgumentError("swap buffers and offsets must be 4096-byte aligned");
  if (write) fault_point("swap.write");  // between two writes of the optimizer state
  if (!ring_) return transfer_threads(h, buf, bytes, offset, write);
  io_uring* ring = &ring_->ring;
  if (files_table_ && fixed_file_.size() < fds_.size())  // newly created files: a slot each
    for (int f = (int)fixed_file_.size(); f < (int)fds_.size(); ++f)
      fixed_file_.push_back(
          f < (int)kMaxFixed && io_uring_register_files_update(ring, f, &fds_[f], 1) == 1 ? f : -1);
  const int file_slot = h < (int)fixed_file_.size() ? fixed_file_[h] : -1;
  // The registered buffer holding [p, p + len), or -1.
  auto buffer_slot = [&](const char* p, size_t len) {
    for (int i = 0; i < (int)fixed_buf_.size(); ++i)
      if (p >= fixed_buf_[i].begin && p + len <= fixed_buf_[i].begin + fixed_buf_[i].bytes)
        return i;
    return -1;
  };
  const size_t block = (size_t)aio_.block_size;
  size_t next = 0;  // bytes queued so far
  int in_flight = 0;
  struct Pending {
    size_t at, len;
  };
  std::vector<Pending> pending((size_t)aio_.queue_depth);
  std::vector<int> free_slots;
  for (int i = (int)aio_.queue_depth - 1; i >= 0; --i) free_slots.push_back(i);
  auto queue = [&](size_t at, size_t len) {
    const int slot = free_slots.back();
    free_slots.pop_back();
    pending[slot] = {at, len};
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    char* p = static_cast<char*>(buf) + at;
    const int fd = file_slot >= 0 ? file_slot : fds_[h];
    const int b = buffer_slot(p, len);
    if (b >= 0 && write)
      io_uring_prep_write_fixed(sqe, fd, p, (unsigned)len, offset + at, b);
    else if (b >= 0)
      io_uring_prep_read_fixed(sqe, fd, p, (unsigned)len, offset + at, b);
    else if (write)
      io_uring_prep_write(sqe, fd, p, (unsigned)len, offset + at);
    else
      io_uring_prep_read(sqe, fd, p, (unsigned)len, offset + at);
    if (file_slot >= 0) io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data64(sqe, (uint64_t)slot);
    ++in_flight;
    if (aio_.single_submit && io_uring_submit(ring) > 0) ++submissions_;
  };
  // Every request queued must complete before returning: the kernel writes into `buf`.
  auto wait_one = [&](io_uring_cqe** cqe) {
    int rc;
    do rc = io_uring_wait_cqe(ring, cqe);
    while (rc == -EINTR);
    return rc;
  };
  auto drain = [&] {
    io_uring_cqe* cqe = nullptr;
    while (in_flight > 0 && wait_one(&cqe) == 0) {
      io_uring_cqe_seen(ring, cqe);
      --in_flight;
    }
  };
  while (next < bytes || in_flight > 0) {
    while (next < bytes && !free_slots.empty()) {
      const size_t len = std::min(block, bytes - next);
      queue(next, len);
      next += len;
    }
    const int submitted = io_uring_submit(ring);
    if (submitted > 0) ++submissions_;
    if (submitted < 0 && submitted != -EAGAIN && submitted != -EBUSY && submitted != -EINTR) {
      drain();
      return absl::InternalError(absl::StrCat("io_uring submit: ", std::strerror(-submitted)));
    }
    io_uring_cqe* cqe = nullptr;
    const int rc = wait_one(&cqe);
    if (rc < 0) {
      drain();
      return absl::InternalError(absl::StrCat("io_uring wait: ", std::strerror(-rc)));
    }
    const int slot = (int)io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    --in_flight;
    free_slots.push_back(slot);
    const Pending p = pending[slot];
    if (res < 0) {
      drain();
      return absl::ResourceExhaustedError(absl::StrCat(
          write ? "writing" : "reading", " swap file ", paths_[h], " failed: ", std::strerror(-res),
          -res == ENOSPC ? "; the NVMe drive is full" : ""));
    }
    if (res == 0) {  // no progress: a read past the end, or a write the drive took none of
      drain();
      return absl::DataLossError(absl::StrCat(write ? "writing" : "reading", " swap file ",
                                              paths_[h], " made no progress"));
    }
    if ((size_t)res < p.len) queue(p.at + res, p.len - res);  // short: the rest again
  }
  (write ? written_ : read_) += (int64_t)bytes;
  return absl::OkStatus();
}

// Without io_uring: the transfer in block_size pieces, each a pread/pwrite loop (short
// transfers continue), on up to min(queue_depth, kMaxFallbackThreads) threads.
absl::Status NvmeSwapper::transfer_threads(int h, void* buf, size_t bytes, size_t offset,
                                           bool write) {
  const size_t block = (size_t)aio_.block_size;
  const size_t blocks = (bytes + block - 1) / block;
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status result;
  auto work = [&] {
    for (size_t b; (b = next.fetch_add(1)) < blocks;) {
      char* p = static_cast<char*>(buf) + b * block;
      const size_t len = std::min(block, bytes - b * block);
      for (size_t done = 0; done < len;) {
        const off_t at = (off_t)(offset + b * block + done);
        const ssize_t n = write ? ::pwrite(fds_[h], p + done, len - done, at)
                                : ::pread(fds_[h], p + done, len - done, at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          const int err = n < 0 ? errno : 0;
          std::lock_guard<std::mutex> lock(mu);
          if (result.ok())
            result =
                err ? absl::ResourceExhaustedError(absl::StrCat(
                          write ? "writing" : "reading", " swap file ", paths_[h], " failed: ",
                          std::strerror(err), err == ENOSPC ? "; the NVMe drive is full" : ""))
                    : absl::DataLossError(absl::StrCat(write ? "writing" : "reading", " swap file ",
                                                       paths_[h], " made no progress"));
          next = blocks;  // the others stop at their next block
          return;
        }
        done += (size_t)n;
      }
    }
  };
  const int extra =
      (int)std::min<int64_t>({aio_.queue_depth, kMaxFallbackThreads, (int64_t)blocks}) - 1;
  std::vector<std::thread> threads;
  try {
    for (int i = 0; i < extra; ++i) threads.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads (a pids limit): fewer do the work
  }
  work();
  for (std::thread& t : threads) t.join();
  if (result.ok()) (write ? written_ : read_) += (int64_t)bytes;
  return result;
}

}  // namespace zt

#include "common/memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cleanup.h"
#include "common/fault.h"
#include "common/status.h"

namespace zt {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams: return "params";
    case MemCategory::kGrads: return "grads";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommBuffers: return "comm_buffers";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kPinnedHost: return "pinned_host";
    case MemCategory::kNvme: return "nvme";
    case MemCategory::kCount: break;
  }
  return "?";
}

static void raise_peak(std::atomic<size_t>& peak, size_t value) {
  size_t old = peak.load();
  while (value > old && !peak.compare_exchange_weak(old, value)) {
  }
}

void MemoryTracker::on_alloc(MemCategory c, size_t bytes) {
  raise_peak(peak_[idx(c)], current_[idx(c)].fetch_add(bytes) + bytes);
  raise_peak(peak_total_, total_.fetch_add(bytes) + bytes);
}

void MemoryTracker::on_free(MemCategory c, size_t bytes) {
  current_[idx(c)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

absl::StatusOr<int64_t> parse_byte_size(std::string_view s) {
  const std::string text(absl::StripAsciiWhitespace(absl::string_view(s.data(), s.size())));
  size_t i = 0;
  while (i < text.size() && (std::isdigit((unsigned char)text[i]) || text[i] == '.')) ++i;
  double number = 0;
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(i)));
  struct Unit {
    const char* name;
    double factor;
  };
  static constexpr Unit kUnits[] = {{"", 1},           {"b", 1},          {"kib", 1024.0},
                                    {"mib", 1048576.0}, {"gib", 1073741824.0},
                                    {"tib", 1099511627776.0}, {"kb", 1e3},  {"mb", 1e6},
                                    {"gb", 1e9},        {"tb", 1e12}};
  const Unit* found = nullptr;
  for (const Unit& u : kUnits)
    if (unit == u.name) found = &u;
  // A fraction of a byte, or a non-zero size that rounds to none, is a mistake, not "no limit".
  if (i == 0 || !absl::SimpleAtod(text.substr(0, i), &number) || !found || number < 0 ||
      !std::isfinite(number * found->factor) || number * found->factor > 9.0e18 ||
      (found->factor == 1 && number != std::floor(number)) ||
      (number > 0 && std::llround(number * found->factor) == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(s),
        "' is not a size: give bytes (e.g. 8589934592) or a number with KiB, MiB, GiB, TiB "
        "(powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. \"8GiB\""));
  }
  return static_cast<int64_t>(std::llround(number * found->factor));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int k = 0;
  while (std::fabs(v) >= 1024 && k < 4) v /= 1024, ++k;
  return k == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.2f %s", v, units[k]);
}

void check_memory_limit(const MemoryTracker& t, size_t limit, size_t bytes, MemCategory c) {
  // The fault point fails the allocation of its pass as if past the limit (tests reach every
  // allocation site this way, common/fault.h).
  if (limit == 0 || (t.current_total() + bytes <= limit && !fault_fires("device_alloc"))) return;
  std::string in_use;
  for (size_t k = 0; k < kNumMemCategories; ++k) {
    const auto cat = static_cast<MemCategory>(k);
    if (t.current(cat) == 0) continue;
    absl::StrAppend(&in_use, in_use.empty() ? "" : ", ", std::string(mem_category_name(cat)), " ",
                    format_bytes((int64_t)t.current(cat)));
  }
  throw DeviceMemoryLimitExceeded(
      absl::StrCat("device memory limit ", format_bytes((int64_t)limit), " exceeded: ",
                   format_bytes((int64_t)bytes), " more of ", std::string(mem_category_name(c)),
                   " were asked with ", format_bytes((int64_t)t.current_total()),
                   " in use (", in_use.empty() ? "nothing" : in_use, ")"));
}


int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : 0;
}

namespace {
constexpr size_t kHuge = kHugePageBytes;

bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string_view(e) == "0";
}

// Whether a block of `bytes` starts in a 2 MiB page of its own, asking for huge pages.
bool huge_block(size_t bytes) {
  static const bool on = !env_off("ZEROTRAIN_HUGE_PAGES");
  return on && bytes >= kHuge;
}
}  // namespace

void* alloc_streaming(size_t bytes, size_t align) {
  if (!huge_block(bytes)) return std::aligned_alloc(align, (bytes + align - 1) / align * align);
  static const bool stagger = !env_off("ZEROTRAIN_STAGGER");
  static std::atomic<unsigned> next{0};
  // A stagger keeps `align` only where it is a multiple of it.
  const size_t offset = stagger && align <= kStaggerBytes ? next++ % kStaggers * kStaggerBytes : 0;
  align = std::max(align, kHuge);
  const size_t total = (offset + bytes + align - 1) / align * align;
  char* base = static_cast<char*>(std::aligned_alloc(align, total));
  if (!base) return nullptr;
  // Whole 2 MiB pages of the block only: a partly used last page stays in 4 KiB pages rather
  // than take 2 MiB of memory for a few KiB of the block.
  ::madvise(base, (offset + bytes) / kHuge * kHuge, MADV_HUGEPAGE);
  return base + offset;
}

void free_streaming(void* p, size_t bytes) {
  if (p && huge_block(bytes)) {  // the block's base is the 2 MiB boundary at or below p
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), offset = a % kHuge;
    ZT_CHECK(offset % kStaggerBytes == 0 && offset < kStaggers * kStaggerBytes);
    p = reinterpret_cast<void*>(a - offset);
  }
  std::free(p);
}

namespace {

absl::StatusOr<void*> map_shared(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return absl::ResourceExhaustedError(absl::StrCat("mmap of shared memory ", name, " (",
                                                     format_bytes((int64_t)bytes),
                                                     "): ", std::strerror(errno)));
  ::madvise(p, bytes, MADV_HUGEPAGE);  // where shmem THP is "advise" (usually it is off)
  return p;
}

}  // namespace

absl::StatusOr<SharedMemory> SharedMemory::create(size_t bytes) {
  ZT_CHECK(bytes > 0);
  SharedMemory m;
  // pid and a random part: containers sharing /dev/shm (--ipc=host) may reuse pids.
  std::random_device rd;
  m.name_ = absl::StrFormat("/zerotrain-%d-%08x", (int)::getpid(), rd());
  const int fd = ::shm_open(m.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("shm_open(", m.name_, "): ", std::strerror(errno)));
  m.owner_ = true;  // from here on release() unlinks it, and so does a signal or an abort
  m.cleanup_slot_ = register_cleanup_dir(("/dev/shm" + m.name_).c_str());
  // posix_fallocate reserves every page now: a tmpfs that cannot hold the object fails here.
  const int rc = ::posix_fallocate(fd, 0, (off_t)bytes);
  if (rc != 0) {
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", format_bytes((int64_t)bytes),
                     " of shared memory in /dev/shm: ", std::strerror(rc),
                     " (df -h /dev/shm shows its size; in a container, start it with a "
                     "larger --shm-size)"));
  }
  absl::StatusOr<void*> p = map_shared(fd, bytes, m.name_);
  ::close(fd);
  if (!p.ok()) return p.status();
  m.ptr_ = *p;
  m.bytes_ = bytes;
  return m;
}

absl::StatusOr<SharedMemory> SharedMemory::open(const std::string& name, size_t bytes) {
  SharedMemory m;
  m.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int e = errno;
    std::string msg = absl::StrCat("shm_open(", name, "): ", std::strerror(e));
    if (e == ENOENT)
      return absl::NotFoundError(msg +
                                 " (are the ranks in different containers or IPC "
                                 "namespaces, each with its own /dev/shm?)");
    return absl::InternalError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (size_t)st.st_size != bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("shared memory ", name, " holds ",
                                                      (int64_t)st.st_size, " bytes, not ", bytes));
  }
  absl::StatusOr<void*> p = map_shared(fd, bytes, name);
  ::close(fd);
  if (!p.ok()) return p.status();
  m.ptr_ = *p;
  m.bytes_ = bytes;
  return m;
}

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    owner_ = std::exchange(o.owner_, false);
    cleanup_slot_ = std::exchange(o.cleanup_slot_, -1);
  }
  return *this;
}

SharedMemory::~SharedMemory() { release(); }

void SharedMemory::release() {
  if (ptr_) ::munmap(ptr_, bytes_);
  ptr_ = nullptr;
  bytes_ = 0;
  unlink();
}

void SharedMemory::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
  unregister_cleanup_dir(cleanup_slot_);
  cleanup_slot_ = -1;
}

}  // namespace zt

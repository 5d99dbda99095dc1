// Memory accounting: every allocation names a category, so a run can report measured bytes
// per category (current and peak) per rank. docs/architecture.md "Backend".
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace zt {

enum class MemCategory {
  kParams,       // working parameters (fp32/bf16/fp16)
  kGrads,        // stored gradients
  kOptimizer,    // fp32 master weights and Adam moments (K = 12 bytes/param)
  kActivations,  // forward activations kept for backward, and their gradients
  kCommBuffers,  // communication buckets
  kWorkspace,    // scratch (gathered parameters, gradient scratch, logits chunks)
  kPinnedHost,   // host staging for offload
  kNvme,         // bytes on NVMe (accounted, not allocated in RAM)
  kCount
};
inline constexpr size_t kNumMemCategories = static_cast<size_t>(MemCategory::kCount);
std::string_view mem_category_name(MemCategory c);

// Current and peak bytes per category; one tracker per device (host or GPU) per rank.
// Thread-safe: offload threads allocate too.
class MemoryTracker {
 public:
  void on_alloc(MemCategory c, size_t bytes);
  void on_free(MemCategory c, size_t bytes);
  size_t current(MemCategory c) const { return current_[idx(c)].load(); }
  size_t peak(MemCategory c) const { return peak_[idx(c)].load(); }
  size_t current_total() const { return total_.load(); }
  size_t peak_total() const { return peak_total_.load(); }

 private:
  static size_t idx(MemCategory c) { return static_cast<size_t>(c); }
  std::array<std::atomic<size_t>, kNumMemCategories> current_{};
  std::array<std::atomic<size_t>, kNumMemCategories> peak_{};
  std::atomic<size_t> total_{0}, peak_total_{0};
};

// "8GiB", "512MiB", "1.5GB", "1000000" (bytes): binary suffixes KiB/MiB/GiB/TiB, decimal
// KB/MB/GB/TB, or B / none (whole bytes then); case-insensitive, optional space. Rounded to
// whole bytes. Error (naming the accepted forms) on anything else, negative sizes, more than
// 9e18 bytes, and non-zero sizes under one byte.
absl::StatusOr<int64_t> parse_byte_size(std::string_view s);
// "7.50 GiB" style, binary units.
std::string format_bytes(int64_t bytes);
// This machine's physical memory in bytes (sysconf), 0 when unknown.
int64_t physical_memory_bytes();

// Host memory for buffers that kernels stream through (parameters, gradients, optimizer
// state, offload staging): `bytes` (> 0) aligned to `align` (a power of two, at least 64).
// Null when out of memory. Free with free_streaming and the same `bytes`.
//
// Blocks of 2 MiB and more start in a 2 MiB page and the whole 2 MiB pages they cover ask for
// transparent huge pages (madvise MADV_HUGEPAGE; a hint, ignored where THP is off), so MPI's
// single-copy transfers (CMA) pin 512x fewer pages and streaming passes miss the TLB less:
// stage 2's all-gather on the CPU backend, docs/benchmarks.md ("Huge pages").
//
// Such a block also starts kStaggerBytes x (0..7) past the 2 MiB boundary, the multiple
// rotating from one block to the next (when `align` <= kStaggerBytes; a larger `align` gets
// none). Blocks allocated in a row therefore differ in address bits 14-16, as the engine's per
// unit parameters, gradient, master weights and moments do: with every stream on the boundary,
// CPU Adam's seven streams met in the same L2/L3 sets and DRAM banks at every index, and ran
// 1.10-1.27x slower (docs/benchmarks.md, "CPU Adam"). It costs at most 112 KiB per block,
// outside the memory tracker's counts.
//
// Read once, at the first call: ZEROTRAIN_HUGE_PAGES=0 in the environment turns both off (for
// systems where THP compaction stalls); ZEROTRAIN_STAGGER=0 turns off the stagger alone.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // a transparent huge page
inline constexpr size_t kStaggerBytes = size_t{16} << 10;  // the stagger's step
inline constexpr unsigned kStaggers = 8;                   // offsets 0 .. 7 steps
void* alloc_streaming(size_t bytes, size_t align = 64);
// Frees p (null is fine) from alloc_streaming(bytes, ...). A block of 2 MiB and more is freed
// from the 2 MiB boundary below p, so `bytes` must be on the same side of 2 MiB as when it was
// allocated; a p that is no stagger past its boundary aborts (ZT_CHECK).
void free_streaming(void* p, size_t bytes);

// POSIX shared memory (an object in /dev/shm) mapped into this process: host memory that
// processes on one node map at once (zero/comm.h map_node_shared). The object is filled with
// zeros and its pages are reserved when it is created, so a /dev/shm too small for it fails
// there (ENOSPC) rather than with SIGBUS at a later write. Unmapped on destruction.
class SharedMemory {
 public:
  // A new object of `bytes` (> 0) under a fresh name "/zerotrain-<pid>-<random>", mapped; until
  // unlink() the name is also removed if the process is ended by a signal or a multi-rank
  // abort (common/cleanup.h). Errors (ResourceExhausted / Internal): the OS's, naming the size
  // and what to do.
  static absl::StatusOr<SharedMemory> create(size_t bytes);
  // Maps the object `name` that another process created, which must hold `bytes`. Errors:
  // NotFound (no such object: processes in different containers or IPC namespaces),
  // FailedPrecondition (a different size), the OS's.
  static absl::StatusOr<SharedMemory> open(const std::string& name, size_t bytes);
  SharedMemory(SharedMemory&& o) noexcept
      : name_(std::move(o.name_)),
        ptr_(std::exchange(o.ptr_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        owner_(std::exchange(o.owner_, false)),
        cleanup_slot_(std::exchange(o.cleanup_slot_, -1)) {}
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();
  // Removes the name; mappings stay valid and the memory goes with the last of them.
  void unlink();
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  SharedMemory() = default;
  void release();  // unmaps and unlinks (owner)
  std::string name_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;  // created it and has not unlinked it yet
  int cleanup_slot_ = -1;
};

// Thrown by a backend's alloc when the device-memory limit would be exceeded (a bad_alloc, so
// code that survives running out of memory survives this too). what() says what was asked,
// the limit, and the bytes in use per category at that moment.
class DeviceMemoryLimitExceeded : public std::bad_alloc {
 public:
  explicit DeviceMemoryLimitExceeded(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Throws DeviceMemoryLimitExceeded when `bytes` more of category c would take `t` past `limit`
// (0: no limit), or when the fault point "device_alloc" fires (common/fault.h).
void check_memory_limit(const MemoryTracker& t, size_t limit, size_t bytes, MemCategory c);

}  // namespace zt

// common/memory.h's streaming blocks: alignment, the stagger of large blocks, and freeing.
#include "common/memory.h"

#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "model/backend.h"
#include "zero/host_buffer.h"

namespace zt {
namespace {

constexpr size_t kHuge = kHugePageBytes;

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string_view(e) == "0";
}
bool stagger_off() { return env_off("ZEROTRAIN_HUGE_PAGES") || env_off("ZEROTRAIN_STAGGER"); }

uintptr_t stagger_of(const void* p) { return addr(p) % kHuge; }

// The device memory limit (--memory_limit, common/memory.h): an allocation that would take the
// total in use past the limit is refused, one that reaches it exactly is not, and the message
// says what was asked, the limit and what is in use; 0 means no limit.
TEST(MemoryLimit, RefusesWhatWouldPassTheLimitCountingTheAskedBytes) {
  MemoryTracker t;
  t.on_alloc(MemCategory::kParams, 1000);
  t.on_alloc(MemCategory::kActivations, 24);
  EXPECT_NO_THROW(check_memory_limit(t, 1536, 512, MemCategory::kWorkspace));  // exactly 1536
  EXPECT_NO_THROW(check_memory_limit(t, 0, size_t{1} << 40, MemCategory::kWorkspace));
  try {
    check_memory_limit(t, 1536, 513, MemCategory::kWorkspace);
    ADD_FAILURE() << "1024 in use + 513 asked passed a limit of 1536";
  } catch (const DeviceMemoryLimitExceeded& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("device memory limit 1.50 KiB exceeded: 513 B more of "),
              std::string::npos) << what;
    EXPECT_NE(what.find("with 1.00 KiB in use"), std::string::npos) << what;
  }
}

TEST(StreamingMemory, LargeBlocksAreStaggeredAlignedAndWhole) {
  if (stagger_off()) GTEST_SKIP() << "ZEROTRAIN_HUGE_PAGES=0 or ZEROTRAIN_STAGGER=0";
  // kHuge itself is the smallest staggered size; 16 KiB the largest staggered alignment.
  for (size_t bytes : {kHuge, 3 * kHuge + 100}) {
    for (size_t align : {size_t{64}, size_t{4096}, kStaggerBytes}) {
      void* blocks[8];
      std::set<uintptr_t> offsets;
      for (void*& p : blocks) {
        p = alloc_streaming(bytes, align);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(addr(p) % align, 0u);
        EXPECT_EQ(stagger_of(p) % kStaggerBytes, 0u);
        EXPECT_LT(stagger_of(p), 8 * kStaggerBytes);
        offsets.insert(stagger_of(p));
        std::memset(p, 0x5a, bytes);  // every byte is ours
      }
      // Eight blocks in a row: eight staggers, so no two share their low 17 address bits.
      EXPECT_EQ(offsets.size(), 8u) << "bytes " << bytes << " align " << align;
      for (void* p : blocks) free_streaming(p, bytes);  // freeing off the base would abort
    }
  }
}

TEST(StreamingMemory, SmallBlocksAndLargeAlignmentsTakeNoStagger) {
  if (stagger_off()) GTEST_SKIP() << "ZEROTRAIN_HUGE_PAGES=0 or ZEROTRAIN_STAGGER=0";
  const size_t big = 3 * kHuge;
  void* a = alloc_streaming(big);
  void* small = alloc_streaming(kHuge - 64, 4096);       // under 2 MiB: no stagger taken
  void* wide = alloc_streaming(big, 2 * kStaggerBytes);  // alignment above the step: none
  void* b = alloc_streaming(big);
  for (void* p : {a, small, wide, b}) ASSERT_NE(p, nullptr);
  EXPECT_EQ(addr(small) % 4096, 0u);
  EXPECT_EQ(stagger_of(wide), 0u);
  // a and b are consecutive staggers: neither block between them took one.
  EXPECT_EQ(stagger_of(b), (stagger_of(a) + kStaggerBytes) % (8 * kStaggerBytes));
  const size_t huge_align = size_t{4} << 20;
  void* c = alloc_streaming(5 * kHuge, huge_align);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(addr(c) % huge_align, 0u);
  free_streaming(a, big), free_streaming(small, kHuge - 64), free_streaming(wide, big);
  free_streaming(b, big), free_streaming(c, 5 * kHuge);
}

// The owners of streaming blocks free them as allocated: the CPU backend (through its block
// cache, emptied when it is destroyed) and HostBuffer. A plain std::free of a staggered block
// aborts.
TEST(StreamingMemory, CpuBackendAndHostBufferFreeWhatTheyAllocate) {
  {
    std::unique_ptr<Backend> be = make_cpu_backend(1);
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(be->alloc(3 * kHuge, MemCategory::kParams));
    for (void* p : blocks) be->free(p, 3 * kHuge, MemCategory::kParams);
    void* again = be->alloc(3 * kHuge, MemCategory::kParams);  // from the cache
    be->free(again, 3 * kHuge, MemCategory::kParams);
  }
  MemoryTracker host;
  std::vector<HostBuffer> buffers;
  for (int i = 0; i < 8; ++i)
    buffers.emplace_back(3 * kHuge + 8, MemCategory::kOptimizer, &host, nullptr);
  EXPECT_EQ(host.current(MemCategory::kOptimizer), 8 * (3 * kHuge + 8));
  buffers.clear();
  EXPECT_EQ(host.current(MemCategory::kOptimizer), 0u);
}

// Two mappings of one object see each other's writes; the object starts zeroed; its name
// goes with unlink() (or the creator's destruction) while the mappings stay usable.
TEST(SharedMemory, MappingsShareBytesAndTheNameGoesWithUnlink) {
  const size_t bytes = 3 << 20;
  absl::StatusOr<SharedMemory> a = SharedMemory::create(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<SharedMemory> b = SharedMemory::open(a->name(), bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->data(), b->data());
  auto* pa = static_cast<unsigned char*>(a->data());
  auto* pb = static_cast<unsigned char*>(b->data());
  EXPECT_EQ(pa[0], 0);
  EXPECT_EQ(pa[bytes - 1], 0);
  pa[12345] = 7;
  pb[bytes - 1] = 9;
  EXPECT_EQ(pb[12345], 7);
  EXPECT_EQ(pa[bytes - 1], 9);
  const std::string path = "/dev/shm" + a->name();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0) << path;
  a->unlink();
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " should be gone";
  pa[1] = 3;  // still mapped
  EXPECT_EQ(pb[1], 3);
  absl::StatusOr<SharedMemory> c = SharedMemory::open(a->name(), bytes);
  EXPECT_FALSE(c.ok());
}

// More than /dev/shm holds fails at creation, saying so, and leaves no object behind.
TEST(SharedMemory, TooLargeFailsAtCreationAndLeavesNothing) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  if (fs.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  const size_t too_big = (size_t)fs.f_blocks * fs.f_frsize * 2 + (size_t{1} << 30);
  absl::StatusOr<SharedMemory> m = SharedMemory::create(too_big);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  EXPECT_NE(m.status().message().find("/dev/shm"), std::string_view::npos) << m.status();
  const std::string prefix = "zerotrain-" + std::to_string(::getpid()) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << e.path() << " left behind";
}

}  // namespace
}  // namespace zt

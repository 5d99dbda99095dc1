// common/memory.h's streaming blocks: alignment, the stagger of large blocks, and freeing.
#include "common/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

namespace zt {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool huge_pages_off() {
  const char* e = std::getenv("ZEROTRAIN_HUGE_PAGES");
  return e && std::string_view(e) == "0";
}

TEST(StreamingMemory, LargeBlocksAreStaggeredAlignedAndWhole) {
  if (huge_pages_off()) GTEST_SKIP() << "ZEROTRAIN_HUGE_PAGES=0 turns the stagger off";
  for (size_t align : {size_t{64}, size_t{4096}}) {
    const size_t bytes = 3 * kHuge + 100;
    void* blocks[8];
    std::set<uintptr_t> offsets;
    for (void*& p : blocks) {
      p = alloc_streaming(bytes, align);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(addr(p) % align, 0u);
      const uintptr_t offset = addr(p) % kHuge;  // past the 2 MiB boundary
      EXPECT_EQ(offset % kStaggerBytes, 0u);
      EXPECT_LT(offset, 8 * kStaggerBytes);
      offsets.insert(offset);
      std::memset(p, 0x5a, bytes);  // every byte is ours
    }
    // Eight blocks in a row: eight different staggers, so no two share their low address bits.
    EXPECT_EQ(offsets.size(), 8u) << "align " << align;
    for (void* p : blocks) free_streaming(p, bytes);  // an off-base free would abort here
  }
}

TEST(StreamingMemory, AlignmentAboveTheStaggerIsKeptAndSmallBlocksAreNotStaggered) {
  const size_t big_align = size_t{4} << 20;
  void* p = alloc_streaming(5 * kHuge, big_align);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(addr(p) % big_align, 0u);
  free_streaming(p, 5 * kHuge);
  for (int i = 0; i < 3; ++i) {
    void* q = alloc_streaming(4096, 4096);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(addr(q) % 4096, 0u);
    std::memset(q, 1, 4096);
    free_streaming(q, 4096);
  }
}

}  // namespace
}  // namespace zt

// The CUDA emulation (model/cuda/emu/cuda_emu.h) against what CUDA guarantees: indices of every
// thread of a 3-D launch, __syncthreads between shared-memory writes and reads in every thread
// order, shared memory private to each block, warp shuffles (xor, down, broadcast, partial
// warps), atomics, ldmatrix's fragments and cp.async's groups, and a deadlock reported instead
// of hanging. A kernel with a missing barrier gives different results in different thread
// orders: what the orders are for.
#include "model/cuda/emu/cuda_emu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "model/cuda/async_copy.cuh"
#include "model/cuda/mma.cuh"

namespace zt::emu {
namespace {

class CudaEmu : public ::testing::TestWithParam<ThreadOrder> {
 protected:
  void SetUp() override { set_thread_order(GetParam(), 7); }
  void TearDown() override { set_thread_order(ThreadOrder::kForward); }
};

__global__ void write_indices(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = block * 1000 + thread;
}

TEST_P(CudaEmu, EveryThreadOfA3dLaunchSeesItsIndices) {
  const Dim3 grid(3, 2, 2), block(5, 2, 3);
  std::vector<int> out(12 * 30, -1);
  launch(grid, block, [&] { write_indices(out.data()); });
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 30; ++t) EXPECT_EQ(out[b * 30 + t], b * 1000 + t);
}

// Reverses each block's slice through shared memory; `barrier` false leaves out the barrier.
__global__ void reverse_in_shared(const int* in, int* out, bool barrier) {
  __shared__ int s[64];
  const int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  s[t] = in[base + t];
  if (barrier) __syncthreads();
  out[base + t] = s[n - 1 - t];
}

std::vector<int> reverse_blocks(bool barrier) {
  std::vector<int> in(4 * 64), out(in.size());
  std::iota(in.begin(), in.end(), 0);
  launch(Dim3(4), Dim3(64), [&] { reverse_in_shared(in.data(), out.data(), barrier); });
  return out;
}

TEST_P(CudaEmu, SyncthreadsOrdersSharedMemoryWritesBeforeReads) {
  const std::vector<int> out = reverse_blocks(true);
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 64; ++t) EXPECT_EQ(out[b * 64 + t], b * 64 + 63 - t);
}

// Tree reduction in shared memory: each block's sum, so shared memory must be the block's own.
__global__ void block_sums(const float* in, float* out) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

TEST_P(CudaEmu, SharedMemoryBelongsToItsBlock) {
  std::vector<float> in(5 * 128), out(5);
  for (size_t i = 0; i < in.size(); ++i) in[i] = (float)(i % 128 + 1) * (1 + (float)(i / 128));
  launch(Dim3(5), Dim3(128), [&] { block_sums(in.data(), out.data()); });
  for (int b = 0; b < 5; ++b) EXPECT_EQ(out[b], 128 * 129 / 2 * (b + 1)) << "block " << b;
}

__global__ void shuffles(const float* in, float* xor_sum, float* down_sum, float* bcast) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[i], d = in[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o);
  xor_sum[i] = v;
  down_sum[i] = d;
  bcast[i] = __shfl_sync(0xffffffffu, in[i], 3);
}

TEST_P(CudaEmu, WarpShufflesExchangeWithinTheWarp) {
  const int threads = 64;
  std::vector<float> in(2 * threads), x(in.size()), d(in.size()), b(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = (float)(i * i % 97);
  launch(Dim3(2), Dim3(threads), [&] { shuffles(in.data(), x.data(), d.data(), b.data()); });
  for (size_t w = 0; w < in.size(); w += 32) {
    float sum = 0;
    for (size_t l = 0; l < 32; ++l) sum += in[w + l];
    for (size_t l = 0; l < 32; ++l) {
      EXPECT_EQ(x[w + l], sum) << "xor, lane " << l;
      EXPECT_EQ(b[w + l], in[w + 3]) << "broadcast, lane " << l;
    }
    EXPECT_EQ(d[w], sum) << "down, lane 0";
  }
}

// A partial warp names only its live lanes in the mask and exchanges only among them: a mask
// or a source lane beyond them is undefined on a GPU (CUDA C++ Programming Guide, "Warp Shuffle
// Functions"), and the strict emulation aborts on it.
__global__ void warp_max_of_lanes(int* out) {
  const unsigned live = min(32u, blockDim.x - threadIdx.x / 32 * 32);
  const unsigned mask = live == 32 ? 0xffffffffu : (1u << live) - 1;
  int v = threadIdx.x;
  for (unsigned o = 16; o > 0; o >>= 1)
    if (o < live) v = max(v, __shfl_xor_sync(mask, v, o));
  out[threadIdx.x] = v;
}

TEST_P(CudaEmu, PartialWarpShufflesAmongItsLiveLanes) {
  std::vector<int> out(40);  // warps of 32 and 8 lanes
  launch(Dim3(1), Dim3(40), [&] { warp_max_of_lanes(out.data()); });
  for (int t = 0; t < 32; ++t) EXPECT_EQ(out[t], 31);
  for (int t = 32; t < 40; ++t) EXPECT_EQ(out[t], 39);
}

__global__ void count(float* total, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(total, in[i]);
}

TEST_P(CudaEmu, AtomicsAccumulateEveryThread) {
  std::vector<float> in(1000);
  std::iota(in.begin(), in.end(), 1.f);
  float total = 0;
  launch(Dim3(8), Dim3(128), [&] { count(&total, in.data(), 1000); });
  EXPECT_EQ(total, 1000.f * 1001.f / 2);
}

// ldmatrix's fragments (model/cuda/mma.cuh) fed to mma.sync give the matrices' product: A
// (16 x 16) from a row-major tile by load_a, B (16 x 16, two n-tiles) by load_b2 from a tile of
// B^T and by load_b2_trans from a tile of B itself. Small integers, so every sum is exact and
// the reference is the plain product. Tiles padded to 24 elements a row, as the kernels pad.
constexpr int kLd = 24;
__global__ void fragment_product(float* out, const uint16_t* a, const uint16_t* bt,
                                 const uint16_t* b, bool trans) {
  uint16_t* tiles = static_cast<uint16_t*>(dynamic_shared());  // A, B^T, B: [16][kLd] each
  for (int e = threadIdx.x; e < 16 * 16; e += 32) {
    tiles[e / 16 * kLd + e % 16] = a[e];
    tiles[16 * kLd + e / 16 * kLd + e % 16] = bt[e];
    tiles[32 * kLd + e / 16 * kLd + e % 16] = b[e];
  }
  __syncthreads();
  uint32_t af[4], bf[2][2];
  load_a(af, tiles, kLd, 0, 0);
  if (trans)
    load_b2_trans(bf, tiles + 32 * kLd, kLd, 0, 0);
  else
    load_b2(bf, tiles + 16 * kLd, kLd, 0, 0);
  float c[2][4] = {};
  for (int n = 0; n < 2; ++n) zt::mma_m16n8k16<__nv_bfloat16>(c[n], af, bf[n]);
  const int g = threadIdx.x / 4, t = threadIdx.x % 4;  // the C fragment (mma.cuh)
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 4; ++i) out[(g + 8 * (i / 2)) * 16 + n * 8 + 2 * t + i % 2] = c[n][i];
}

TEST_P(CudaEmu, LdmatrixFragmentsMultiplyAsTheirMatrices) {
  std::vector<uint16_t> a(256), bt(256), b(256);
  std::vector<float> av(256), bv(256), want(256, 0.f);
  auto bits = [](float f) {  // bf16 of a small integer: fp32's upper half, exact
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      av[r * 16 + c] = (float)((r * 7 + c * 3) % 9 - 4);
      bv[r * 16 + c] = (float)((r * 5 + c * 11) % 7 - 3);  // B[k = r][n = c]
    }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      a[r * 16 + c] = bits(av[r * 16 + c]);
      b[r * 16 + c] = bits(bv[r * 16 + c]);
      bt[c * 16 + r] = bits(bv[r * 16 + c]);
      for (int k = 0; k < 16; ++k) want[r * 16 + c] += av[r * 16 + k] * bv[k * 16 + c];
    }
  for (bool trans : {false, true}) {
    std::vector<float> out(256, -1.f);
    launch(
        Dim3(1), Dim3(32),
        [&] { fragment_product(out.data(), a.data(), bt.data(), b.data(), trans); },
        3 * 16 * kLd * sizeof(uint16_t));
    EXPECT_EQ(out, want) << (trans ? "load_b2_trans" : "load_b2");
  }
}

// cp.async (model/cuda/async_copy.cuh): two groups of 16-byte pieces, the second with a
// zero-filled piece. After waiting for all but the newest group, the first has landed and the
// second is still in flight (the emulation shows it as 0xFF bytes); after waiting for none, both
// have, and a __syncthreads shows every thread's pieces to the block.
__global__ void async_groups(uint32_t* out, const uint32_t* src) {
  uint32_t* s = static_cast<uint32_t*>(dynamic_shared());  // [2][64 threads][4 words]
  const int i = threadIdx.x;
  cp_async16(s + 4 * i, src + 4 * i, true);
  cp_async_commit();
  cp_async16(s + 256 + 4 * i, src + 256 + 4 * i, i % 2 == 0);
  cp_async_commit();
  cp_async_wait<1>();
  out[i] = s[4 * i] == src[4 * i] && s[256 + 4 * i] == 0xffffffffu;
  cp_async_wait<0>();
  __syncthreads();
  const int j = (i + 1) % 64;  // a neighbour's pieces
  bool ok = true;
  for (int w = 0; w < 4; ++w)
    ok = ok && s[4 * j + w] == src[4 * j + w] &&
         s[256 + 4 * j + w] == (j % 2 == 0 ? src[256 + 4 * j + w] : 0u);
  out[64 + i] = ok;
}

TEST_P(CudaEmu, AsyncCopiesLandAtTheWaitForTheirGroup) {
  std::vector<uint32_t> src(512), out(128, 7);
  for (size_t i = 0; i < src.size(); ++i) src[i] = (uint32_t)(i * 2654435761u % 1000 + 1);
  launch(
      Dim3(1), Dim3(64), [&] { async_groups(out.data(), src.data()); }, 512 * sizeof(uint32_t));
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(out[i], 1u) << "thread " << i << ": after wait_group 1";
    EXPECT_EQ(out[64 + i], 1u) << "thread " << i << ": its neighbour's pieces after the barrier";
  }
}

INSTANTIATE_TEST_SUITE_P(Orders, CudaEmu,
                         ::testing::Values(ThreadOrder::kForward, ThreadOrder::kReverse,
                                           ThreadOrder::kRandom),
                         [](const auto& info) {
                           return info.param == ThreadOrder::kForward   ? "forward"
                                  : info.param == ThreadOrder::kReverse ? "reverse"
                                                                        : "random";
                         });

TEST(CudaEmuOrders, AMissingBarrierShowsAsADifferenceBetweenOrders) {
  if (strict_enabled()) GTEST_SKIP() << "the strict mode stops at this race itself";
  set_thread_order(ThreadOrder::kForward);
  const std::vector<int> forward = reverse_blocks(false);
  set_thread_order(ThreadOrder::kReverse);
  const std::vector<int> reverse = reverse_blocks(false);
  set_thread_order(ThreadOrder::kForward);
  EXPECT_NE(forward, reverse);
  EXPECT_EQ(reverse_blocks(true), [] {
    set_thread_order(ThreadOrder::kReverse);
    auto r = reverse_blocks(true);
    set_thread_order(ThreadOrder::kForward);
    return r;
  }());
}

__global__ void divergent_shuffle() {
  if (threadIdx.x < 16)
    (void)__shfl_xor_sync(0xffffffffu, 1, 1);
  else
    __syncthreads();
}

TEST(CudaEmuDeathTest, ADeadlockIsReportedNotHung) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(launch(Dim3(1), Dim3(32), [] { divergent_shuffle(); }), "deadlock on a GPU");
}

// The guard (ZT_CUDA_EMU_GUARD=1; ctest runs this test a second time with it, as emu_guard.):
// device memory is open inside a launch or a DeviceAccess, and a host read outside one faults.
TEST(CudaEmuDeathTest, GuardedDeviceMemoryFaultsOnHostAccess) {
  if (!guard_enabled())
    GTEST_SKIP() << "ZT_CUDA_EMU_GUARD is not 1 (ctest's emu_guard. run sets it)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int* p = static_cast<int*>(device_alloc(64 * sizeof(int)));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  launch(Dim3(1), Dim3(64), [&] { p[threadIdx.x] = (int)threadIdx.x; });
  {
    DeviceAccess open;
    DeviceAccess nested;  // closing the inner one leaves the memory open
    { DeviceAccess inner; }
    EXPECT_EQ(p[63], 63);
  }
  EXPECT_DEATH(
      {
        volatile int x = p[5];
        (void)x;
      },
      "");
  device_free(p);
}

// ---- the strict mode (ZT_CUDA_EMU_STRICT=1; ctest runs these as emu_strict.): each check with
// the bug it is there to catch ----

#define ZT_NEEDS_STRICT()                                                            \
  if (!strict_enabled())                                                             \
    GTEST_SKIP() << "ZT_CUDA_EMU_STRICT is not 1 (ctest's emu_strict. run sets it)"; \
  GTEST_FLAG_SET(death_test_style, "threadsafe")

TEST(CudaEmuStrictDeathTest, FreshDeviceMemoryIsNaNAndItsEndFaults) {
  ZT_NEEDS_STRICT();
  float* p = static_cast<float*>(device_alloc(100 * sizeof(float)));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(std::isnan(p[i])) << i;
  // 400 bytes are 512 with cudaMalloc's 256-byte granularity; the next byte is unmapped.
  launch(Dim3(1), Dim3(128), [&] { p[threadIdx.x] = 1.f; });
  EXPECT_DEATH(launch(Dim3(1), Dim3(129), [&] { p[threadIdx.x] = 1.f; }), "");
  device_free(p);
}

// Naming exited lanes in the mask is allowed; reading one is not (its value is undefined).
__global__ void shuffle_after_half_exit(int* out, int offset) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, (int)threadIdx.x + offset);
}

TEST(CudaEmuStrictDeathTest, AShuffleReadingAnExitedLaneIsReported) {
  ZT_NEEDS_STRICT();
  std::vector<int> out(32);
  launch(Dim3(1), Dim3(32), [&] { shuffle_after_half_exit(out.data(), 0); });
  EXPECT_EQ(out[5], 5);
  EXPECT_DEATH(launch(Dim3(1), Dim3(32), [&] { shuffle_after_half_exit(out.data(), 16); }),
               "reading lane (1[6-9]|2[0-9]|3[01]), which has exited");
}

__global__ void full_mask_sum(int* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1);
}

TEST(CudaEmuStrictDeathTest, AFullMaskInAPartialWarpIsReported) {
  ZT_NEEDS_STRICT();
  std::vector<int> out(64);
  launch(Dim3(1), Dim3(64), [&] { full_mask_sum(out.data()); });  // whole warps: fine
  EXPECT_DEATH(launch(Dim3(1), Dim3(40), [&] { full_mask_sum(out.data()); }),
               "reading lane 8, which this block's last warp does not have");
}

__global__ void shuffle_from_outside_the_mask(int* out) {
  out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)threadIdx.x, 20);  // lanes 0-15 read lane 20
}

TEST(CudaEmuStrictDeathTest, ASourceLaneOutsideTheMaskIsReported) {
  ZT_NEEDS_STRICT();
  std::vector<int> out(16);
  EXPECT_DEATH(launch(Dim3(1), Dim3(16), [&] { shuffle_from_outside_the_mask(out.data()); }),
               "leaves out the source lane 20");
}

__global__ void touch_dynamic_smem(float* out) {
  float* s = static_cast<float*>(dynamic_shared());
  out[threadIdx.x] = s[threadIdx.x];  // never written: NaN, as garbage on a GPU
}

TEST(CudaEmuStrictDeathTest, DynamicSharedMemoryOver48KiBNeedsTheOptIn) {
  ZT_NEEDS_STRICT();
  std::vector<float> out(32);
  auto body = [&] { touch_dynamic_smem(out.data()); };
  const void* k = reinterpret_cast<const void*>(&touch_dynamic_smem);
  launch(Dim3(1), Dim3(32), body, 48 << 10, k);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_DEATH(launch(Dim3(1), Dim3(32), body, 64 << 10, k), "over 48 KiB needs");
  ASSERT_TRUE(set_max_dynamic_smem(k, 64 << 10));
  launch(Dim3(1), Dim3(32), body, 64 << 10, k);
  EXPECT_FALSE(set_max_dynamic_smem(k, 228 << 10));
}

// The race detector (races.cc; this file's kernels are instrumented as the backend's are).
__global__ void neighbour_in_shared(float* out, bool barrier) {
  __shared__ float s[64];
  s[threadIdx.x] = (float)threadIdx.x;
  if (barrier) __syncthreads();  // the planted bug: without it
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

TEST(CudaEmuStrictDeathTest, ASharedMemoryRaceIsReported) {
  ZT_NEEDS_STRICT();
  float* out = static_cast<float*>(device_alloc(64 * sizeof(float)));
  launch(Dim3(1), Dim3(64), [&] { neighbour_in_shared(out, true); });
  EXPECT_EQ(out[63], 0.f);
  EXPECT_DEATH(launch(Dim3(1), Dim3(64), [&] { neighbour_in_shared(out, false); }),
               "a data race: another thread of the block (wrote|read) this address with no "
               "__syncthreads or __syncwarp between.*block 0 thread [0-9]+ .* in "
               "cuda_emu_test.cc:[0-9]+");
  device_free(out);
}

// A cp.async issued into shared memory another thread still reads, with no barrier between:
// the race double-buffered tiles must avoid (a GPU may land the copy before the read).
__global__ void copy_over_a_read(uint32_t* out, const uint32_t* src, bool barrier) {
  uint32_t* s = static_cast<uint32_t*>(dynamic_shared());  // [64][4]
  for (int w = 0; w < 4; ++w) s[4 * threadIdx.x + w] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[4 * ((threadIdx.x + 1) % 64)];
  if (barrier) __syncthreads();  // the planted bug: without it
  cp_async16(s + 4 * threadIdx.x, src + 4 * threadIdx.x, true);
  cp_async_commit();
  cp_async_wait<0>();
}

TEST(CudaEmuStrictDeathTest, ACopyIntoATileAnotherThreadReadsIsReported) {
  ZT_NEEDS_STRICT();
  auto* out = static_cast<uint32_t*>(device_alloc(64 * sizeof(uint32_t)));
  auto* src = static_cast<uint32_t*>(device_alloc(256 * sizeof(uint32_t)));
  for (int i = 0; i < 256; ++i) src[i] = i;
  launch(
      Dim3(1), Dim3(64), [&] { copy_over_a_read(out, src, true); }, 256 * sizeof(uint32_t));
  EXPECT_EQ(out[63], 0u);
  EXPECT_DEATH(
      launch(
          Dim3(1), Dim3(64), [&] { copy_over_a_read(out, src, false); }, 256 * sizeof(uint32_t)),
      "a data race: another thread of the block read this address with no "
      "__syncthreads or __syncwarp between");
  device_free(src);
  device_free(out);
}

// ldmatrix and cp.async take shared memory, 16-byte aligned rows and pieces, and (ldmatrix)
// every lane of the warp: a global pointer given as shared, a misaligned row, or a lane that
// skips the instruction is undefined on a GPU and stops the emulation.
__global__ void bad_fragment_load(const uint16_t* global, int how) {
  uint16_t* tile = static_cast<uint16_t*>(dynamic_shared());
  uint32_t r[4];
  if (how == 0) ldmatrix_x4<false>(r, global);                          // device memory
  if (how == 1) ldmatrix_x4<false>(r, tile + 4);                        // 8-byte aligned
  if (how == 2 && threadIdx.x < 16) ldmatrix_x4<false>(r, tile);        // half the warp
  if (how == 3) cp_async16(const_cast<uint16_t*>(global), tile, true);  // into device memory
}

TEST(CudaEmuStrictDeathTest, FragmentLoadsAndCopiesOutsideTheirRulesAreReported) {
  ZT_NEEDS_STRICT();
  auto* g = static_cast<uint16_t*>(device_alloc(256 * sizeof(uint16_t)));
  auto run = [&](int how) {
    launch(
        Dim3(1), Dim3(32), [&] { bad_fragment_load(g, how); }, 512);
  };
  EXPECT_DEATH(run(0), "ldmatrix given a row address in device memory");
  EXPECT_DEATH(run(1), "ldmatrix given a row address that is not 16-byte aligned");
  EXPECT_DEATH(run(2), "ldmatrix reached by only some lanes of the warp");
  EXPECT_DEATH(run(3), "cp.async into device memory");
  device_free(g);
}

// Several devices: memory belongs to the device current where it was allocated, and a thread
// whose current device is another may not touch it (a copy or memset's check_range).
TEST(CudaEmuStrictDeathTest, AnotherDevicesMemoryIsRefused) {
  ZT_NEEDS_STRICT();
  set_device_count(2);
  set_current_device(1);
  void* p = device_alloc(256);
  check_range(p, 256, true, "a copy on GPU 1");
  set_current_device(0);
  EXPECT_DEATH(check_range(p, 16, true, "a copy"),
               "a copy: memory of GPU 1 touched by a host thread whose current device is GPU 0");
  set_current_device(1);
  device_free(p);
  set_current_device(0);
  set_device_count(1);
}

__global__ void every_block_writes(int* out) { out[threadIdx.x] = (int)blockIdx.x; }

TEST(CudaEmuStrictDeathTest, TwoBlocksWritingOneAddressAreReported) {
  ZT_NEEDS_STRICT();
  int* out = static_cast<int*>(device_alloc(64 * sizeof(int)));
  launch(Dim3(1), Dim3(64), [&] { every_block_writes(out); });
  EXPECT_DEATH(
      launch(Dim3(2), Dim3(64), [&] { every_block_writes(out); }),
      "two blocks of one launch write the same address.*block 1 thread [0-9]+ writes .* in "
      "cuda_emu_test.cc:[0-9]+");
  device_free(out);
}

__global__ void warp_neighbour(int* out, bool syncwarp) {
  __shared__ int s[32];
  s[threadIdx.x] = (int)threadIdx.x;
  if (syncwarp) __syncwarp();  // the planted bug: warp-synchronous code without it
  out[threadIdx.x] = s[threadIdx.x ^ 1];
}

TEST(CudaEmuStrictDeathTest, WarpSynchronousCodeWithoutSyncwarpIsReported) {
  ZT_NEEDS_STRICT();
  std::vector<int> out(32);
  launch(Dim3(1), Dim3(32), [&] { warp_neighbour(out.data(), true); });
  for (int t = 0; t < 32; ++t) EXPECT_EQ(out[t], t ^ 1);
  EXPECT_DEATH(launch(Dim3(1), Dim3(32), [&] { warp_neighbour(out.data(), false); }),
               "a data race: another thread of the block");
}

// The interleaving on its own, with the detector (which would stop at this race first) off: a
// planted lost update. Threads that switch only at barriers run each load-add-store whole and
// always count 32; giving way at memory operations loses increments, as a GPU does.
__global__ void count_without_atomics(int* total) { *total = *total + 1; }

TEST(CudaEmuStrictDeathTest, InterleavingExposesALostUpdate) {
  ZT_NEEDS_STRICT();
  set_race_detection(false);
  int* total = static_cast<int*>(device_alloc(sizeof(int)));
  int short_counts = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    set_thread_order(ThreadOrder::kForward, seed);
    *total = 0;
    launch(Dim3(1), Dim3(32), [&] { count_without_atomics(total); });
    short_counts += *total < 32;
  }
  set_thread_order(ThreadOrder::kForward);
  set_race_detection(true);
  device_free(total);
  EXPECT_GT(short_counts, 0) << "no seed lost an update";
}

// Threads give way at memory operations too, not only at barriers, by the launch's seed: a
// correct kernel's result does not change.
TEST(CudaEmuStrictDeathTest, ThreadsInterleaveAtMemoryOperations) {
  ZT_NEEDS_STRICT();
  std::vector<float> out(64);
  const uint64_t before = memory_yields();
  for (uint64_t seed : {1, 2, 3}) {
    set_thread_order(ThreadOrder::kForward, seed);
    launch(Dim3(1), Dim3(64), [&] { neighbour_in_shared(out.data(), true); });
    for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], (float)((t + 1) % 64)) << seed;
  }
  set_thread_order(ThreadOrder::kForward);
  EXPECT_GT(memory_yields() - before, 3 * 64u / 8) << "about one access in four gives way";
}

TEST(CudaEmuDeathTest, LaunchesOverSm90sLimitsAreReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto nothing = [] {};
  EXPECT_DEATH(launch(Dim3(1, 65536), Dim3(1), nothing), "a grid of 1 x 65536 x 1 blocks");
  EXPECT_DEATH(launch(Dim3(1), Dim3(1, 1, 65), nothing), "a block of 1 x 1 x 65 threads");
  EXPECT_DEATH(launch(Dim3(1), Dim3(1025), nothing), "a block of 1025 x 1 x 1 threads");
  EXPECT_DEATH(launch(Dim3(1), Dim3(32), nothing, 228 << 10, nullptr), "at most 227 KiB");
}

}  // namespace
}  // namespace zt::emu

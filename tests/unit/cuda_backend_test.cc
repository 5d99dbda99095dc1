// Reference: the CPU backend (itself checked against PyTorch and finite differences). Each CUDA
// kernel runs on awkward sizes (not multiples of 32) and must match the CPU result. Skipped,
// saying why, when the build has no CUDA or the machine has no GPU.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/backend.h"
#include "model/init.h"
#include "model/quantize.h"
#include "model/transformer.h"
#include "zero/engine.h"
#ifdef ZT_HAVE_CUDA
#include "model/cuda/cuda_backend.h"
#include "tests/unit/nan_max.h"
#endif
#ifdef ZT_CUDA_EMU
#include <cublasLt.h>      // the emulation's: zt::emu::cublaslt_heuristic_calls
#include <cuda_runtime.h>  // the emulation's: zt::emu::cuda_malloc_calls
#endif

namespace zt {
namespace {

#ifndef ZT_HAVE_CUDA
TEST(CudaBackend, MatchesCpu) { GTEST_SKIP() << "built without CUDA (nvcc not found)"; }
#else

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
    auto g = make_cuda_backend(0);
    ASSERT_TRUE(g.ok()) << g.status();
    gpu_ = std::move(*g);
    cpu_ = make_cpu_backend();
  }
  // A tensor with the same random contents on both backends.
  struct Pair {
    DeviceBuffer c, g;
    size_t n;
    float* cp() { return c.f32(); }
    float* gp() { return g.f32(); }
  };
  Pair make(size_t n, float scale = 1.f, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> h(n);
    for (float& x : h) x = d(rng);
    Pair p{DeviceBuffer(cpu_.get(), n * 4, MemCategory::kWorkspace),
           DeviceBuffer(gpu_.get(), n * 4, MemCategory::kWorkspace), n};
    cpu_->copy_to_device(p.c.data(), h.data(), n * 4);
    gpu_->copy_to_device(p.g.data(), h.data(), n * 4);
    return p;
  }
  Pair zeros(size_t n) { return make(n, 0.f); }
  // p's values rounded to t on the CPU backend's copy only (still stored as fp32).
  void round_on_cpu(Pair& p, DType t) {
    std::vector<float> h(p.n);
    std::vector<uint16_t> h16(p.n);
    cpu_->copy_to_host(h.data(), p.cp(), p.n * 4);
    convert(h.data(), DType::kF32, h16.data(), t, p.n);
    convert(h16.data(), t, h.data(), DType::kF32, p.n);
    cpu_->copy_to_device(p.cp(), h.data(), p.n * 4);
  }
  void expect_close(Pair& p, double tol, const char* what) {
    std::vector<float> a(p.n), b(p.n);
    cpu_->copy_to_host(a.data(), p.c.data(), p.n * 4);
    gpu_->copy_to_host(b.data(), p.g.data(), p.n * 4);
    double worst = 0, maxref = 0;
    for (size_t i = 0; i < p.n; ++i) {
      worst = nan_max(worst, (double)std::fabs(a[i] - b[i]));
      maxref = std::max(maxref, (double)std::fabs(a[i]));
    }
    EXPECT_LE(worst, tol * std::max(1.0, maxref)) << what;
  }
  // A tensor of values exact in dtype t: fp32 on the CPU backend, t on the CUDA backend (its
  // activations in a 16-bit working dtype, Backend::activation_dtype; or fp32).
  struct Typed {
    DeviceBuffer c, g;
    size_t n;
    DType t;
    TensorRef cp() { return c.f32(); }
    TensorRef gp() { return {g.data(), t}; }
  };
  Typed make_typed(size_t n, DType t, float scale = 1.f, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> h(n);
    for (float& x : h) x = d(rng);
    std::vector<char> ht(n * dtype_size(t));
    convert(h.data(), DType::kF32, ht.data(), t, n);
    convert(ht.data(), t, h.data(), DType::kF32, n);  // the values t can hold
    Typed p{DeviceBuffer(cpu_.get(), n * 4, MemCategory::kWorkspace),
            DeviceBuffer(gpu_.get(), ht.size(), MemCategory::kWorkspace), n, t};
    cpu_->copy_to_device(p.c.data(), h.data(), n * 4);
    gpu_->copy_to_device(p.g.data(), ht.data(), ht.size());
    return p;
  }
  Typed zeros_typed(size_t n, DType t) { return make_typed(n, t, 0.f); }
  // z's (N, V) values as the CUDA backend keeps the classifier's logits: rows of ld in z.t, and
  // 1e4 (a value that would win any softmax) in every padding column. The bytes, for the device.
  std::vector<char> padded_logits(Typed& z, int N, int V, int ld) {
    std::vector<float> h((size_t)N * V);
    cpu_->copy_to_host(h.data(), z.c.data(), h.size() * 4);
    std::vector<float> padded((size_t)N * ld, 1e4f);
    for (int n = 0; n < N; ++n) std::copy_n(&h[(size_t)n * V], V, &padded[(size_t)n * ld]);
    std::vector<char> bytes(padded.size() * dtype_size(z.t));
    convert(padded.data(), DType::kF32, bytes.data(), z.t, padded.size());
    return bytes;
  }
  // n bf16 elements on each backend: a gradient the optimizers read, or the working copy they
  // write.
  struct Bf16Pair {
    DeviceBuffer c, g;
  };
  Bf16Pair bf16_pair(size_t n) {
    return {DeviceBuffer(cpu_.get(), n * 2, MemCategory::kWorkspace),
            DeviceBuffer(gpu_.get(), n * 2, MemCategory::kWorkspace)};
  }
  // b = y rounded to bf16, on each backend.
  void set_bf16(Bf16Pair& b, Pair& y) {
    cpu_->convert(y.cp(), DType::kF32, b.c.data(), DType::kBF16, y.n);
    gpu_->convert(y.gp(), DType::kF32, b.g.data(), DType::kBF16, y.n);
  }
  // The CUDA result, stored in t, against the CPU's fp32: within tol of the largest magnitude.
  void expect_close(Typed& p, double tol, const std::string& what) {
    std::vector<float> a(p.n), b(p.n);
    std::vector<char> bt(p.n * dtype_size(p.t));
    cpu_->copy_to_host(a.data(), p.c.data(), p.n * 4);
    gpu_->copy_to_host(bt.data(), p.g.data(), bt.size());
    convert(bt.data(), p.t, b.data(), DType::kF32, p.n);
    double worst = 0, maxref = 0;
    for (size_t i = 0; i < p.n; ++i) {
      worst = nan_max(worst, (double)std::fabs(a[i] - b[i]));
      maxref = std::max(maxref, (double)std::fabs(a[i]));
    }
    EXPECT_LE(worst, tol * std::max(1.0, maxref)) << what << " (" << dtype_name(p.t) << ")";
    EXPECT_GT(maxref, 0.0) << what << ": nothing was written";
  }
  // Causal GQA attention of dtype t on gpu_ against the CPU's fp32 on the same exactly
  // representable inputs: forward (out within tol, lse within lse_tol), backward from the GPU's
  // rounded out (within tol), and the backward twice: the same bits.
  // positions: packed rows (Backend::attention_forward's pos), B x T, or empty.
  void expect_attention_matches_cpu(DType t, int T, int hd, int group, double tol, double lse_tol,
                                    const std::string& what,
                                    const std::vector<int>& positions = {}) {
    const int B = !positions.empty() ? (int)(positions.size() / T)
                  : T > 100          ? 1
                                     : 2,
              NH = 8, KVH = NH / group, row = (NH + 2 * KVH) * hd;
    DeviceBuffer cpu_pos, gpu_pos;
    const int *cp = nullptr, *gp = nullptr;
    if (!positions.empty()) {
      const size_t bytes = positions.size() * sizeof(int);
      EXPECT_EQ(positions.size(), (size_t)B * T);
      cpu_pos = DeviceBuffer(cpu_.get(), bytes, MemCategory::kWorkspace);
      gpu_pos = DeviceBuffer(gpu_.get(), bytes, MemCategory::kWorkspace);
      cpu_->copy_to_device(cpu_pos.data(), positions.data(), bytes);
      gpu_->copy_to_device(gpu_pos.data(), positions.data(), bytes);
      cp = static_cast<const int*>(cpu_pos.data()), gp = static_cast<const int*>(gpu_pos.data());
    }
    auto qkv = make_typed((size_t)B * T * row, t, 1, T + hd),
         out = zeros_typed((size_t)B * T * NH * hd, t),
         dout = make_typed((size_t)B * T * NH * hd, t, 1, 2),
         dqkv = zeros_typed((size_t)B * T * row, t), again = zeros_typed((size_t)B * T * row, t);
    auto lse = zeros((size_t)B * NH * T);
    cpu_->attention_forward(out.cp(), lse.cp(), qkv.cp(), B, T, NH, KVH, hd, cp);
    gpu_->attention_forward(out.gp(), lse.gp(), qkv.gp(), B, T, NH, KVH, hd, gp);
    expect_close(out, tol, "attention forward, " + what);
    expect_close(lse, lse_tol, ("attention lse, " + what).c_str());
    // The backward reads out as each backend stored it: the CPU gets the GPU's rounding.
    std::vector<char> ht(out.n * dtype_size(t));
    std::vector<float> h(out.n);
    gpu_->copy_to_host(ht.data(), out.g.data(), ht.size());
    convert(ht.data(), t, h.data(), DType::kF32, out.n);
    cpu_->copy_to_device(out.c.data(), h.data(), out.n * 4);
    cpu_->attention_backward(dqkv.cp(), dout.cp(), qkv.cp(), out.cp(), lse.cp(), B, T, NH, KVH, hd,
                             cp);
    gpu_->attention_backward(dqkv.gp(), dout.gp(), qkv.gp(), out.gp(), lse.gp(), B, T, NH, KVH, hd,
                             gp);
    gpu_->attention_backward(again.gp(), dout.gp(), qkv.gp(), out.gp(), lse.gp(), B, T, NH, KVH, hd,
                             gp);
    expect_close(dqkv, tol, "attention backward, " + what);
    std::vector<char> a(dqkv.n * dtype_size(t)), b(a.size());
    gpu_->copy_to_host(a.data(), dqkv.g.data(), a.size());
    gpu_->copy_to_host(b.data(), again.g.data(), b.size());
    EXPECT_EQ(a, b) << "backward not bitwise repeatable, " << what;
  }
  std::unique_ptr<Backend> cpu_, gpu_;
};

// The caching allocator: a freed block comes back for the next allocation of its size, the
// tracker counts only live bytes, and the device-memory limit still applies.
TEST_F(CudaVsCpu, FreedBlocksAreReusedAndStillAccounted) {
  const size_t before = gpu_->tracker().current_total();
  void* first = nullptr;
  {
    DeviceBuffer a(gpu_.get(), 1000, MemCategory::kWorkspace);
    first = a.data();
    EXPECT_EQ(gpu_->tracker().current_total(), before + 1000);
  }
  EXPECT_EQ(gpu_->tracker().current_total(), before);
  DeviceBuffer b(gpu_.get(), 1000, MemCategory::kActivations);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(gpu_->tracker().current(MemCategory::kActivations), 1000u);
#ifdef ZT_CUDA_EMU
  const long long mallocs = emu::cuda_malloc_calls();
  for (int i = 0; i < 10; ++i) DeviceBuffer c(gpu_.get(), 4096, MemCategory::kWorkspace);
  EXPECT_LE(emu::cuda_malloc_calls() - mallocs, 1) << "each free went to cudaFree";
#endif
  gpu_->set_memory_limit(gpu_->tracker().current_total() + 500);
  EXPECT_THROW(DeviceBuffer(gpu_.get(), 1000, MemCategory::kWorkspace), DeviceMemoryLimitExceeded);
  gpu_->set_memory_limit(0);
}

#ifdef ZT_CUDA_EMU
// The strict emulation (ZT_CUDA_EMU_STRICT=1, as ctest runs this binary): a reused block holds
// NaN as a fresh one does, and a copy that leaves its allocation, or whose direction is not its
// pointers', stops the program saying which.
TEST_F(CudaVsCpu, StrictEmulationPoisonsReusedBlocksAndChecksCopies) {
  if (!emu::strict_enabled()) GTEST_SKIP() << "ZT_CUDA_EMU_STRICT is not 1";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> h(257, 1.f);  // cudaMalloc(1024): the backend rounds to 256 bytes
  void* first = nullptr;
  {
    DeviceBuffer a(gpu_.get(), 1000, MemCategory::kWorkspace);
    gpu_->copy_to_device(a.data(), h.data(), 1000);
    first = a.data();
  }
  DeviceBuffer b(gpu_.get(), 1000, MemCategory::kWorkspace);
  ASSERT_EQ(b.data(), first);
  gpu_->copy_to_host(h.data(), b.data(), 1000);
  for (int i = 0; i < 250; ++i) ASSERT_TRUE(std::isnan(h[i])) << i;
  void* d = b.data();
  EXPECT_DEATH(cudaMemcpyAsync(d, h.data(), 1028, cudaMemcpyHostToDevice),
               "1028 bytes at offset 0 run past the end of a 1024-byte device allocation");
  EXPECT_DEATH(cudaMemcpyAsync(h.data(), h.data() + 100, 16, cudaMemcpyHostToDevice),
               "destination: .* is not in any device allocation");
  EXPECT_DEATH(cudaMemcpyAsync(d, h.data(), 16, cudaMemcpyDeviceToHost),
               "destination: the host range .* is device memory");
  EXPECT_DEATH(cudaMemsetAsync(static_cast<char*>(d) + 1020, 0, 8), "cudaMemsetAsync: 8 bytes");
}
#endif

// The copy stream: a host -> device copy is seen by the kernels queued after it without a
// host wait, a device -> host copy reads what the kernels before it wrote, and pinning host
// memory round-trips. (In the emulation the copies wait in a queue until something waits for
// them, so each ordering below is really exercised.)
TEST_F(CudaVsCpu, AsyncCopiesAreOrderedAgainstKernels) {
  const size_t n = 1000;
  std::vector<float> a(n), b(n, -1.f), y0(n), ones(n, 1.f);
  for (size_t i = 0; i < n; ++i) a[i] = (float)i, y0[i] = 0.5f * (float)i;
  DeviceBuffer x(gpu_.get(), n * 4, MemCategory::kWorkspace),
      y(gpu_.get(), n * 4, MemCategory::kWorkspace), one(gpu_.get(), n * 4, MemCategory::kWorkspace);
  gpu_->copy_to_device(y.data(), y0.data(), n * 4);
  gpu_->copy_to_device(one.data(), ones.data(), n * 4);
  ASSERT_TRUE(gpu_->pin_host(a.data(), n * 4));  // need not be whole pages for the test
  const uint64_t in = gpu_->copy_to_device_async(x.data(), a.data(), n * 4);
  gpu_->add_inplace(y.f32(), x.f32(), n);  // y = y0 + a, no host wait in between
  gpu_->add_inplace(x.f32(), one.f32(), n);  // x = a + 1
  const uint64_t out = gpu_->copy_to_host_async(b.data(), x.data(), n * 4);
  EXPECT_GT(out, in) << "tickets grow in queue order";
#ifdef ZT_CUDA_EMU
  EXPECT_EQ(b[1], -1.f) << "the emulation runs a queued copy only when it is waited for";
#endif
  gpu_->wait_copy(out);
  std::vector<float> hy(n);
  gpu_->copy_to_host(hy.data(), y.data(), n * 4);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(hy[i], y0[i] + a[i]) << "kernel after the host -> device copy, element " << i;
    ASSERT_EQ(b[i], a[i] + 1.f) << "device -> host copy after the kernel, element " << i;
  }
  gpu_->unpin_host(a.data(), n * 4);
}

// An unjoined host -> device copy (the delayed update's weights, each joined by its unit's
// forward) is seen by the kernels queued after its join_copy, with no host wait; a join covers
// the copies queued before it too. (In the emulation the copies wait until something waits for
// them, so a kernel queued before the join runs without the data, which a GPU does not
// promise either way.)
TEST_F(CudaVsCpu, UnjoinedCopyIsSeenFromItsJoinOn) {
  const size_t n = 1000;
  std::vector<float> a(n), b(n), zero(n, 0.f);
  for (size_t i = 0; i < n; ++i) a[i] = (float)i, b[i] = 0.25f * (float)i;
  DeviceBuffer x1(gpu_.get(), n * 4, MemCategory::kWorkspace),
      x2(gpu_.get(), n * 4, MemCategory::kWorkspace),
      early(gpu_.get(), n * 4, MemCategory::kWorkspace),
      late(gpu_.get(), n * 4, MemCategory::kWorkspace);
  for (const DeviceBuffer* d : {&x1, &x2, &early, &late})
    gpu_->copy_to_device(d->data(), zero.data(), n * 4);
  ASSERT_TRUE(gpu_->pin_host(a.data(), n * 4));
  ASSERT_TRUE(gpu_->pin_host(b.data(), n * 4));
  const uint64_t first = gpu_->copy_to_device_unjoined(x1.data(), a.data(), n * 4);
  const uint64_t second = gpu_->copy_to_device_unjoined(x2.data(), b.data(), n * 4);
  EXPECT_GT(second, first);
#ifdef ZT_CUDA_EMU
  gpu_->add_inplace(early.f32(), x1.f32(), n);  // before any join: does not wait for the copy
  std::vector<float> he(n);
  gpu_->copy_to_host(he.data(), early.data(), n * 4);
  EXPECT_EQ(he, zero) << "a kernel before the join waited for the unjoined copy";
#endif
  gpu_->join_copy(second);  // the first copy too
  gpu_->add_inplace(late.f32(), x1.f32(), n);
  gpu_->add_inplace(late.f32(), x2.f32(), n);
  std::vector<float> hl(n);
  gpu_->copy_to_host(hl.data(), late.data(), n * 4);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hl[i], a[i] + b[i]) << "element " << i;
  gpu_->join_copy(first);  // done and joined already: nothing to wait for
  gpu_->wait_copy(second);
  gpu_->unpin_host(a.data(), n * 4);
  gpu_->unpin_host(b.data(), n * 4);
}

// A node of several GPUs: rank k's backend is GPU k's, and its other host threads (the delayed
// update's worker queues copies; pinning) start on GPU 0, the CUDA runtime's default. Used from
// such a thread, the backend of GPU 1 allocates, pins, copies and waits on GPU 1. (The
// emulation is made two devices here; in its strict mode a thread touching memory of a device
// other than its current one aborts, so without the backend setting the thread's device this
// test dies. On a real machine it needs two GPUs.)
TEST(CudaBackend, AnotherHostThreadWorksOnTheBackendsGpu) {
#ifdef ZT_CUDA_EMU
  emu::set_device_count(2);
  struct Restore {
    ~Restore() {
      emu::set_device_count(1);
      emu::set_current_device(0);
    }
  } restore;
  if (!emu::strict_enabled()) GTEST_SKIP() << "ZT_CUDA_EMU_STRICT is not 1 (ctest sets it)";
#endif
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs (the emulation makes two)";
  auto made = make_cuda_backend(1);
  ASSERT_TRUE(made.ok()) << made.status();
  Backend* be = made->get();
  const size_t n = 1000;
  DeviceBuffer x(be, n * 4, MemCategory::kWorkspace);  // on GPU 1, from this thread
  std::vector<float> a(n), back(n, -1.f);
  for (size_t i = 0; i < n; ++i) a[i] = 0.5f * (float)i;
  std::thread worker([&] {
    DeviceBuffer y(be, n * 4, MemCategory::kWorkspace);
    const bool pinned = be->pin_host(a.data(), n * 4);
    be->zero(x.data(), n * 4);
    be->wait_copy(be->copy_to_device_async(y.data(), a.data(), n * 4));
    be->copy(x.data(), y.data(), n * 4);
    be->wait_copy(be->copy_to_host_async(back.data(), x.data(), n * 4));
    if (pinned) be->unpin_host(a.data(), n * 4);
  });
  worker.join();
  EXPECT_EQ(back, a);
#ifdef ZT_CUDA_EMU
  // A kernel launched from a thread on another device: a GPU refuses it, the emulation aborts.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(std::thread([&] {
                 emu::set_current_device(0);
                 be->add_inplace(x.f32(), x.f32(), n);
               }).join(),
               "a launch on a stream of GPU 1 from a host thread whose current device is GPU 0");
#endif
}

// Each direction has its own copy stream (a GPU's two copy engines at once), and waiting for a
// ticket waits for every copy queued before it on every copy stream. (In the emulation a queued
// copy runs only when waited for, so a wait that covered one direction would leave the other's
// destination untouched here.)
TEST_F(CudaVsCpu, WaitingForACopyWaitsForEarlierCopiesInBothDirections) {
  const size_t n = 1000;
  std::vector<float> a(n), out(n, -1.f), back(n, -1.f);
  for (size_t i = 0; i < n; ++i) a[i] = (float)i;
  DeviceBuffer x(gpu_.get(), n * 4, MemCategory::kWorkspace),
      y(gpu_.get(), n * 4, MemCategory::kWorkspace);
  gpu_->copy_to_device(x.data(), a.data(), n * 4);
  const uint64_t first = gpu_->copy_to_host_async(out.data(), x.data(), n * 4);
  const uint64_t second = gpu_->copy_to_device_async(y.data(), a.data(), n * 4);
  EXPECT_GT(second, first);
  gpu_->wait_copy(second);
  EXPECT_EQ(out, a) << "the earlier device -> host copy was not waited for";
  const uint64_t third = gpu_->copy_to_host_async(back.data(), y.data(), n * 4);
  gpu_->wait_copy(third);
  EXPECT_EQ(back, a) << "a device -> host copy after a host -> device one reads its data";
}

TEST_F(CudaVsCpu, Matmul) {
  const int N = 37, C = 45, OC = 71;
  auto out = zeros((size_t)N * OC), inp = make((size_t)N * C), w = make((size_t)OC * C, 1, 2),
       b = make(OC, 1, 3), dinp = zeros((size_t)N * C), dw = zeros((size_t)OC * C), db = zeros(OC),
       dout = make((size_t)N * OC, 1, 4);
  cpu_->matmul_forward(out.cp(), inp.cp(), w.cp(), b.cp(), N, C, OC);
  gpu_->matmul_forward(out.gp(), inp.gp(), w.gp(), b.gp(), N, C, OC);
  expect_close(out, 1e-5, "matmul forward");
  cpu_->matmul_backward(dinp.cp(), dw.cp(), db.cp(), dout.cp(), inp.cp(), w.cp(), N, C, OC);
  gpu_->matmul_backward(dinp.gp(), dw.gp(), db.gp(), dout.gp(), inp.gp(), w.gp(), N, C, OC);
  expect_close(dinp, 1e-5, "matmul dinp");
  expect_close(dw, 1e-5, "matmul dweight");
  expect_close(db, 1e-5, "matmul dbias");
}

// The classifier's shapes: an odd vocabulary (OC 71) with logits rows padded to ld 72 and a
// width of whole 16-byte rows. The logits GEMM's n and the dX GEMM's k are off a multiple of 4
// floats: each runs as an aligned GEMM and a remainder GEMM (matmul.cu), against the CPU's one
// product.
TEST_F(CudaVsCpu, MatmulWithAnOddVocabularyRunsAsAlignedAndRemainderGemms) {
  const int N = 37, C = 64, OC = 71, ld = 72;
  auto out = zeros((size_t)N * ld), inp = make((size_t)N * C), w = make((size_t)OC * C, 1, 2),
       b = make(OC, 1, 3), dinp = zeros((size_t)N * C), dw = zeros((size_t)OC * C),
       dout = make((size_t)N * ld, 1, 4);
  cpu_->matmul_forward(out.cp(), inp.cp(), w.cp(), b.cp(), N, C, OC, ld);
  gpu_->matmul_forward(out.gp(), inp.gp(), w.gp(), b.gp(), N, C, OC, ld);
  expect_close(out, 1e-5, "logits forward, padded rows");
  cpu_->matmul_backward(dinp.cp(), dw.cp(), nullptr, dout.cp(), inp.cp(), w.cp(), N, C, OC, ld);
  gpu_->matmul_backward(dinp.gp(), dw.gp(), nullptr, dout.gp(), inp.gp(), w.gp(), N, C, OC, ld);
  expect_close(dinp, 1e-5, "dinp over an odd k");
  expect_close(dw, 1e-5, "dweight");
}

// 16-bit weights as stored (UnitEngine::fetch_stored): a GPU's GEMM rounds its fp32 other
// operand to the weight's dtype (as its 16-bit activations are), the CPU widens the weight and
// keeps its fp32 activations as given, so the CPU gets the activations already rounded. Both
// accumulate in fp32, the norms widen their weights; both backends agree, and differ from the
// fp32 weights' result by the weights' rounding. N, C and OC are odd.
TEST_F(CudaVsCpu, SixteenBitWeightsInMatmulAndNorms) {
  const int N = 37, C = 45, OC = 71;
  for (DType t : {DType::kBF16, DType::kF16}) {
    const char* name = t == DType::kBF16 ? "bf16" : "fp16";
    auto out = zeros((size_t)N * OC), inp = make((size_t)N * C), w = make((size_t)OC * C, 1, 2),
         b = make(OC, 1, 3), dinp = zeros((size_t)N * C), dw = zeros((size_t)OC * C),
         dout = make((size_t)N * OC, 1, 4), exact = zeros((size_t)N * OC);
    round_on_cpu(inp, t);
    round_on_cpu(dout, t);
    DeviceBuffer wc(cpu_.get(), w.n * 2, MemCategory::kWorkspace),
        wg(gpu_.get(), w.n * 2, MemCategory::kWorkspace);
    cpu_->convert(w.cp(), DType::kF32, wc.data(), t, w.n);
    gpu_->convert(w.gp(), DType::kF32, wg.data(), t, w.n);
    const TensorView w16c(wc.data(), t), w16g(wg.data(), t);
    cpu_->matmul_forward(out.cp(), inp.cp(), w16c, b.cp(), N, C, OC);
    gpu_->matmul_forward(out.gp(), inp.gp(), w16g, b.gp(), N, C, OC);
    expect_close(out, 1e-5, (std::string(name) + " matmul forward").c_str());
    cpu_->matmul_forward(exact.cp(), inp.cp(), w.cp(), b.cp(), N, C, OC);
    std::vector<float> a(out.n), e(out.n);
    cpu_->copy_to_host(a.data(), out.cp(), out.n * 4);
    cpu_->copy_to_host(e.data(), exact.cp(), out.n * 4);
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = nan_max(diff, (double)std::fabs(a[i] - e[i]));
    EXPECT_GT(diff, 1e-4) << name << ": the operands were not rounded";
    EXPECT_LT(diff, 0.5) << name;
    cpu_->matmul_backward(dinp.cp(), dw.cp(), nullptr, dout.cp(), inp.cp(), w16c, N, C, OC);
    gpu_->matmul_backward(dinp.gp(), dw.gp(), nullptr, dout.gp(), inp.gp(), w16g, N, C, OC);
    expect_close(dinp, 1e-5, (std::string(name) + " matmul dinp").c_str());
    expect_close(dw, 1e-5, (std::string(name) + " matmul dweight").c_str());
    // The norms take fp32 inputs on both backends, unrounded.
    auto x = make((size_t)N * C, 1, 7), dy = make((size_t)N * C, 1, 8), y = zeros((size_t)N * C),
         mean = zeros(N), rstd = zeros(N), dx = zeros((size_t)N * C), dnw = zeros(C),
         nb = make(C, 1, 5), nw = make(C, 1, 6);
    DeviceBuffer nwc(cpu_.get(), C * 2, MemCategory::kWorkspace),
        nwg(gpu_.get(), C * 2, MemCategory::kWorkspace);
    cpu_->convert(nw.cp(), DType::kF32, nwc.data(), t, C);
    gpu_->convert(nw.gp(), DType::kF32, nwg.data(), t, C);
    cpu_->layernorm_forward(y.cp(), mean.cp(), rstd.cp(), x.cp(), TensorView(nwc.data(), t),
                            nb.cp(), N, C, 1e-5f);
    gpu_->layernorm_forward(y.gp(), mean.gp(), rstd.gp(), x.gp(), TensorView(nwg.data(), t),
                            nb.gp(), N, C, 1e-5f);
    expect_close(y, 1e-5, (std::string(name) + " layernorm").c_str());
    cpu_->rmsnorm_forward(y.cp(), rstd.cp(), x.cp(), TensorView(nwc.data(), t), N, C, 1e-5f);
    gpu_->rmsnorm_forward(y.gp(), rstd.gp(), x.gp(), TensorView(nwg.data(), t), N, C, 1e-5f);
    expect_close(y, 1e-5, (std::string(name) + " rmsnorm").c_str());
    cpu_->rmsnorm_backward(dx.cp(), dnw.cp(), dy.cp(), x.cp(), TensorView(nwc.data(), t), rstd.cp(),
                           N, C);
    gpu_->rmsnorm_backward(dx.gp(), dnw.gp(), dy.gp(), x.gp(), TensorView(nwg.data(), t), rstd.gp(),
                           N, C);
    expect_close(dx, 1e-5, (std::string(name) + " rmsnorm dx").c_str());
    expect_close(dnw, 1e-5, (std::string(name) + " rmsnorm dw").c_str());
  }
}

// Tensors inside a unit start at arbitrary float offsets: GEMM must not assume 256-byte alignment.
TEST_F(CudaVsCpu, MatmulOnInteriorPointers) {
  const int N = 9, C = 16, OC = 33;
  auto out = zeros((size_t)N * OC + 1), inp = make((size_t)N * C + 1),
       w = make((size_t)OC * C + 1, 1, 2);
  cpu_->matmul_forward(out.cp() + 1, inp.cp() + 1, w.cp() + 1, nullptr, N, C, OC);
  gpu_->matmul_forward(out.gp() + 1, inp.gp() + 1, w.gp() + 1, nullptr, N, C, OC);
  expect_close(out, 1e-5, "matmul forward, offset operands");
  // A bias inside a unit: 4 bytes off a 16-byte boundary (added by a kernel; the emulated
  // cuBLASLt refuses it, as a GPU kernel may), and on one (cuBLASLt's bias epilogue).
  auto b = make((size_t)OC + 4, 1, 3);
  for (int off : {1, 4}) {
    cpu_->matmul_forward(out.cp() + 1, inp.cp() + 1, w.cp() + 1, b.cp() + off, N, C, OC);
    gpu_->matmul_forward(out.gp() + 1, inp.gp() + 1, w.gp() + 1, b.gp() + off, N, C, OC);
    expect_close(
        out, 1e-5,
        ("matmul forward, bias " + std::to_string(off * 4) + " bytes into its buffer").c_str());
  }
}

// cuBLASLt's descriptors and algorithm are chosen once per configuration: a second run of the
// same GEMMs asks the heuristic nothing. 16-bit operands 2 bytes off a 4-byte boundary (rows of
// an odd length, as an unpadded vocabulary's) find no algorithm in the emulated heuristic, as
// on a GPU they may: the product runs on aligned, padded copies, accumulating (beta 1) into C.
TEST_F(CudaVsCpu, GemmPlansAreMadeOnceAndOddOffsetsRunOnAlignedCopies) {
  const DType t = DType::kBF16;
  const int N = 9, C = 17, OC = 33;
  auto inp = make_typed((size_t)N * C + 1, t), w = make_typed((size_t)OC * C + 1, t, 1, 2),
       out = zeros_typed((size_t)N * OC + 1, t), dout = make_typed((size_t)N * OC + 1, t, 1, 4),
       dinp = make_typed((size_t)N * C + 1, t, 1, 5);
  auto dw = make((size_t)OC * C, 1, 6);
  auto run = [&] {
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      const bool c = be == cpu_.get();
      auto p = [c](Typed& x) { return c ? TensorRef(x.cp()) + 1 : TensorRef(x.gp()) + 1; };
      be->matmul_forward(p(out), p(inp), p(w), nullptr, N, C, OC);
      be->matmul_backward(p(dinp), c ? dw.cp() : dw.gp(), nullptr, p(dout), p(inp), p(w), N, C, OC);
    }
  };
#ifdef ZT_CUDA_EMU
  const long long before = emu::cublaslt_heuristic_calls();
  run();
  const long long first = emu::cublaslt_heuristic_calls() - before;
  EXPECT_GT(first, 0);
  run();
  EXPECT_EQ(emu::cublaslt_heuristic_calls() - before, first) << "a plan was made again";
#else
  run();
  run();
#endif
  expect_close(out, 8e-3, "forward on operands 2 bytes into their buffers");
  expect_close(dinp, 8e-3, "dinp accumulated twice on offset operands");
  expect_close(dw, 1e-5, "dweight accumulated twice on offset operands");
}

TEST_F(CudaVsCpu, NormsForwardBackward) {
  const int N = 29, C = 67;
  auto x = make((size_t)N * C), w = make(C, 1, 2), b = make(C, 1, 3),
       dy = make((size_t)N * C, 1, 4);
  auto y = zeros((size_t)N * C), mean = zeros(N), rstd = zeros(N), dx = zeros((size_t)N * C),
       dw = zeros(C), db = zeros(C);
  cpu_->layernorm_forward(y.cp(), mean.cp(), rstd.cp(), x.cp(), w.cp(), b.cp(), N, C, 1e-5f);
  gpu_->layernorm_forward(y.gp(), mean.gp(), rstd.gp(), x.gp(), w.gp(), b.gp(), N, C, 1e-5f);
  expect_close(y, 1e-5, "layernorm forward");
  cpu_->layernorm_backward(dx.cp(), dw.cp(), db.cp(), dy.cp(), x.cp(), w.cp(), mean.cp(), rstd.cp(),
                           N, C);
  gpu_->layernorm_backward(dx.gp(), dw.gp(), db.gp(), dy.gp(), x.gp(), w.gp(), mean.gp(), rstd.gp(),
                           N, C);
  expect_close(dx, 1e-5, "layernorm dx");
  expect_close(dw, 1e-5, "layernorm dw");
  expect_close(db, 1e-5, "layernorm db");
  auto y2 = zeros((size_t)N * C), r2 = zeros(N), dx2 = zeros((size_t)N * C), dw2 = zeros(C);
  cpu_->rmsnorm_forward(y2.cp(), r2.cp(), x.cp(), w.cp(), N, C, 1e-5f);
  gpu_->rmsnorm_forward(y2.gp(), r2.gp(), x.gp(), w.gp(), N, C, 1e-5f);
  expect_close(y2, 1e-5, "rmsnorm forward");
  cpu_->rmsnorm_backward(dx2.cp(), dw2.cp(), dy.cp(), x.cp(), w.cp(), r2.cp(), N, C);
  gpu_->rmsnorm_backward(dx2.gp(), dw2.gp(), dy.gp(), x.gp(), w.gp(), r2.gp(), N, C);
  expect_close(dx2, 1e-5, "rmsnorm dx");
  expect_close(dw2, 1e-5, "rmsnorm dw");
}

// The norms' backward takes dx and the parameter gradients' partials in one pass over tiles of
// 32 rows (4 warps, norm_backward.cuh): rows fewer than a warp's share, not a multiple of the
// tile, and widths from 67 to 4100 (64-131 KB of shared memory, past the 48 KiB default), 8000
// (LayerNorm's two rows a warp past a block's shared memory, RMSNorm's one not) and 15000 (both
// past it: dx alone, then the gradients' two passes). dx, dw and db are added to what they
// held. Into zeros twice: the same bits.
TEST_F(CudaVsCpu, NormBackwardsOverTilesMatchTheCpu) {
  for (auto [N, C] : {std::pair{3, 67}, std::pair{33, 200}, std::pair{37, 4100}, std::pair{3, 8000},
                      std::pair{3, 15000}}) {
    for (bool layer : {false, true}) {
      const size_t NC = (size_t)N * C;
      auto x = make(NC, 1, 1), dy = make(NC, 1, 2), w = make(C, 1, 3), b = make(C, 1, 6),
           y = zeros(NC), mean = zeros(N), rstd = zeros(N), dx = make(NC, 1, 4), dw = make(C, 1, 5),
           db = make(C, 1, 7);
      // dx, dw, db (null for RMSNorm) on backend `be` with its buffers' pointers `p`.
      auto backward = [&](Backend* be, bool gpu, float* gx, float* gw, float* gb) {
        auto f = [gpu](Pair& q) { return gpu ? q.gp() : q.cp(); };
        if (layer)
          be->layernorm_backward(gx, gw, gb, f(dy), f(x), f(w), f(mean), f(rstd), N, C);
        else
          be->rmsnorm_backward(gx, gw, f(dy), f(x), f(w), f(rstd), N, C);
      };
      if (layer) {
        cpu_->layernorm_forward(y.cp(), mean.cp(), rstd.cp(), x.cp(), w.cp(), b.cp(), N, C, 1e-5f);
        gpu_->layernorm_forward(y.gp(), mean.gp(), rstd.gp(), x.gp(), w.gp(), b.gp(), N, C, 1e-5f);
      } else {
        cpu_->rmsnorm_forward(y.cp(), rstd.cp(), x.cp(), w.cp(), N, C, 1e-5f);
        gpu_->rmsnorm_forward(y.gp(), rstd.gp(), x.gp(), w.gp(), N, C, 1e-5f);
      }
      backward(cpu_.get(), false, dx.cp(), dw.cp(), db.cp());
      backward(gpu_.get(), true, dx.gp(), dw.gp(), db.gp());
      const std::string what = absl::StrCat(layer ? "layernorm" : "rmsnorm", ", N ", N, ", C ", C);
      expect_close(dx, 1e-5, (what + " dx").c_str());
      expect_close(dw, 1e-5, (what + " dw").c_str());
      expect_close(db, 1e-5, (what + " db").c_str());
      std::vector<float> runs[2];
      for (std::vector<float>& r : runs) {  // into zeros: the same bits both times
        auto gx = zeros(NC), gw = zeros(C), gb = zeros(C);
        backward(gpu_.get(), true, gx.gp(), gw.gp(), gb.gp());
        r.resize(2 * C);
        gpu_->copy_to_host(r.data(), gw.gp(), C * 4);
        gpu_->copy_to_host(r.data() + C, gb.gp(), C * 4);
      }
      EXPECT_EQ(runs[0], runs[1]) << what << ": dw, db not repeatable";
    }
  }
}

// The residual add fused into the norm: on each backend the same bits as add_inplace then the
// norm, and the two backends agree (C = 67 and 200: not multiples of 32 or 64).
TEST_F(CudaVsCpu, ResidualFusedNormsEqualAddThenNorm) {
  for (int C : {67, 200}) {
    const int N = 29;
    const size_t NC = (size_t)N * C;
    auto w = make(C, 1, 2), b = make(C, 1, 3), r = make(NC, 1, 4);
    for (bool layer : {true, false}) {
      const std::string what = std::string(layer ? "layernorm" : "rmsnorm") + ", C " +
                               std::to_string(C);
      auto x = make(NC), xf = make(NC), y = zeros(NC), yf = zeros(NC), m = zeros(N),
           mf = zeros(N), s = zeros(N), sf = zeros(N);
      for (Backend* be : {cpu_.get(), gpu_.get()}) {
        const bool c = be == cpu_.get();
        auto p = [c](Pair& t) { return c ? t.cp() : t.gp(); };
        be->add_inplace(p(x), p(r), NC);  // the unfused pair
        if (layer) {
          be->layernorm_forward(p(y), p(m), p(s), p(x), p(w), p(b), N, C, 1e-5f);
          be->residual_layernorm_forward(p(xf), p(r), p(yf), p(mf), p(sf), p(w), p(b), N, C,
                                         1e-5f);
        } else {
          be->rmsnorm_forward(p(y), p(s), p(x), p(w), N, C, 1e-5f);
          be->residual_rmsnorm_forward(p(xf), p(r), p(yf), p(sf), p(w), N, C, 1e-5f);
        }
        for (auto [a, f, n] : {std::tuple{&x, &xf, NC}, {&y, &yf, NC}, {&s, &sf, (size_t)N}}) {
          std::vector<float> ha(n), hf(n);
          be->copy_to_host(ha.data(), p(*a), n * 4);
          be->copy_to_host(hf.data(), p(*f), n * 4);
          EXPECT_EQ(ha, hf) << what << (c ? ", cpu" : ", cuda") << ": fused differs from unfused";
        }
      }
      expect_close(xf, 1e-6, (what + ": residual sum").c_str());
      expect_close(yf, 1e-5, (what + ": normed").c_str());
      expect_close(sf, 1e-5, (what + ": rstd").c_str());
      if (layer) expect_close(mf, 1e-5, (what + ": mean").c_str());
    }
  }
}

TEST_F(CudaVsCpu, RopeAndGqaAttention) {
  const int B = 2, T = 37, NH = 6, KVH = 2, hd = 10, row = (NH + 2 * KVH) * hd;
  auto qkv = make((size_t)B * T * row), out = zeros((size_t)B * T * NH * hd),
       lse = zeros((size_t)B * NH * T), dout = make((size_t)B * T * NH * hd, 1, 2),
       dqkv = zeros((size_t)B * T * row);
  cpu_->rope(qkv.cp(), B, T, NH, KVH, hd, 10000.f, false, 0);
  gpu_->rope(qkv.gp(), B, T, NH, KVH, hd, 10000.f, false, 0);
  expect_close(qkv, 1e-5, "rope");
  cpu_->attention_forward(out.cp(), lse.cp(), qkv.cp(), B, T, NH, KVH, hd);
  gpu_->attention_forward(out.gp(), lse.gp(), qkv.gp(), B, T, NH, KVH, hd);
  expect_close(out, 1e-5, "attention forward");
  expect_close(lse, 1e-5, "attention log-sum-exp");
  cpu_->attention_backward(dqkv.cp(), dout.cp(), qkv.cp(), out.cp(), lse.cp(), B, T, NH, KVH, hd);
  gpu_->attention_backward(dqkv.gp(), dout.gp(), qkv.gp(), out.gp(), lse.gp(), B, T, NH, KVH, hd);
  expect_close(dqkv, 1e-4, "attention backward");
  cpu_->rope(dqkv.cp(), B, T, NH, KVH, hd, 10000.f, true, 0);
  gpu_->rope(dqkv.gp(), B, T, NH, KVH, hd, 10000.f, true, 0);
  expect_close(dqkv, 1e-4, "rope backward");
  // Llama 3's and linear scaling (model/rope.h) on both: at hd 10 and theta 1e4 the band
  // (8, 32) keeps one frequency, blends one and divides three by the factor.
  RopeScaling llama3{RopeScalingType::kLlama3, 8.f, 1.f, 4.f, 32.f};
  RopeScaling linear{RopeScalingType::kLinear, 2.f};
  for (const RopeScaling& s : {llama3, linear}) {
    cpu_->rope(qkv.cp(), B, T, NH, KVH, hd, RopeParams(1e4f, s), false, 3);
    gpu_->rope(qkv.gp(), B, T, NH, KVH, hd, RopeParams(1e4f, s), false, 3);
    expect_close(qkv, 1e-5, "scaled rope");
  }
}

TEST_F(CudaVsCpu, EmbeddingActivationsCrossEntropyAdamW) {
  const int B = 3, T = 11, C = 19, V = 1003, I = 23, N = B * T;
  std::vector<int> tok(N), tgt(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 7) % 50, tgt[i] = i % 5 == 0 ? -100 : (i * 13) % V;
  DeviceBuffer tc(cpu_.get(), N * 4, MemCategory::kWorkspace),
      tg(gpu_.get(), N * 4, MemCategory::kWorkspace),
      yc(cpu_.get(), N * 4, MemCategory::kWorkspace),
      yg(gpu_.get(), N * 4, MemCategory::kWorkspace);
  cpu_->copy_to_device(tc.data(), tok.data(), N * 4);
  gpu_->copy_to_device(tg.data(), tok.data(), N * 4);
  cpu_->copy_to_device(yc.data(), tgt.data(), N * 4);
  gpu_->copy_to_device(yg.data(), tgt.data(), N * 4);
  auto wte = make((size_t)V * C), wpe = make((size_t)T * C, 1, 2), e = zeros((size_t)N * C),
       dwte = zeros((size_t)V * C), dwpe = zeros((size_t)T * C), de = make((size_t)N * C, 1, 3);
  cpu_->embedding_forward(e.cp(), (int*)tc.data(), wte.cp(), wpe.cp(), DType::kF32, B, T, C);
  gpu_->embedding_forward(e.gp(), (int*)tg.data(), wte.gp(), wpe.gp(), DType::kF32, B, T, C);
  expect_close(e, 0, "embedding forward");
  cpu_->embedding_backward(dwte.cp(), dwpe.cp(), de.cp(), (int*)tc.data(), B, T, C);
  gpu_->embedding_backward(dwte.gp(), dwpe.gp(), de.gp(), (int*)tg.data(), B, T, C);
  expect_close(dwte, 0, "embedding dwte (deterministic: the CPU's order, bit for bit)");
  expect_close(dwpe, 0, "embedding dwpe (deterministic: the CPU's order, bit for bit)");
  auto h = make((size_t)N * 2 * I), a = zeros((size_t)N * I), dh = zeros((size_t)N * 2 * I),
       da = make((size_t)N * I, 1, 5);
  cpu_->swiglu_forward(a.cp(), h.cp(), N, I);
  gpu_->swiglu_forward(a.gp(), h.gp(), N, I);
  expect_close(a, 1e-5, "swiglu forward");
  cpu_->swiglu_backward(dh.cp(), da.cp(), h.cp(), N, I);
  gpu_->swiglu_backward(dh.gp(), da.gp(), h.gp(), N, I);
  expect_close(dh, 1e-5, "swiglu backward");
  cpu_->gelu_forward(a.cp(), h.cp(), a.n);
  gpu_->gelu_forward(a.gp(), h.gp(), a.n);
  expect_close(a, 1e-5, "gelu forward");
  cpu_->gelu_backward(dh.cp(), h.cp(), da.cp(), da.n);
  gpu_->gelu_backward(dh.gp(), h.gp(), da.gp(), da.n);
  expect_close(dh, 1e-5, "gelu backward");
  auto logits = make((size_t)N * V, 3.f), losses = zeros(N);
  cpu_->crossentropy_forward_backward(logits.cp(), V, losses.cp(), (int*)yc.data(), N, V, 0.1f);
  gpu_->crossentropy_forward_backward(logits.gp(), V, losses.gp(), (int*)yg.data(), N, V, 0.1f);
  expect_close(losses, 1e-5, "cross-entropy loss");
  expect_close(logits, 1e-6, "cross-entropy dlogits");
  auto p = make(1001), g = make(1001, 1, 2), m = zeros(1001), v = zeros(1001);
  for (int t = 1; t <= 3; ++t) {
    const OptimizerStep s{1e-2, 0.9, 0.999, 1e-8, 0.1, t, 0.5, true, true};
    float* cs[] = {m.cp(), v.cp()};
    float* gs[] = {m.gp(), v.gp()};
    cpu_->optimizer_update(p.cp(), g.cp(), DType::kF32, cs, nullptr, DType::kF32, p.n, s);
    gpu_->optimizer_update(p.gp(), g.gp(), DType::kF32, gs, nullptr, DType::kF32, p.n, s);
  }
  expect_close(p, 1e-6, "adamw params");
  expect_close(v, 1e-6, "adamw v");
  EXPECT_NEAR(cpu_->sum_squares(g.cp(), DType::kF32, g.n),
              gpu_->sum_squares(g.gp(), DType::kF32, g.n), 1e-6 * g.n);
}

// The cross-entropy that reads each row once into shared memory, over vocabularies from 1003 to
// GPT-2's 50,257 (201 KiB of fp32 logits a row) in bf16, fp16 and fp32, on rows padded as the
// classifier's (logits_row_stride), the padding set to a value that would win any softmax and
// that must come back untouched; an ignored row (-100) gets a zero loss and gradient; a target
// in the last real column. Reference: the CPU in fp32 on the same dtype-exact logits, rows of V.
TEST_F(CudaVsCpu, CrossEntropyOverVocabulariesAndDtypesMatchesTheCpu) {
  const int N = 3;
  const std::vector<int> tgt = {5, -100, 0};
  DeviceBuffer yc(cpu_.get(), N * 4, MemCategory::kWorkspace),
      yg(gpu_.get(), N * 4, MemCategory::kWorkspace);
  for (auto [t, V] : {std::pair{DType::kBF16, 1003}, std::pair{DType::kBF16, 9001},
                      std::pair{DType::kF16, 32000}, std::pair{DType::kBF16, 50257},
                      std::pair{DType::kF32, 32000}, std::pair{DType::kF32, 50257}}) {
    const int ld = gpu_->logits_row_stride(V);
    std::vector<int> y = tgt;
    y[2] = V - 1;  // the last real column
    cpu_->copy_to_device(yc.data(), y.data(), N * 4);
    gpu_->copy_to_device(yg.data(), y.data(), N * 4);
    auto z = make_typed((size_t)N * V, t, 3.f, V);
    const std::vector<char> pt = padded_logits(z, N, V, ld);
    float pad = 0;  // 1e4 as t holds it
    convert(pt.data() + (size_t)V * dtype_size(t), t, &pad, DType::kF32, 1);
    DeviceBuffer zg(gpu_.get(), pt.size(), MemCategory::kWorkspace);
    gpu_->copy_to_device(zg.data(), pt.data(), pt.size());
    auto losses = zeros(N);
    cpu_->crossentropy_forward_backward(z.cp(), V, losses.cp(), (int*)yc.data(), N, V, 0.5f);
    gpu_->crossentropy_forward_backward({zg.data(), t}, ld, losses.gp(), (int*)yg.data(), N, V,
                                        0.5f);
    const std::string what = absl::StrCat(std::string(dtype_name(t)), " V ", V);
    expect_close(losses, 1e-5, (what + " loss").c_str());
    std::vector<char> got(pt.size());
    gpu_->copy_to_host(got.data(), zg.data(), got.size());
    std::vector<float> g((size_t)N * ld), want((size_t)N * V);
    convert(got.data(), t, g.data(), DType::kF32, g.size());
    cpu_->copy_to_host(want.data(), z.c.data(), want.size() * 4);
    double worst = 0, maxref = 0;
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < V; ++v) {
        worst = nan_max(worst, (double)std::fabs(g[(size_t)n * ld + v] - want[(size_t)n * V + v]));
        maxref = std::max(maxref, (double)std::fabs(want[(size_t)n * V + v]));
      }
      for (int v = V; v < ld; ++v)
        ASSERT_EQ(g[(size_t)n * ld + v], pad) << what << ": padding of row " << n << " written";
    }
    // Within a unit in the last place of the 16-bit gradient (2^-8 for bf16), 1e-6 in fp32.
    EXPECT_LE(worst, (t == DType::kF32 ? 1e-6 : 8e-3) * maxref) << what << " dlogits";
    EXPECT_EQ(*std::max_element(&g[ld], &g[ld] + V), 0.f) << what << ": the ignored row";
    EXPECT_EQ(*std::min_element(&g[ld], &g[ld] + V), 0.f) << what << ": the ignored row";
    // The loss alone (scale 0, evaluation): the same losses, the logits left as they were.
    gpu_->copy_to_device(zg.data(), pt.data(), pt.size());
    auto eval = zeros(N);
    cpu_->copy_to_device(eval.cp(), losses.cp(), N * 4);  // the CPU's losses, for expect_close
    gpu_->crossentropy_forward_backward({zg.data(), t}, ld, eval.gp(), (int*)yg.data(), N, V, 0.f);
    expect_close(eval, 1e-5, (what + " loss, no gradient").c_str());
    gpu_->copy_to_host(got.data(), zg.data(), got.size());
    EXPECT_EQ(got, pt) << what << ": scale 0 wrote the logits";
  }
}

// The classifier's logits as the CUDA backend keeps them: bf16, rows padded to a multiple of
// 128 (V = 1003 -> 1024). The padding holds values that would win any softmax (1e4): the loss,
// the gradient and the classifier's GEMMs read only the V real columns. Reference: the CPU in
// fp32 on the same bf16-exact logits, rows of V.
TEST_F(CudaVsCpu, PaddedSixteenBitLogitsMatchTheCpu) {
  const DType t = DType::kBF16;
  const int N = 7, V = 1003, C = 24, ld = gpu_->logits_row_stride(V);
  EXPECT_EQ(ld, 1024);
  EXPECT_EQ(cpu_->logits_row_stride(V), V);
  std::vector<int> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = i == 3 ? -100 : (i * 131) % V;
  DeviceBuffer yc(cpu_.get(), N * 4, MemCategory::kWorkspace),
      yg(gpu_.get(), N * 4, MemCategory::kWorkspace);
  cpu_->copy_to_device(yc.data(), tgt.data(), N * 4);
  gpu_->copy_to_device(yg.data(), tgt.data(), N * 4);
  // The GPU's (N, ld) logits: the CPU's (N, V) values, then 1e4 in every padding column.
  auto z = make_typed((size_t)N * V, t, 3.f, 7);
  const std::vector<char> p16 = padded_logits(z, N, V, ld);
  DeviceBuffer zg(gpu_.get(), p16.size(), MemCategory::kWorkspace);
  gpu_->copy_to_device(zg.data(), p16.data(), p16.size());
  auto losses = zeros(N);
  cpu_->crossentropy_forward_backward(z.cp(), V, losses.cp(), (int*)yc.data(), N, V, 0.5f);
  gpu_->crossentropy_forward_backward({zg.data(), t}, ld, losses.gp(), (int*)yg.data(), N, V, 0.5f);
  expect_close(losses, 1e-5, "loss over padded bf16 rows");
  // The classifier's backward reads the padded dlogits with row stride ld.
  auto x = make_typed((size_t)N * C, t, 1, 8), w = make_typed((size_t)V * C, t, 1, 9),
       dx = zeros_typed((size_t)N * C, t);
  auto dw = zeros((size_t)V * C), db = zeros(V);  // (a bias too: the stride reaches its sum)
  cpu_->matmul_backward(dx.cp(), dw.cp(), db.cp(), z.cp(), x.cp(), w.cp(), N, C, V, V);
  gpu_->matmul_backward(dx.gp(), dw.gp(), db.gp(), TensorView(zg.data(), t), x.gp(), w.gp(), N,
                        C, V, ld);
  expect_close(dx, 8e-3, "classifier dX from padded dlogits");
  expect_close(dw, 4e-3, "classifier dW from padded dlogits (bf16-rounded dlogits)");
  expect_close(db, 4e-3, "bias gradient from padded dlogits (bf16-rounded dlogits)");
  // And its forward writes rows of stride ld, leaving the padding alone.
  DeviceBuffer out(gpu_.get(), (size_t)N * ld * 2, MemCategory::kWorkspace);
  gpu_->copy_to_device(out.data(), p16.data(), p16.size());
  auto out_c = zeros((size_t)N * V);
  cpu_->matmul_forward(out_c.cp(), x.cp(), w.cp(), nullptr, N, C, V);
  gpu_->matmul_forward({out.data(), t}, x.gp(), w.gp(), nullptr, N, C, V, ld);
  std::vector<uint16_t> got((size_t)N * ld);
  gpu_->copy_to_host(got.data(), out.data(), got.size() * 2);
  std::vector<float> gotf(got.size()), want((size_t)N * V);
  convert(got.data(), t, gotf.data(), DType::kF32, got.size());
  cpu_->copy_to_host(want.data(), out_c.cp(), want.size() * 4);
  double worst = 0, maxref = 1;
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V; ++v) {
      const float r = want[(size_t)n * V + v];
      worst = nan_max(worst, (double)std::fabs(gotf[(size_t)n * ld + v] - r));
      maxref = std::max(maxref, (double)std::fabs(r));
    }
    for (int v = V; v < ld; ++v)  // 1e4 as bf16 holds it: 9984
      ASSERT_EQ(gotf[(size_t)n * ld + v], 9984.f) << "padding written";
  }
  EXPECT_LE(worst, 8e-3 * maxref) << "classifier forward into padded rows (2 bf16 units)";
}

// The element-wise kernels' two paths: 16-byte packs (elementwise.cuh: operands of one dtype
// on 16-byte boundaries) and one element at a time (otherwise). On the same values, at an
// aligned offset and at one element off it (n = 301: whole packs and a tail; SwiGLU on rows
// of 24), in each dtype, they give the same bits; and GELU matches the CPU.
TEST_F(CudaVsCpu, PackedAndPerElementKernelsGiveTheSameBits) {
  const size_t n = 301;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t es = dtype_size(t);
    std::vector<float> h(n + 1), g(n + 1);
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.f, 2.f);
    for (size_t i = 0; i <= n; ++i) h[i] = d(rng), g[i] = d(rng);
    std::vector<char> h_t((n + 1) * es), g_t((n + 1) * es);
    convert(h.data(), DType::kF32, h_t.data(), t, n + 1);
    convert(g.data(), DType::kF32, g_t.data(), t, n + 1);
    auto upload = [&](const std::vector<char>& v) {
      DeviceBuffer b(gpu_.get(), v.size() + 64, MemCategory::kWorkspace);
      gpu_->copy_to_device(b.data(), v.data(), v.size());
      return b;
    };
    // outs[path][op]: path 0 packed (offset 0), 1 per element (offset 1)
    std::vector<std::vector<char> > outs[2];
    for (int path = 0; path < 2; ++path) {
      const size_t off = path;  // elements: 1 puts every operand off its 16-byte boundary
      // The first n values, after `off` elements of zeros.
      std::vector<char> hs(off * es, 0), gs(off * es, 0);
      hs.insert(hs.end(), h_t.begin(), h_t.begin() + n * es);
      gs.insert(gs.end(), g_t.begin(), g_t.begin() + n * es);
      DeviceBuffer x = upload(hs), dy = upload(gs), y = upload(gs), out = upload(hs);
      auto at = [&](DeviceBuffer& b) { return TensorRef(b.data(), t) + off; };
      std::vector<char> r(n * es);
      gpu_->gelu_forward(at(out), at(x), n);
      gpu_->copy_to_host(r.data(), at(out).data, n * es);
      outs[path].push_back(r);
      gpu_->gelu_backward(at(out), at(x), at(dy), n);
      gpu_->copy_to_host(r.data(), at(out).data, n * es);
      outs[path].push_back(r);
      gpu_->add_inplace(at(y), at(x), n);
      gpu_->copy_to_host(r.data(), at(y).data, n * es);
      outs[path].push_back(r);
    }
    // SwiGLU on N = 4 rows of I = 24 (whole packs in every dtype): out (N, I) and dinp (N, 2I),
    // from the first 2 N I values (inp) and the next N I (dout).
    const int N = 4, I = 24;
    ASSERT_LE((size_t)3 * N * I, n);
    for (int path = 0; path < 2; ++path) {
      const size_t off = path;
      std::vector<char> hs(off * es, 0);
      hs.insert(hs.end(), h_t.begin(), h_t.begin() + 3 * N * I * es);
      DeviceBuffer all = upload(hs), out = upload(hs), din = upload(hs);
      const TensorRef inp = TensorRef(all.data(), t) + off, dout = inp + (size_t)2 * N * I;
      std::vector<char> r((size_t)2 * N * I * es);
      gpu_->swiglu_forward(TensorRef(out.data(), t) + off, inp, N, I);
      gpu_->copy_to_host(r.data(), (TensorRef(out.data(), t) + off).data, (size_t)N * I * es);
      outs[path].push_back(std::vector<char>(r.begin(), r.begin() + (size_t)N * I * es));
      gpu_->swiglu_backward(TensorRef(din.data(), t) + off, dout, inp, N, I);
      gpu_->copy_to_host(r.data(), (TensorRef(din.data(), t) + off).data, r.size());
      outs[path].push_back(r);
    }
    const char* ops[] = {"gelu forward", "gelu backward", "add", "swiglu forward",
                         "swiglu backward"};
    for (int op = 0; op < 5; ++op)
      EXPECT_EQ(outs[0][op], outs[1][op]) << ops[op] << " (" << dtype_name(t) << ")";
    // The packed path against the CPU's fp32 on the same values.
    std::vector<float> hx(h.begin(), h.begin() + n), gx(g.begin(), g.begin() + n);
    convert(h_t.data(), t, hx.data(), DType::kF32, n);
    convert(g_t.data(), t, gx.data(), DType::kF32, n);
    DeviceBuffer cx(cpu_.get(), n * 4, MemCategory::kWorkspace),
        co(cpu_.get(), n * 4, MemCategory::kWorkspace);
    cpu_->copy_to_device(cx.data(), hx.data(), n * 4);
    cpu_->gelu_forward(co.f32(), cx.f32(), n);
    std::vector<float> want(n), got(n);
    cpu_->copy_to_host(want.data(), co.data(), n * 4);
    convert(outs[0][0].data(), t, got.data(), DType::kF32, n);
    const double tol = t == DType::kF32 ? 1e-6 : t == DType::kBF16 ? 8e-3 : 1e-3;
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], tol * std::max(1.f, std::fabs(want[i]))) << dtype_name(t) << i;
  }
}

// GPT-2's MLP with its GELU fused into the GEMMs (cuBLASLt's GELU_AUX_BIAS forward, DGELU
// backward) on bf16 operands whose rows (I) are a multiple of 8, and the two passes otherwise
// (I = 36); C = 45 an odd width on the other side. Reference: the CPU's two passes in fp32 on
// the same bf16 values; the fused forward applies GELU to the fp32 sum, not to its 16-bit
// rounding, and the GPU keeps act in bf16 (the CPU in fp32), so within 2 bf16 units of the
// largest magnitude.
TEST_F(CudaVsCpu, MlpGeluFusedIntoTheGemmsMatchesTheCpu) {
  const DType t = DType::kBF16;
  const int N = 19;
  for (auto [C, I] : {std::pair{48, 64}, std::pair{40, 36}, std::pair{45, 64}}) {
    const std::string what = "C " + std::to_string(C) + " I " + std::to_string(I);
    auto x = make_typed((size_t)N * C, t, 1, 1), w1 = make_typed((size_t)I * C, t, 0.3f, 2),
         b1 = make_typed(I, t, 1, 3), w2 = make_typed((size_t)C * I, t, 0.3f, 4),
         dout = make_typed((size_t)N * C, t, 1, 5), pre = zeros_typed((size_t)N * I, t),
         act = zeros_typed((size_t)N * I, t), dpre = zeros_typed((size_t)N * I, t),
         scratch = make_typed((size_t)N * I, t, 1, 6);
    auto dw2 = zeros((size_t)C * I), db2 = zeros(C);
#ifdef ZT_CUDA_EMU
    const long long fused_before = emu::cublaslt_gelu_epilogues();
#endif
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      const bool c = be == cpu_.get();
      auto p = [c](Typed& v) { return c ? v.cp() : v.gp(); };
      auto q = [c](Pair& v) { return c ? v.cp() : v.gp(); };
      be->matmul_gelu_forward(p(act), p(pre), p(x), p(w1), p(b1), N, C, I);
      be->matmul_dgelu_backward(p(dpre), p(scratch), q(dw2), q(db2), p(dout), p(act), p(w2), p(pre),
                                N, I, C);
    }
    expect_close(pre, 8e-3, "pre-GELU, " + what);
    expect_close(act, 8e-3, "GELU, " + what);
    expect_close(dpre, 8e-3, "dGELU, " + what);
    expect_close(dw2, 8e-3, ("down-projection dW, " + what).c_str());
    expect_close(db2, 1e-5, ("down-projection db, " + what).c_str());
#ifdef ZT_CUDA_EMU
    const long long fused = emu::cublaslt_gelu_epilogues() - fused_before;
    EXPECT_EQ(fused, I % 8 == 0 ? 2 : 0) << "GEMMs with a GELU, " << what;
#endif
  }
}

// The attention kernels over the shapes the issue names: T = 1, 7, 37; head sizes 32, 64, 80;
// GQA ratios 1, 4, 8; and one decoded row against the CPU's.
TEST_F(CudaVsCpu, AttentionOverHeadSizesGqaRatiosAndLengths) {
  for (int T : {1, 7, 37})
    for (int hd : {32, 64, 80})
      for (int KVH : {8, 2, 1}) {
        const int B = 1, NH = 8, row = (NH + 2 * KVH) * hd;
        const std::string what = "T " + std::to_string(T) + " hd " + std::to_string(hd) +
                                 " group " + std::to_string(NH / KVH);
        auto qkv = make((size_t)B * T * row), out = zeros((size_t)B * T * NH * hd),
             lse = zeros((size_t)B * NH * T), dout = make((size_t)B * T * NH * hd, 1, 2),
             dqkv = zeros((size_t)B * T * row), dec = zeros((size_t)NH * hd);
        cpu_->attention_forward(out.cp(), lse.cp(), qkv.cp(), B, T, NH, KVH, hd);
        gpu_->attention_forward(out.gp(), lse.gp(), qkv.gp(), B, T, NH, KVH, hd);
        expect_close(out, 1e-5, ("attention forward, " + what).c_str());
        expect_close(lse, 1e-5, ("attention lse, " + what).c_str());
        cpu_->attention_backward(dqkv.cp(), dout.cp(), qkv.cp(), out.cp(), lse.cp(), B, T, NH, KVH,
                                 hd);
        gpu_->attention_backward(dqkv.gp(), dout.gp(), qkv.gp(), out.gp(), lse.gp(), B, T, NH, KVH,
                                 hd);
        expect_close(dqkv, 1e-4, ("attention backward, " + what).c_str());
        cpu_->attention_decode(dec.cp(), qkv.cp(), T, NH, KVH, hd);
        gpu_->attention_decode(dec.gp(), qkv.gp(), T, NH, KVH, hd);
        expect_close(dec, 1e-5, ("attention decode, " + what).c_str());
      }
}

// Flash attention over several tiles (T = 70: three of 32 rows, the last partial) at the largest
// head size, two sequences: matches the CPU; the backward is bitwise the same on a second run
// (one writer per gradient element, no atomics); and no T x T buffer is allocated (workspace
// stays O(B NH T), not the 4 B NH T^2 bytes of materialised probabilities).
TEST_F(CudaVsCpu, FlashAttentionTilesIsDeterministicAndKeepsNoTxT) {
  const int B = 2, T = 70, NH = 4, KVH = 1, hd = 128, row = (NH + 2 * KVH) * hd;
  auto qkv = make((size_t)B * T * row), out = zeros((size_t)B * T * NH * hd),
       lse = zeros((size_t)B * NH * T), dout = make((size_t)B * T * NH * hd, 1, 2),
       dqkv = zeros((size_t)B * T * row), again = zeros((size_t)B * T * row);
  const size_t workspace_before = gpu_->tracker().current(MemCategory::kWorkspace);
  cpu_->attention_forward(out.cp(), lse.cp(), qkv.cp(), B, T, NH, KVH, hd);
  gpu_->attention_forward(out.gp(), lse.gp(), qkv.gp(), B, T, NH, KVH, hd);
  expect_close(out, 1e-5, "flash forward");
  expect_close(lse, 1e-5, "flash lse");
  cpu_->attention_backward(dqkv.cp(), dout.cp(), qkv.cp(), out.cp(), lse.cp(), B, T, NH, KVH, hd);
  gpu_->attention_backward(dqkv.gp(), dout.gp(), qkv.gp(), out.gp(), lse.gp(), B, T, NH, KVH, hd);
  expect_close(dqkv, 1e-4, "flash backward");
  gpu_->attention_backward(again.gp(), dout.gp(), qkv.gp(), out.gp(), lse.gp(), B, T, NH, KVH, hd);
  std::vector<float> a(dqkv.n), b(dqkv.n);
  gpu_->copy_to_host(a.data(), dqkv.gp(), dqkv.n * 4);
  gpu_->copy_to_host(b.data(), again.gp(), again.n * 4);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "backward not deterministic";
  EXPECT_LE(gpu_->tracker().peak(MemCategory::kWorkspace) - workspace_before,
            (size_t)B * NH * T * sizeof(float))
      << "attention allocated more than a row statistic per (b, h, t)";
}

// The emulation's race detector costs ~10x in the attention kernels (a shadow cell per byte):
// while this lives, the random order keeps it and the other two orders run strict without it
// (still NaN-filled memory, checked masks and copies). Nothing on a real GPU.
struct RaceDetectionInTheRandomOrderOnly {
#ifdef ZT_CUDA_EMU
  RaceDetectionInTheRandomOrderOnly() {
    emu::set_race_detection(emu::thread_order() == emu::ThreadOrder::kRandom);
  }
  ~RaceDetectionInTheRandomOrderOnly() { emu::set_race_detection(true); }
  // The race detector's run: an element type's second instance of a kernel template shares
  // the first's schedule of barriers and shared memory, so it is left to the other orders.
  bool detecting() const { return emu::thread_order() == emu::ThreadOrder::kRandom; }
#else
  bool detecting() const { return false; }
#endif
};

// The tensor-core attention (bf16 / fp16 activations; model/cuda/attention_mma.cu) over the
// sizes of the kernels issue: T = 1, 7, 37, 130 (partial tiles of 64 and 32, a block past the
// first), head sizes 64, 80, 96, 128 (80 and 96 not powers of two; 128 the largest), GQA
// ratios 1, 4, 8 (each (T, hd) pair with one ratio, in turn: every ratio meets every T and
// every head size). Reference: the CPU's fp32 attention on the same exactly representable inputs;
// the difference is P and dS rounded to 16 bits before their products (as FlashAttention-2)
// and each output's rounding: within 2 units in the last place of the largest magnitude,
// bf16 2^-7, fp16 2^-10 (the 16-bit test's bounds). The backward repeats bit for bit.
TEST_F(CudaVsCpu, TensorCoreAttentionOverHeadSizesGqaRatiosAndLengths) {
  const RaceDetectionInTheRandomOrderOnly detection;
  for (DType t : {DType::kBF16, DType::kF16}) {
    if (t == DType::kF16 && detection.detecting()) continue;
    const double tol = t == DType::kBF16 ? 8e-3 : 1e-3;
    int turn = 0;
    for (int T : {1, 7, 37, 130})
      for (int hd : {64, 80, 96, 128}) {
        const int group = std::array{1, 4, 8}[turn++ % 3];
        expect_attention_matches_cpu(t, T, hd, group, tol, 1e-5,
                                     std::string(dtype_name(t)) + " T " + std::to_string(T) +
                                         " hd " + std::to_string(hd) + " group " +
                                         std::to_string(group));
      }
    // Head sizes short of their tile (24 in 32, 88 in 96): 16-byte staging zero-fills past hd,
    // and the dK/dV kernel at 96 stages 2 bytes at a time.
    for (int hd : {24, 88})
      expect_attention_matches_cpu(t, 37, hd, 4, tol, 1e-5,
                                   std::string(dtype_name(t)) + " T 37 hd " + std::to_string(hd));
  }
}

// Packed rows, two of 130 tokens laid out differently: examples of 1, 31, 32, 32, 2 and 32
// tokens (starts at 0, 1, 32, 64, 96 and 98: on and beside the 32- and 64-row tile edges,
// where the kernels' tile skips sit at their bounds) and of 64 and 66. The tensor-core kernels
// at every head size in bf16 (HD 32 has its own launch bounds when packed), one in fp16, and
// GQA ratios 1, 4 and 8, and the fp32 family, against the CPU's packed attention, which
// tests/unit/packing_test.cc holds to each example computed alone; on auto the packed rows go
// to these kernels, not cuDNN.
TEST_F(CudaVsCpu, PackedRowsAttendOnlyWithinTheirExamples) {
  const RaceDetectionInTheRandomOrderOnly detection;
  std::vector<int> pos;
  for (const auto& row : {std::vector{1, 31, 32, 32, 2, 32}, std::vector{64, 66}})
    for (int n : row)
      for (int i = 0; i < n; ++i) pos.push_back(i);
  ASSERT_EQ(pos.size(), 260u);
  int turn = 0;
  for (DType t : {DType::kBF16, DType::kF16})
    for (int hd : {32, 64, 80, 96, 128}) {
      if (t == DType::kF16 && hd != 64) continue;  // the masks do not depend on the type
      const int group = std::array{1, 4, 8}[turn++ % 3];
      expect_attention_matches_cpu(t, 130, hd, group, t == DType::kBF16 ? 8e-3 : 1e-3, 1e-5,
                                   "packed " + std::string(dtype_name(t)) + " hd " +
                                       std::to_string(hd) + " group " + std::to_string(group),
                                   pos);
    }
  expect_attention_matches_cpu(DType::kF32, 130, 64, 4, 1e-5, 1e-5, "packed fp32", pos);
  auto automatic = make_cuda_backend(0, AttentionImpl::kAuto);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  gpu_ = std::move(*automatic);
  expect_attention_matches_cpu(DType::kBF16, 130, 64, 4, 8e-3, 1e-5, "packed, auto", pos);
}

// cuDNN's SDPA (--attention cudnn) on problems like the tensor-core kernels' above (fewer:
// each shape builds two graphs, which cuDNN may compile at run time), against the same CPU
// reference and bounds (cuDNN also rounds P and dS to 16 bits before their products), and its
// deterministic backward twice: the same bits. Skipped, saying why, where cuDNN cannot run:
// the emulation, no GPU, no libcudnn.so.9 on the library path.
TEST_F(CudaVsCpu, CudnnAttentionMatchesTheCpuLikeTheFlashKernels) {
  auto cudnn = make_cuda_backend(0, AttentionImpl::kCudnn);
  if (!cudnn.ok()) GTEST_SKIP() << cudnn.status().message();
  gpu_ = std::move(*cudnn);
  for (DType t : {DType::kBF16, DType::kF16}) {
    const double tol = t == DType::kBF16 ? 8e-3 : 1e-3;
    int turn = 0;
    for (int T : {7, 130})
      for (int hd : {64, 80, 128}) {
        const int group = std::array{1, 4, 8}[turn++ % 3];
        const std::string what = "cuDNN " + std::string(dtype_name(t)) + " T " +
                                 std::to_string(T) + " hd " + std::to_string(hd) + " group " +
                                 std::to_string(group);
        auto name = gpu_->prepare_attention(t, T > 100 ? 1 : 2, T, 8, 8 / group, hd);
        ASSERT_TRUE(name.ok()) << name.status() << ", " << what;
        EXPECT_EQ(name->rfind("cuDNN 9.", 0), 0u) << *name;
        expect_attention_matches_cpu(t, T, hd, group, tol, 1e-4, what);
      }
  }
}

// auto picks cuDNN where it loads, for the 16-bit activations it runs, and the flash kernels
// otherwise. Where cuDNN cannot load (the emulation; a GPU machine without it), asking for it
// is an error that says why and what to use instead.
TEST_F(CudaVsCpu, AttentionChoiceFallsBackOrSaysWhy) {
  auto cudnn = make_cuda_backend(0, AttentionImpl::kCudnn);
  if (!cudnn.ok()) {
    EXPECT_EQ(cudnn.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(cudnn.status().message().find("--attention cudnn: "), std::string::npos);
    EXPECT_NE(cudnn.status().message().find("--attention flash"), std::string::npos);
  }
#ifdef ZT_CUDA_EMU
  EXPECT_NE(cudnn.status().message().find("emulation"), std::string::npos) << cudnn.status();
#endif
  auto automatic = make_cuda_backend(0, AttentionImpl::kAuto);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  auto name = (*automatic)->prepare_attention(DType::kBF16, 2, 64, 12, 12, 64);
  ASSERT_TRUE(name.ok()) << name.status();
  if (cudnn.ok())
    EXPECT_EQ(name->rfind("cuDNN 9.", 0), 0u) << *name;
  else
    EXPECT_EQ(*name, "flash (tensor cores)");
  name = (*automatic)->prepare_attention(DType::kF32, 2, 64, 12, 12, 64);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "flash (fp32)");
  // Heads over our kernels' 128 (a config.json's head_dim apart) are refused before a step,
  // where cuDNN does not run them (fp32 here), not aborted in the first one.
  auto wide = (*automatic)->prepare_attention(DType::kF32, 2, 64, 4, 4, 160);
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument) << wide.status();
  EXPECT_NE(wide.status().message().find("head_dim 160"), std::string::npos) << wide.status();
  if (cudnn.ok()) {  // fp32 is refused when cuDNN is asked for by name
    auto refused = (*cudnn)->prepare_attention(DType::kF32, 2, 64, 12, 12, 64);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

// The weight-gradient reductions over rows (column_sum.cuh: tiles of 256 rows, then the tiles;
// embedding.cu: token buckets, token tiles of 1024) on more rows than one tile: N = 1300
// (six tiles, the last partial), C = 45 and OC = 71 (partial warps of columns), tokens
// repeated across tiles and buckets. Against the CPU, and twice: the same bits each time. The
// embedding gradients add in the CPU's order, so they equal it bit for bit.
TEST_F(CudaVsCpu, GradientReductionsOverManyRowTilesAreDeterministic) {
  const int N = 1300, C = 45, OC = 71, T = 100, B = N / T, V = 301;
  auto dout = make((size_t)N * OC, 1, 3), inp = make((size_t)N * C, 1, 4),
       dy = make((size_t)N * C, 1, 5), mean = make(N, 0.1f, 6), rstd = make(N, 1, 7);
  std::vector<int> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 37 + i / 7) % V;  // each token about 4 times
  DeviceBuffer tc(cpu_.get(), N * 4, MemCategory::kWorkspace),
      tg(gpu_.get(), N * 4, MemCategory::kWorkspace);
  cpu_->copy_to_device(tc.data(), tok.data(), N * 4);
  gpu_->copy_to_device(tg.data(), tok.data(), N * 4);
  std::vector<std::vector<float> > first;
  for (int run = 0; run < 2; ++run) {
    auto w = make((size_t)OC * C, 1, 8), din = zeros((size_t)N * C), dw = zeros((size_t)OC * C),
         db = zeros(OC), nw = make(C, 1, 9), nb = make(C, 1, 10), dx = zeros((size_t)N * C),
         ndw = zeros(C), ndb = zeros(C), dwte = make((size_t)V * C, 1, 11),
         dwpe = make((size_t)T * C, 1, 12);
    for (Backend* be : {cpu_.get(), gpu_.get()}) {
      const bool c = be == cpu_.get();
      auto p = [c](Pair& x) { return c ? x.cp() : x.gp(); };
      be->matmul_backward(p(din), p(dw), p(db), p(dout), p(inp), p(w), N, C, OC);
      be->layernorm_backward(p(dx), p(ndw), p(ndb), p(dy), p(inp), p(nw), p(mean), p(rstd), N, C);
      be->embedding_backward(p(dwte), p(dwpe), p(dy), (int*)(c ? tc.data() : tg.data()), B, T, C);
    }
    expect_close(db, 1e-5, "bias gradient over 6 row tiles");
    expect_close(ndw, 1e-5, "layernorm weight gradient over 6 row tiles");
    expect_close(ndb, 1e-5, "layernorm bias gradient over 6 row tiles");
    expect_close(dwte, 0, "token embedding gradient (the CPU's order, bit for bit)");
    expect_close(dwpe, 0, "position embedding gradient (the CPU's order, bit for bit)");
    std::vector<std::vector<float> > got;
    for (Pair* x : {&db, &ndw, &ndb}) {
      got.emplace_back(x->n);
      gpu_->copy_to_host(got.back().data(), x->gp(), x->n * 4);
    }
    if (run == 0)
      first = got;
    else
      EXPECT_EQ(first, got) << "a second run gave other bits";
  }
}

// The typed ops: conversions, gradient accumulation with its sum of squares, AdamW on bf16
// gradients writing a bf16 working copy, and an embedding lookup of bf16 tables.
TEST_F(CudaVsCpu, TypedConversionAccumulationAndAdamW) {
  const size_t n = 1001;
  auto x = make(n), y = make(n, 1, 2);
  for (DType t : {DType::kBF16, DType::kF16}) {
    DeviceBuffer c(cpu_.get(), n * 2, MemCategory::kWorkspace),
        g(gpu_.get(), n * 2, MemCategory::kWorkspace);
    cpu_->convert(x.cp(), DType::kF32, c.data(), t, n);
    gpu_->convert(x.gp(), DType::kF32, g.data(), t, n);
    std::vector<uint16_t> hc(n), hg(n);
    cpu_->copy_to_host(hc.data(), c.data(), n * 2);
    gpu_->copy_to_host(hg.data(), g.data(), n * 2);
    EXPECT_EQ(hc, hg) << "fp32 -> " << dtype_name(t) << " rounds to nearest even on both";
    // The sums of squares land in device memory, read back after (no wait inside scale_add).
    DeviceBuffer ssc(cpu_.get(), 8, MemCategory::kWorkspace),
        ssg(gpu_.get(), 8, MemCategory::kWorkspace);
    cpu_->scale_add(c.data(), t, y.cp(), 0.5f, true, n, static_cast<double*>(ssc.data()));
    gpu_->scale_add(g.data(), t, y.gp(), 0.5f, true, n, static_cast<double*>(ssg.data()));
    cpu_->copy_to_host(hc.data(), c.data(), n * 2);
    gpu_->copy_to_host(hg.data(), g.data(), n * 2);
    EXPECT_EQ(hc, hg) << "scale_add into " << dtype_name(t);
    double sc = 0, sg = 0;
    cpu_->copy_to_host(&sc, ssc.data(), 8);
    gpu_->copy_to_host(&sg, ssg.data(), 8);
    EXPECT_NEAR(sc, sg, 1e-6 * sc) << "sum of squares in scale_add, " << dtype_name(t);
    EXPECT_NEAR(sg, gpu_->sum_squares(g.data(), t, n), 1e-9 * sg) << "as sum_squares gives";
  }
  auto p = make(n), m = zeros(n), v = zeros(n);
  auto grad = bf16_pair(n), out = bf16_pair(n);
  set_bf16(grad, y);
  for (int t = 1; t <= 3; ++t) {
    const OptimizerStep s{1e-2, 0.9, 0.999, 1e-8, 0.1, t, 0.5, true, true};
    float* cs[] = {m.cp(), v.cp()};
    float* gs[] = {m.gp(), v.gp()};
    cpu_->optimizer_update(p.cp(), grad.c.data(), DType::kBF16, cs, out.c.data(), DType::kBF16, n,
                           s);
    gpu_->optimizer_update(p.gp(), grad.g.data(), DType::kBF16, gs, out.g.data(), DType::kBF16, n,
                           s);
  }
  expect_close(p, 1e-6, "adamw on bf16 gradients, master");
  std::vector<uint16_t> wc(n), wg(n);
  cpu_->copy_to_host(wc.data(), out.c.data(), n * 2);
  gpu_->copy_to_host(wg.data(), out.g.data(), n * 2);
  size_t differ = 0;  // a master within 1e-6 may round to a neighbouring bf16 value, rarely
  for (size_t i = 0; i < n; ++i) differ += wc[i] != wg[i];
  EXPECT_LE(differ, n / 100) << "bf16 working copies";
}

// Lion and Adagrad: the CUDA kernel runs model/optimizer_math.h's element updates as the CPU
// does, so master, state and the bf16 working copy agree bit for bit, with bf16 gradients
// consumed (zeroed) as they are read.
// ZeRO++'s block quantization (model/quantize.h): the GPU's integers, scales and dequantized
// values are the CPU's bit for bit (the CPU's are held to numpy in quantize_test), on lengths
// and blocks that leave short tails and an odd 4-bit length.
TEST_F(CudaVsCpu, BlockQuantizationGivesTheCpusBits) {
  // Bit for bit, where a NaN on both sides counts as equal (a GPU's NaN may carry another payload).
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], 4) != 0 && !(std::isnan(a[i]) && std::isnan(b[i])))
        return false;
    return true;
  };
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (auto [n, bits, block] : {std::tuple<size_t, int, int>{1, 8, 2}, {37, 4, 8}, {1000, 8, 256},
                                  {4099, 4, 512}, {130, 4, 130}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " n " << n << " int" << bits << " block "
                                      << block);
      Pair x = make(n, 2.f, (uint32_t)n);
      if (n > 100) {  // a NaN and an infinity: their blocks' scales are NaN on both sides
        const float bad[2] = {std::nanf(""), INFINITY};
        cpu_->copy_to_device(x.cp() + 3, &bad[0], 4), gpu_->copy_to_device(x.gp() + 3, &bad[0], 4);
        cpu_->copy_to_device(x.cp() + n - 2, &bad[1], 4);
        gpu_->copy_to_device(x.gp() + n - 2, &bad[1], 4);
      }
      DeviceBuffer xc(cpu_.get(), n * 2, MemCategory::kWorkspace),
          xg(gpu_.get(), n * 2, MemCategory::kWorkspace);
      const void *inc = x.cp(), *ing = x.gp();
      if (t == DType::kBF16) {
        cpu_->convert(x.cp(), DType::kF32, xc.data(), t, n);
        gpu_->convert(x.gp(), DType::kF32, xg.data(), t, n);
        inc = xc.data(), ing = xg.data();
      }
      const size_t qb = quant_bytes(n, bits), nb = quant_blocks(n, block);
      DeviceBuffer qc(cpu_.get(), qb, MemCategory::kWorkspace),
          qg(gpu_.get(), qb, MemCategory::kWorkspace);
      DeviceBuffer sc(cpu_.get(), nb * 4, MemCategory::kWorkspace),
          sg(gpu_.get(), nb * 4, MemCategory::kWorkspace);
      // Different garbage on each side: every stored byte must come from the values.
      cpu_->copy_to_device(qc.data(), std::vector<uint8_t>(qb, 0xAA).data(), qb);
      gpu_->copy_to_device(qg.data(), std::vector<uint8_t>(qb, 0x55).data(), qb);
      cpu_->quantize_blocks(inc, t, n, bits, block, qc.data(), sc.f32());
      gpu_->quantize_blocks(ing, t, n, bits, block, qg.data(), sg.f32());
      std::vector<uint8_t> q1(qb), q2(qb);
      std::vector<float> s1(nb), s2(nb);
      cpu_->copy_to_host(q1.data(), qc.data(), qb);
      gpu_->copy_to_host(q2.data(), qg.data(), qb);
      cpu_->copy_to_host(s1.data(), sc.data(), nb * 4);
      gpu_->copy_to_host(s2.data(), sg.data(), nb * 4);
      EXPECT_EQ(q1, q2);
      EXPECT_TRUE(same_bits(s1, s2));
      if (n > 100) EXPECT_TRUE(std::isnan(s1[0]) && std::isnan(s1.back()));
      for (bool acc : {false, true}) {
        Pair y = make(n, 1.f, 7);
        cpu_->dequantize_blocks(qc.data(), sc.f32(), n, bits, block, y.cp(), DType::kF32, acc);
        gpu_->dequantize_blocks(qg.data(), sg.f32(), n, bits, block, y.gp(), DType::kF32, acc);
        std::vector<float> y1(n), y2(n);
        cpu_->copy_to_host(y1.data(), y.cp(), n * 4);
        gpu_->copy_to_host(y2.data(), y.gp(), n * 4);
        EXPECT_TRUE(same_bits(y1, y2)) << (acc ? "dequantize and add" : "dequantize");
      }
      DeviceBuffer yc(cpu_.get(), n * 2, MemCategory::kWorkspace),
          yg(gpu_.get(), n * 2, MemCategory::kWorkspace);
      cpu_->dequantize_blocks(qc.data(), sc.f32(), n, bits, block, yc.data(), DType::kBF16, false);
      gpu_->dequantize_blocks(qg.data(), sg.f32(), n, bits, block, yg.data(), DType::kBF16, false);
      std::vector<uint16_t> b1(n), b2(n);
      cpu_->copy_to_host(b1.data(), yc.data(), n * 2);
      gpu_->copy_to_host(b2.data(), yg.data(), n * 2);
      EXPECT_EQ(b1, b2) << "dequantize into bf16";
    }
  }
}

TEST_F(CudaVsCpu, LionAndAdagradGiveTheCpusBits) {
  const size_t n = 3001;
  for (OptimizerKind k : {OptimizerKind::kLion, OptimizerKind::kAdagrad}) {
    auto p = make(n), st = zeros(n), y = make(n, 1, 2);
    auto grad = bf16_pair(n), out = bf16_pair(n);
    for (int t = 1; t <= 3; ++t) {
      set_bf16(grad, y);
      const OptimizerStep s{.lr = 1e-2,
                            .beta2 = 0.99,
                            .eps = 1e-10,
                            .weight_decay = 0.1,
                            .t = t,
                            .grad_scale = 0.5,
                            .zero_grad = true,
                            .kind = k,
                            .lr_decay = 0.05};
      float* cs[] = {st.cp()};
      float* gs[] = {st.gp()};
      cpu_->optimizer_update(p.cp(), grad.c.data(), DType::kBF16, cs, out.c.data(), DType::kBF16, n,
                             s);
      gpu_->optimizer_update(p.gp(), grad.g.data(), DType::kBF16, gs, out.g.data(), DType::kBF16, n,
                             s);
    }
    const std::string what = optimizer_info(k).name;
    expect_close(p, 0, (what + " master").c_str());
    expect_close(st, 0, (what + " state").c_str());
    std::vector<uint16_t> wc(n), wg(n), zg(n);
    cpu_->copy_to_host(wc.data(), out.c.data(), n * 2);
    gpu_->copy_to_host(wg.data(), out.g.data(), n * 2);
    gpu_->copy_to_host(zg.data(), grad.g.data(), n * 2);
    EXPECT_EQ(wc, wg) << what << " bf16 working copies";
    EXPECT_EQ(zg, std::vector<uint16_t>(n, 0)) << what << " gradient consumed";
  }
}

// Muon's two passes: the matrices' elements (two spans, one cut by the call's offset) run
// model/optimizer_math.h's element updates on both, bit for bit; the elements between them take
// AdamW in pass 1 (within 1e-6, as AdamW above) and are only written out in pass 2. The
// orthogonalisation between the passes is replaced by u itself, which the kernels cannot tell.
TEST_F(CudaVsCpu, MuonPassesGiveTheCpusBits) {
  const size_t n = 3001, offset = 100;
  const size_t spans[] = {40, 1300, 2000, 2600};  // owned indices; the call starts at 100
  auto p = make(n), m = zeros(n), v = zeros(n), u = zeros(n), y = make(n, 1, 2);
  auto grad = bf16_pair(n), out = bf16_pair(n);
  for (int t = 1; t <= 3; ++t) {
    set_bf16(grad, y);
    OptimizerStep s{.lr = 1e-2,
                    .beta2 = 0.95,
                    .eps = 1e-10,
                    .weight_decay = 0.1,
                    .t = t,
                    .grad_scale = 0.5,
                    .zero_grad = true,
                    .kind = OptimizerKind::kMuon,
                    .momentum = 0.95,
                    .aux_lr = 3e-3,
                    .muon_spans = spans,
                    .num_muon_spans = 2,
                    .offset = offset};
    float* cs[] = {m.cp(), v.cp()};
    float* gs[] = {m.gp(), v.gp()};
    cpu_->optimizer_update(p.cp(), grad.c.data(), DType::kBF16, cs, u.cp(), DType::kF32, n, s);
    gpu_->optimizer_update(p.gp(), grad.g.data(), DType::kBF16, gs, u.gp(), DType::kF32, n, s);
    s.muon_pass = 2, s.zero_grad = false;
    cpu_->optimizer_update(p.cp(), u.cp(), DType::kF32, cs, out.c.data(), DType::kBF16, n, s);
    gpu_->optimizer_update(p.gp(), u.gp(), DType::kF32, gs, out.g.data(), DType::kBF16, n, s);
  }
  expect_close(p, 1e-6, "muon master");
  expect_close(m, 1e-6, "muon exp_avg");
  expect_close(v, 1e-6, "muon exp_avg_sq");
  std::vector<float> pc(n), pg(n), mc(n), mg(n);
  cpu_->copy_to_host(pc.data(), p.cp(), n * 4);
  gpu_->copy_to_host(pg.data(), p.gp(), n * 4);
  cpu_->copy_to_host(mc.data(), m.cp(), n * 4);
  gpu_->copy_to_host(mg.data(), m.gp(), n * 4);
  for (size_t i = 0; i < n; ++i) {
    const size_t o = i + offset;
    if ((o < 40 || o >= 1300) && (o < 2000 || o >= 2600)) continue;
    ASSERT_EQ(pc[i], pg[i]) << "matrix element " << i << " master";
    ASSERT_EQ(mc[i], mg[i]) << "matrix element " << i << " momentum";
  }
  std::vector<uint16_t> zg(n);
  gpu_->copy_to_host(zg.data(), grad.g.data(), n * 2);
  EXPECT_EQ(zg, std::vector<uint16_t>(n, 0)) << "gradient consumed in pass 1";
}

// Activations in a 16-bit dtype, as the CUDA backend keeps them when parameters work in bf16 or
// fp16: every kernel family reads and writes them as stored, computes in fp32 and rounds once
// per stored value. Reference: the CPU backend in fp32 on the same (exactly representable)
// inputs, so the difference is the output's rounding: within 2 units in the last place of
// the output's largest magnitude (bf16 2^-7, fp16 2^-10). Awkward sizes: odd N and T, C = 45,
// head sizes 32 and 80, GQA ratios 1 and 8.
TEST_F(CudaVsCpu, SixteenBitActivationsMatchTheCpu) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    const double tol = t == DType::kBF16 ? 8e-3 : 1e-3;
    const std::string dt(dtype_name(t));
    auto run = [&](auto&& op) { op(cpu_.get(), true), op(gpu_.get(), false); };
    const int N = 37, C = 45, OC = 71, I = 23;
    {  // linear layer: weights in t too, the gradient of the weight and bias in fp32
      auto inp = make_typed((size_t)N * C, t), w = make_typed((size_t)OC * C, t, 1, 2),
           b = make_typed(OC, t, 1, 3), out = zeros_typed((size_t)N * OC, t),
           dout = make_typed((size_t)N * OC, t, 1, 4), dinp = zeros_typed((size_t)N * C, t);
      auto dw = zeros((size_t)OC * C), db = zeros(OC), out32 = zeros((size_t)N * OC);
      run([&](Backend* be, bool c) {
        auto p = [c](Typed& x) { return c ? x.cp() : x.gp(); };
        auto q = [c](Pair& x) { return c ? x.cp() : x.gp(); };
        be->matmul_forward(p(out), p(inp), p(w), p(b), N, C, OC);    // bias in the epilogue
        be->matmul_forward(q(out32), p(inp), p(w), p(b), N, C, OC);  // fp32 out: bias kernel
        be->matmul_backward(p(dinp), q(dw), q(db), p(dout), p(inp), p(w), N, C, OC);
      });
      expect_close(out, tol, "matmul forward");
      expect_close(out32, 1e-5, (dt + " matmul forward into fp32").c_str());
      expect_close(dinp, tol, "matmul dinp");
      expect_close(dw, 1e-5, (dt + " matmul dweight").c_str());
      expect_close(db, 1e-5, (dt + " matmul dbias").c_str());
    }
    for (bool layer : {true, false}) {  // norms, plain and with the residual fused
      const std::string what = layer ? "layernorm" : "rmsnorm";
      auto x = make_typed((size_t)N * C, t), r = make_typed((size_t)N * C, t, 1, 5),
           w = make_typed(C, t, 1, 2), b = make_typed(C, t, 1, 3),
           y = zeros_typed((size_t)N * C, t), yf = zeros_typed((size_t)N * C, t),
           dy = make_typed((size_t)N * C, t, 1, 4), dx = zeros_typed((size_t)N * C, t);
      auto mean = zeros(N), rstd = zeros(N), dw = zeros(C), db = zeros(C), mf = zeros(N),
           sf = zeros(N);
      run([&](Backend* be, bool c) {
        auto p = [c](Typed& v) { return c ? v.cp() : v.gp(); };
        auto q = [c](Pair& v) { return c ? v.cp() : v.gp(); };
        if (layer) {
          be->layernorm_forward(p(y), q(mean), q(rstd), p(x), p(w), p(b), N, C, 1e-5f);
          be->layernorm_backward(p(dx), q(dw), q(db), p(dy), p(x), p(w), q(mean), q(rstd), N, C);
          be->residual_layernorm_forward(p(x), p(r), p(yf), q(mf), q(sf), p(w), p(b), N, C, 1e-5f);
        } else {
          be->rmsnorm_forward(p(y), q(rstd), p(x), p(w), N, C, 1e-5f);
          be->rmsnorm_backward(p(dx), q(dw), p(dy), p(x), p(w), q(rstd), N, C);
          be->residual_rmsnorm_forward(p(x), p(r), p(yf), q(sf), p(w), N, C, 1e-5f);
        }
      });
      expect_close(y, tol, what + " forward");
      expect_close(rstd, 1e-5, (dt + " " + what + " rstd").c_str());
      expect_close(dx, tol, what + " dx");
      expect_close(dw, 1e-4, (dt + " " + what + " dw").c_str());
      if (layer) expect_close(db, 1e-5, (dt + " layernorm db").c_str());
      expect_close(x, tol, what + ": residual sum");
      expect_close(yf, 2 * tol, what + " of the rounded residual sum");
    }
    for (int hd : {32, 80})  // RoPE and attention, forward, backward and one decoded row
      for (int KVH : {8, 1}) {
        const int B = 2, T = 13, NH = 8, row = (NH + 2 * KVH) * hd;
        const std::string what = "hd " + std::to_string(hd) + " group " + std::to_string(NH / KVH);
        auto qkv = make_typed((size_t)B * T * row, t),
             out = zeros_typed((size_t)B * T * NH * hd, t),
             dout = make_typed((size_t)B * T * NH * hd, t, 1, 2),
             dqkv = zeros_typed((size_t)B * T * row, t), dec = zeros_typed((size_t)NH * hd, t);
        auto lse = zeros((size_t)B * NH * T);
        run([&](Backend* be, bool c) {
          auto p = [c](Typed& v) { return c ? v.cp() : v.gp(); };
          be->rope(p(qkv), B, T, NH, KVH, hd, 10000.f, false, 0);
        });
        expect_close(qkv, tol, "rope, " + what);
        // Attention reads the rotated qkv as each backend stored it: the CPU's fp32 values
        // would differ from the GPU's by the rope's rounding, so give the CPU the GPU's.
        std::vector<uint16_t> h16(qkv.n);
        std::vector<float> h(qkv.n);
        gpu_->copy_to_host(h16.data(), qkv.g.data(), qkv.n * 2);
        convert(h16.data(), t, h.data(), DType::kF32, qkv.n);
        cpu_->copy_to_device(qkv.c.data(), h.data(), qkv.n * 4);
        run([&](Backend* be, bool c) {
          auto p = [c](Typed& v) { return c ? v.cp() : v.gp(); };
          float* l = c ? lse.cp() : lse.gp();
          be->attention_forward(p(out), l, p(qkv), B, T, NH, KVH, hd);
          be->attention_backward(p(dqkv), p(dout), p(qkv), p(out), l, B, T, NH, KVH, hd);
          be->attention_decode(p(dec), p(qkv), T, NH, KVH, hd);  // the first sequence's last row
        });
        expect_close(out, tol, "attention forward, " + what);
        expect_close(lse, 1e-5, (dt + " attention lse, " + what).c_str());
        expect_close(dqkv, tol, "attention backward, " + what);
        expect_close(dec, tol, "attention decode, " + what);
        run([&](Backend* be, bool c) {
          auto p = [c](Typed& v) { return c ? v.cp() : v.gp(); };
          be->rope(p(dqkv), B, T, NH, KVH, hd, 10000.f, true, 0);
        });
        expect_close(dqkv, 2 * tol, "rope backward, " + what);
      }
    {  // GELU, SwiGLU, the residual add, token and position embeddings
      auto h = make_typed((size_t)N * 2 * I, t), a = zeros_typed((size_t)N * I, t),
           g = zeros_typed((size_t)N * I, t), da = make_typed((size_t)N * I, t, 1, 5),
           dh = zeros_typed((size_t)N * 2 * I, t), dg = zeros_typed((size_t)N * I, t),
           y = make_typed((size_t)N * I, t, 1, 6);
      run([&](Backend* be, bool c) {
        auto p = [c](Typed& v) { return c ? v.cp() : v.gp(); };
        be->swiglu_forward(p(a), p(h), N, I);
        be->swiglu_backward(p(dh), p(da), p(h), N, I);
        be->gelu_forward(p(g), p(h), g.n);
        be->gelu_backward(p(dg), p(h), p(da), dg.n);
        be->add_inplace(p(y), p(da), y.n);
      });
      expect_close(a, tol, "swiglu forward");
      expect_close(dh, tol, "swiglu backward");
      expect_close(g, tol, "gelu forward");
      expect_close(dg, tol, "gelu backward");
      expect_close(y, tol, "residual add");
      const int B = 3, T = 11, V = 50;
      std::vector<int> tok(B * T);
      for (int i = 0; i < B * T; ++i) tok[i] = (i * 7) % V;
      DeviceBuffer tc(cpu_.get(), tok.size() * 4, MemCategory::kWorkspace),
          tg(gpu_.get(), tok.size() * 4, MemCategory::kWorkspace);
      cpu_->copy_to_device(tc.data(), tok.data(), tok.size() * 4);
      gpu_->copy_to_device(tg.data(), tok.data(), tok.size() * 4);
      auto wte = make_typed((size_t)V * C, t), wpe = make_typed((size_t)T * C, t, 1, 2),
           e = zeros_typed((size_t)B * T * C, t), de = make_typed((size_t)B * T * C, t, 1, 3);
      auto dwte = zeros((size_t)V * C), dwpe = zeros((size_t)T * C);
      cpu_->embedding_forward(e.cp(), (int*)tc.data(), wte.c.data(), wpe.c.data(), DType::kF32, B,
                              T, C);
      gpu_->embedding_forward(e.gp(), (int*)tg.data(), wte.g.data(), wpe.g.data(), t, B, T, C);
      expect_close(e, tol, "embedding forward");
      cpu_->embedding_backward(dwte.cp(), dwpe.cp(), de.cp(), (int*)tc.data(), B, T, C);
      gpu_->embedding_backward(dwte.gp(), dwpe.gp(), de.gp(), (int*)tg.data(), B, T, C);
      expect_close(dwte, 0, (dt + " embedding dwte (fp32, the CPU's order)").c_str());
      expect_close(dwpe, 0, (dt + " embedding dwpe (fp32, the CPU's order)").c_str());
    }
  }
}

// A tiny LLaMA: GQA (4 heads, 2 kv heads), C = 48 (not a multiple of 64), vocabulary 61.
ModelConfig tiny_llama(int layers) {
  ModelConfig c = ModelConfig::of(Family::kLLaMA);
  c.vocab_size = 61;
  c.max_seq_len = 16;
  c.n_layer = layers;
  c.hidden = 48;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.intermediate = 72;
  return c;
}

#ifdef ZT_CUDA_EMU
// The host waits for the device a fixed number of times per training step, however many units
// the model has: no wait per unit for its gradient's sum of squares (the global norm reads
// every unit's from device memory at once, Engine::step). One rank, so every unit is
// replicated: fp32 (step() sums each unit's gradient into its slot) and bf16 (the pass that
// folds the backward's gradient in writes it); 2 blocks against 6. (On several ranks the
// reduction's pass writes the slot; zero_stages_test checks the norm's values there.)
TEST_F(CudaVsCpu, HostWaitsPerStepDoNotGrowWithTheUnits) {
  auto waits = [&](int layers, DType t) {
    const ModelConfig c = tiny_llama(layers);
    const int B = 2, T = 13;
    auto comm = make_single_process_communicator();
    Transformer model(c, gpu_.get(), B, T, 0, false, gpu_->activation_dtype(t));
    EngineOptions eo;
    eo.param_dtype = eo.grad_dtype = t;
    eo.gradient_clipping = 1.f;
    Engine engine(model.layout(), gpu_.get(), comm.get(), eo);
    std::vector<int> x(B * T), y(B * T);
    for (int i = 0; i < B * T; ++i) x[i] = (i * 7) % 61, y[i] = (i * 11) % 61;
    long long per_step = 0;
    for (int step = 0; step < 2; ++step) {  // the second step: steady state
      const long long before = emu::host_waits();
      engine.begin_pass();
      model.forward(engine, x.data(), y.data(), B, T, 1.f);
      // The ids go ahead on the copy stream: the forward waits once, for its losses.
      EXPECT_EQ(emu::host_waits() - before, 1) << dtype_name(t) << ": waits inside the forward";
      model.backward(engine);
      EXPECT_TRUE(engine.step(1e-3f).ok());
      per_step = emu::host_waits() - before;
    }
    return per_step;
  };
  for (DType t : {DType::kF32, DType::kBF16})
    EXPECT_EQ(waits(2, t), waits(6, t)) << dtype_name(t) << ": a host wait per unit";
}
#endif

// Five AdamW steps of a tiny LLaMA (GQA, odd T, C = 48) through the ZeRO engine, on each
// backend: the losses agree (fp32 tightly; bf16 working weights, gradients and, on the GPU,
// activations within bf16's resolution), and two runs on the CUDA backend are bitwise
// identical.
struct TrainResult {
  std::vector<float> losses, params;
};
TrainResult train_tiny_llama(Backend* be, DType dtype, const ModelConfig& c) {
  const int B = 2, T = 13;
  auto comm = make_single_process_communicator();
  Transformer model(c, be, B, T, 0, false, be->activation_dtype(dtype));  // bf16 on the GPU
  EngineOptions eo;
  eo.param_dtype = eo.grad_dtype = dtype;
  eo.gradient_clipping = 1.f;
  eo.optimizer = AdamWParams{.weight_decay = 0.1};
  Engine engine(model.layout(), be, comm.get(), eo);
  const ParamLayout& layout = model.layout();
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> p(layout.units()[u].numel);
    init_unit(c, layout.units()[u], u, 3, p);
    engine.set_unit_params(u, p);
  }
  std::vector<int> x(B * T), y(B * T);
  TrainResult r;
  for (int step = 0; step < 5; ++step) {
    for (int i = 0; i < B * T; ++i) x[i] = (i * 7 + step * 3) % 61, y[i] = (i * 11 + step) % 61;
    engine.begin_pass();
    r.losses.push_back(model.forward(engine, x.data(), y.data(), B, T, 1.f).loss);
    model.backward(engine);
    EXPECT_TRUE(engine.step(3e-3f).ok());
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> p(layout.units()[u].numel);
    engine.get_unit_params(u, p);
    r.params.insert(r.params.end(), p.begin(), p.end());
  }
  return r;
}

// Also with head_dim set apart (20, its queries and the attention's output 80 wide at hidden
// 48), as Qwen3's: the attention's buffers and its output projection follow n_head x head_dim.
TEST_F(CudaVsCpu, TinyLlamaTrainsAsOnTheCpu) {
  ModelConfig wide = tiny_llama(2);
  wide.head_dim_apart = 20;
  for (const ModelConfig& c : {tiny_llama(2), wide}) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      const std::string what = absl::StrCat(std::string(dtype_name(t)), " head_dim ", c.head_dim(),
                                            " hidden ", c.hidden);
      const TrainResult cpu = train_tiny_llama(cpu_.get(), t, c),
                        gpu = train_tiny_llama(gpu_.get(), t, c);
      const double tol = t == DType::kF32 ? 1e-4 : 1e-2;  // bf16: 8 mantissa bits per weight
      for (size_t s = 0; s < cpu.losses.size(); ++s)
        EXPECT_NEAR(gpu.losses[s], cpu.losses[s], tol * cpu.losses[s]) << what << " step " << s;
      const TrainResult again = train_tiny_llama(gpu_.get(), t, c);
      EXPECT_EQ(again.losses, gpu.losses) << what << ": two runs, same bits";
      EXPECT_EQ(again.params, gpu.params) << what << ": two runs, same bits";
    }
  }
}

#endif  // ZT_HAVE_CUDA

}  // namespace
}  // namespace zt

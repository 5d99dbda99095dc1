// A small emulation of the CUDA execution model on the CPU, so that kernels written for the
// GPU run, and are tested, on machines without one (the CUDA issue, "CUDA emulation for CI").
//
// A launch runs its blocks one after another on the calling thread. The threads of a block run
// as fibers (ucontext) on that thread, switching only at synchronisation points:
// __syncthreads() (every live thread of the block), warp shuffles (every live lane of the warp)
// and the end of the thread. Within each round the fibers run in the order set_thread_order
// chooses (forward, reverse, or a seeded random permutation per round), so a missing barrier
// shows up as a difference between orders. __shared__ variables are per OS thread statics,
// which is per block because blocks do not overlap. Atomics are plain read-modify-writes (one
// OS thread). Threads that have exited count as arrived at __syncthreads (as on current
// GPUs). A warp shuffle that some live lanes never reach, or one while a lane of the same warp
// waits in __syncthreads, is a deadlock on a GPU: the emulation aborts saying which.
// Code using it is compiled with -ffp-contract=off, so __fmul_rn / __fadd_rn round as on the
// GPU instead of being fused.
//
// Device memory is host memory, so host code that reads a device pointer would go unnoticed.
// With ZT_CUDA_EMU_GUARD=1 it is caught (unless another thread holds an emulated call open at
// that moment: the opening is process-wide): device allocations are mapped PROT_NONE and opened
// only while an emulated call (a launch, a copy, a memset, a GEMM) runs, so a host access outside
// one is a segmentation fault at the faulting line (docs/architecture.md "Backend": host code never
// dereferences a device pointer). Each call then costs two mprotect per allocation.
//
// With ZT_CUDA_EMU_STRICT=1 it also stops (aborts, saying what) at what a GPU does not promise:
// each allocation is filled with NaN (0xFF bytes) and followed by an unmapped page, so a read of
// memory nothing wrote shows as NaN and a write past the end faults; a copy or memset whose
// range leaves its allocation, or whose direction is not the pointers'; a warp shuffle or
// __syncwarp whose mask leaves out the caller or the source lane, or a shuffle reading a lane
// that does not exist or has exited; dynamic shared memory over 48 KiB without the opt-in
// attribute; and, in code compiled with -fsanitize=thread (the kernels), a data race within a block
// or between blocks on device memory (races.cc), threads also giving way at memory operations. The
// launch limits of sm_90 (grid 2^31-1 x 65535 x 65535, block 1024 x 1024 x 64 and 1024 threads, 227
// KiB of dynamic shared memory) are checked always.
//
// Several GPUs on a node: set_device_count(n) makes the emulation n devices (1 by default). Each
// host thread has a current device, 0 until cudaSetDevice, as in the CUDA runtime, and streams,
// events and (guard or strict mode) allocations belong to the one current where they were made.
// A launch on a stream of another device than the thread's is refused (aborts, as a GPU fails
// it), so is an event recorded on another device's stream (cudaErrorInvalidResourceHandle), and
// in strict mode a copy or memset touching another device's memory: on a node of several GPUs, a
// thread that never set its device (a copy or pinning thread) works on GPU 0, another rank's.
//
// Limits: no timing, no memory model beyond program order, no streams or events (calls run at
// once), no NCCL or cuDNN; fibers have 256 KiB stacks; each switch costs a few hundred
// nanoseconds, so launches of millions of threads take seconds.
#pragma once

#include <math.h>  // CUDA's math functions in the global namespace (isfinite, fabsf, ...)

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace zt::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

enum class ThreadOrder { kForward, kReverse, kRandom };
// How the fibers of a block are ordered within each round (all later launches on any thread).
void set_thread_order(ThreadOrder order, uint64_t seed = 1);
ThreadOrder thread_order();

// Device memory (cudaMalloc / cudaFree): 256-byte aligned; PROT_NONE outside emulated calls
// when guard_enabled(); NaN-filled and followed by an unmapped page when strict_enabled().
// device_free takes what device_alloc returned (or null).
bool guard_enabled();
bool strict_enabled();
// Whether the backend says its device memory is the host's (Backend::host_addressable), so that
// the engine writes it directly: true unless guarded. set_opaque_memory(true) makes it false
// while the host can still read the memory (the guard's segfaults spared): the engine then
// takes a GPU's paths (staging, copies on the copy streams, their joins and waits) on several
// ranks, whose MPI communicators read the device memory directly. Tests only.
bool host_addressable();
void set_opaque_memory(bool opaque);
// The emulated devices (cudaGetDeviceCount; n >= 1) and the calling thread's current one.
void set_device_count(int n);
int device_count();
int current_device();
void set_current_device(int device);  // cudaSetDevice, after its range check
void* device_alloc(size_t bytes);
void device_free(void* p);
// Opens every device allocation for the lifetime of the object (nested and from any thread:
// closed again when the last one ends). A no-op without the guard.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// The indices of the running thread (valid inside a launch).
struct ThreadIndex {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadIndex& self();

// Strict mode: aborts unless [p, p + bytes) lies inside one device allocation (device) or
// outside every one (host); `what` names the call. A no-op otherwise.
void check_range(const void* p, size_t bytes, bool device, const char* what);
// Whether p is inside a device allocation (strict mode only; false otherwise).
bool is_device_pointer(const void* p);

// Runs body once per thread of a grid x block launch (blocks in order, threads as fibers), with
// `smem` bytes of dynamic shared memory per block (dynamic_shared()). Aborts on a launch sm_90
// refuses; `kernel` identifies the function for set_max_dynamic_smem.
void launch(Dim3 grid, Dim3 block, const std::function<void()>& body, size_t smem = 0,
            const void* kernel = nullptr);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
bool set_max_dynamic_smem(const void* kernel, int bytes);
// The running block's dynamic shared memory (16-byte aligned).
void* dynamic_shared();
// Strict mode, in code built with -fsanitize=thread (races.cc): how many times a thread gave
// way to another at a memory operation, in launches on this OS thread so far.
uint64_t memory_yields();
// Strict mode: turns the race detector off (false) or back on, the interleaving staying on
// (for a test that shows what a race does without the detector stopping at it).
void set_race_detection(bool on);

namespace detail {
// Where the running emulated thread is, for the race detector (races.cc).
struct AccessContext {
  uint64_t launch, block, block_epoch, warp_epoch;
  uint32_t thread;  // linear, within the block
  const char *stack_lo, *stack_hi;
};
bool access_context(AccessContext* c);  // false outside a kernel
// Lets the other ready threads of the block run first, one time in four (the launch's seed).
void yield_at_memory_operation();
}  // namespace detail

// __syncthreads(): waits until every live thread of the block arrives.
void sync_block();
// Exchanges one 8-byte value per lane with the live lanes of the calling thread's warp:
// posts `value` and returns the value lane `src_lane` posted (its own when src_lane is outside
// the warp or not live). `mask` is the call's lane mask, checked in strict mode; src_lane < 0
// reads nothing (__syncwarp).
uint64_t warp_exchange(uint64_t value, int src_lane, unsigned mask = 0xffffffffu);
int lane_id();
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (PTX ISA, "Matrix Fragments
// for mma.m16n8k16 with floating point type"): d += A (16x16) B (16x8) over the warp, each lane
// holding its fragments in the PTX layout (g = lane / 4, t = lane % 4): a[0..3] the 16-bit pairs
// A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..] (lower column in the low half);
// b[0..1] the pairs B[2t..][g], B[2t+8..][g]; d[0..3] D[g][2t], D[g][2t+1], D[g+8][2t],
// D[g+8][2t+1]. One fragment exchange among the 32 lanes, which must all be live (aborts
// otherwise: .aligned); products exact in fp32, summed over k in order, then added to d (a
// GPU's tensor cores sum in their own order and precision: agreement within tolerances).
void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf16);

// ldmatrix's exchange: every lane of the warp posts `value` (its row address) and reads all 32
// lanes' posts into `all`, by lane. Aborts unless all 32 lanes take part (.aligned), or when
// the address is not 16-byte aligned or (strict mode) lies in device memory.
void warp_gather(uint64_t value, uint64_t (&all)[32]);

// cp.async (PTX ISA, "cp.async", "cp.async.commit_group", "cp.async.wait_group"): the copies the
// running thread has issued and not yet landed, each with the group it belongs to (the count of
// groups committed before it), and the count of its committed groups. model/cuda/async_copy.cuh
// issues, commits and lands them in the kernel's own (instrumented) code, so the race detector
// sees a copy's write where it is issued and its data where it is waited for. A fixed array, in
// the thread's own fiber: heap memory freed by one thread and taken by another would look like
// a race to the detector.
struct alignas(16) Bytes16 {
  uint32_t w[4];
};
struct AsyncCopy {
  Bytes16* dst;        // shared memory
  const Bytes16* src;  // global memory; null: zeros (src-size 0)
  unsigned group;
};
struct AsyncCopies {
  static constexpr int kMax = 64;  // in flight a thread (aborts past it)
  AsyncCopy pending[kMax];
  int count = 0;
  unsigned committed = 0;
};
AsyncCopies& async_copies();
// Stops the program saying what a kernel did that a GPU does not allow (the emulation's message).
[[noreturn]] void kernel_fault(const char* what);

template <class T>
T shfl(T v, int src_lane, unsigned mask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(bits, src_lane, mask);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace zt::emu

// ---- the CUDA spellings kernels use ----

using dim3 = zt::emu::Dim3;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define threadIdx (::zt::emu::self().thread_idx)
#define blockIdx (::zt::emu::self().block_idx)
#define blockDim (::zt::emu::self().block_dim)
#define gridDim (::zt::emu::self().grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { zt::emu::sync_block(); }
// Every live lane of the warp arrives before any goes on (an exchange whose value is unused).
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)zt::emu::warp_exchange(0, -1, mask); }

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = zt::emu::lane_id();
  return zt::emu::shfl(v, (lane / width) * width + src_lane % width, mask);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = zt::emu::lane_id();
  const int src = lane ^ lane_mask;
  return zt::emu::shfl(v, src / width == lane / width ? src : lane, mask);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = zt::emu::lane_id();
  const int src = lane + (int)delta;
  return zt::emu::shfl(v, src / width == lane / width ? src : lane, mask);
}

// Atomics are not seen by the race detector (races.cc): they are what makes such accesses safe.
template <class T>
__attribute__((no_sanitize_thread)) T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
__attribute__((no_sanitize_thread)) T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}

// CUDA's integer and floating max / min (the floating ones as fmaxf / fminf: NaN loses).
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }

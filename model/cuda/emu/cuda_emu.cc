#include "model/cuda/emu/cuda_emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace zt::emu {
namespace {

constexpr size_t kStack = 256 << 10;
constexpr int kWarp = 32;

// ZT_CUDA_EMU_ORDER=forward|reverse|random and ZT_CUDA_EMU_SEED set the starting order, so a
// test binary runs in each order without code (tests/CMakeLists.txt).
ThreadOrder order_from_env() {
  const char* e = std::getenv("ZT_CUDA_EMU_ORDER");
  const std::string v = e ? e : "";
  return v == "reverse" ? ThreadOrder::kReverse
         : v == "random" ? ThreadOrder::kRandom
                         : ThreadOrder::kForward;
}
uint64_t seed_from_env() {
  const char* e = std::getenv("ZT_CUDA_EMU_SEED");
  return e ? std::strtoull(e, nullptr, 10) : 1;
}

std::atomic<int> g_order{static_cast<int>(order_from_env())};
std::atomic<uint64_t> g_seed{seed_from_env()};

// ---- context switching ----
// x86-64: the callee-saved registers go on the stack and the stack pointers swap, with no
// system call (swapcontext saves the signal mask with one, which made a small training step
// take a second). The FP control words (MXCSR, x87) are not switched: every fiber runs with
// the launching thread's, and kernels do not change them. Elsewhere: ucontext.
#if defined(__x86_64__)
extern "C" void zt_emu_switch(void** save_sp, void* load_sp);
asm(R"(
.text
.globl zt_emu_switch
.type zt_emu_switch,@function
zt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size zt_emu_switch,.-zt_emu_switch
)");

struct Context {
  void* sp = nullptr;
};
// Prepares c to start fn (which never returns) on [stack, stack + size): the frame
// zt_emu_switch pops, whose return address is fn, entered with the alignment of a call.
void prepare(Context& c, void* stack, size_t size, void (*fn)()) {
  auto top = reinterpret_cast<uintptr_t>(stack) + size;
  top &= ~uintptr_t{15};
  auto* w = reinterpret_cast<uint64_t*>(top);
  w[-2] = reinterpret_cast<uint64_t>(fn);  // popped by ret: fn starts with rsp = top - 8
  for (int r = 3; r <= 8; ++r) w[-r] = 0;  // rbp rbx r12 r13 r14 r15
  c.sp = &w[-8];
}
void jump(Context& from, Context& to) { zt_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
void prepare(Context& c, void* stack, size_t size, void (*fn)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, fn, 0);
}
void jump(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  Context ctx;
  void* stack = nullptr;
  ThreadIndex index;
  int linear = 0;  // thread number within the block (x fastest)
  State state = State::kReady;
  uint64_t posted = 0;  // warp_exchange: this lane's value
  // mma_m16n8k16: this lane's fragments, in two slots used in turn, so a lane that has read the
  // others' can post its next before they have read its last.
  struct MmaFragments {
    uint32_t a[4], b[2];
  } mma[2];
  unsigned mma_count = 0;
  bool fence = false;   // warp_exchange: a __syncwarp (orders memory), not a shuffle
  // warp_gather: this lane's posts in two slots used in turn, as mma's fragments.
  uint64_t gathered[2] = {};
  unsigned gather_count = 0;
  AsyncCopies async;  // cp.async: copies issued and not yet landed
};

// One launch in progress on this OS thread.
struct Scheduler {
  Context main;
  std::vector<Fiber> fibers;  // one per thread of the current block
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::mt19937_64 rng;
  std::vector<float> smem;  // the block's dynamic shared memory
  // For the race detector (races.cc): the launch, the block (linear), and the barrier intervals
  // so far of the block and of each of its warps.
  uint64_t launch = 0, block = 0, block_epoch = 0;
  std::vector<uint64_t> warp_epochs;
  // mma_m16n8k16: each warp's last product A B (16 x 8), computed by the first of its lanes to
  // read it; `count` is the lanes' mma_count it belongs to.
  struct WarpMma {
    unsigned count = 0;
    float ab[16][8];
  };
  std::vector<WarpMma> warp_mma;
};

thread_local Scheduler* t_sched = nullptr;
thread_local uint64_t t_memory_yields = 0;

// Fiber stacks, kept for the next launch on this thread (mapping them is most of a small
// launch's cost).
struct StackPool {
  std::vector<void*> free;
  ~StackPool() {
    for (void* s : free) munmap(s, kStack);
  }
};
thread_local StackPool t_stacks;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s\n", what);
  std::abort();
}
[[noreturn]] void die(const std::string& what) { die(what.c_str()); }

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}
const bool g_strict = env_is_1("ZT_CUDA_EMU_STRICT");

[[noreturn]] void entry() {
  Scheduler& s = *t_sched;
  (*s.body)();
  s.current->state = State::kDone;
  jump(s.current->ctx, s.main);  // never resumed
  __builtin_unreachable();
}

void yield(State wait) {
  Scheduler& s = *t_sched;
  if (!s.current) die("a synchronisation call outside a kernel launch");
  s.current->state = wait;
  jump(s.current->ctx, s.main);
}

// The warp of fiber f: [first, end) in s.fibers.
std::pair<size_t, size_t> warp_of(const Scheduler& s, size_t f) {
  const size_t first = f / kWarp * kWarp;
  return {first, std::min(s.fibers.size(), first + kWarp)};
}

// After a round: every fiber is done or waiting. Releases a barrier whose group has all its
// live members waiting at it; aborts on a deadlock. Returns false when every fiber is done.
bool release(Scheduler& s) {
  for (const Fiber& f : s.fibers)  // one that gave way at a memory operation goes on
    if (f.state == State::kReady) return true;
  bool live = false, any_block = false, all_block = true;
  for (const Fiber& f : s.fibers) {
    if (f.state == State::kDone) continue;
    live = true;
    any_block |= f.state == State::kAtBlockBarrier;
    all_block &= f.state == State::kAtBlockBarrier;
  }
  if (!live) return false;
  bool released = false;
  for (size_t w = 0; w < s.fibers.size(); w += kWarp) {  // warps whose live lanes all arrived
    const auto [first, end] = warp_of(s, w);
    bool waiting = false, all = true;
    for (size_t i = first; i < end; ++i) {
      const State st = s.fibers[i].state;
      if (st == State::kDone) continue;
      waiting |= st == State::kAtWarpBarrier;
      all &= st == State::kAtWarpBarrier;
    }
    if (waiting && all) {
      bool fence = false;
      for (size_t i = first; i < end; ++i) {
        if (s.fibers[i].state != State::kAtWarpBarrier) continue;
        s.fibers[i].state = State::kReady;
        fence |= s.fibers[i].fence;
      }
      if (fence) ++s.warp_epochs[w / kWarp];  // a __syncwarp orders the lanes' memory
      released = true;
    }
  }
  if (released) return true;
  if (all_block) {
    for (Fiber& f : s.fibers)
      if (f.state == State::kAtBlockBarrier) f.state = State::kReady;
    ++s.block_epoch;
    return true;
  }
  die(any_block ? "a warp shuffle while a lane of the same warp waits in __syncthreads() "
                  "(a deadlock on a GPU)"
                : "a warp shuffle that some live lanes of the warp never reach");
}

void run_block(Scheduler& s) {
  std::vector<size_t> order(s.fibers.size());
  std::iota(order.begin(), order.end(), 0);
  const auto mode = static_cast<ThreadOrder>(g_order.load());
  if (mode == ThreadOrder::kReverse) std::reverse(order.begin(), order.end());
  do {
    if (mode == ThreadOrder::kRandom) std::shuffle(order.begin(), order.end(), s.rng);
    for (size_t i : order) {
      Fiber& f = s.fibers[i];
      if (f.state != State::kReady) continue;
      s.current = &f;
      jump(s.main, f.ctx);
      s.current = nullptr;
    }
  } while (release(s));
}

}  // namespace

void set_thread_order(ThreadOrder order, uint64_t seed) {
  g_order = static_cast<int>(order);
  g_seed = seed;
}
ThreadOrder thread_order() { return static_cast<ThreadOrder>(g_order.load()); }

const ThreadIndex& self() {
  if (!t_sched || !t_sched->current) die("threadIdx or blockIdx read outside a kernel launch");
  return t_sched->current->index;
}

int lane_id() {
  const Scheduler& s = *t_sched;
  return s.current->linear % kWarp;
}

// ---- device memory, its guard and its strict checks ----
namespace {

// A device allocation made with mmap (under the guard or in strict mode): `bytes` asked for,
// at `data`; [base, base + open_bytes) is what the guard opens and closes; in strict mode one
// more page, never opened, follows.
struct Mapping {
  char* base;
  size_t open_bytes, mapped, bytes;
  int device;  // current on the thread that allocated it
};
struct Registry {
  std::mutex mu;
  std::map<const char*, Mapping> maps;  // by data address
  int open = 0;                         // DeviceAccess objects alive
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: frees may come from static destructors
  return *r;
}
const bool g_guard = env_is_1("ZT_CUDA_EMU_GUARD");
constexpr size_t kPage = 4096;

void protect_all(Registry& r, int prot) {
  for (auto& [p, m] : r.maps)
    if (mprotect(m.base, m.open_bytes, prot) != 0) die("mprotect failed on emulated device memory");
}

// The allocation holding p, or null (r.mu held).
const std::pair<const char* const, Mapping>* find(Registry& r, const void* p) {
  auto it = r.maps.upper_bound(static_cast<const char*>(p));
  if (it == r.maps.begin()) return nullptr;
  --it;
  const char* c = static_cast<const char*>(p);
  return c < it->first + std::max<size_t>(it->second.bytes, 1) ? &*it : nullptr;
}

}  // namespace

bool guard_enabled() { return g_guard; }
bool strict_enabled() { return g_strict; }
namespace {
std::atomic<bool> g_opaque{false};
}  // namespace
bool host_addressable() { return !g_guard && !g_opaque; }
void set_opaque_memory(bool opaque) { g_opaque = opaque; }

namespace {
std::atomic<int> g_device_count{1};
thread_local int t_device = 0;
}  // namespace
void set_device_count(int n) { g_device_count = std::max(n, 1); }
int device_count() { return g_device_count.load(); }
int current_device() { return t_device; }
void set_current_device(int device) { t_device = device; }

void* device_alloc(size_t bytes) {
  const size_t n = (bytes + 255) / 256 * 256;
  if (!g_guard && !g_strict) return std::aligned_alloc(256, n + 256);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const size_t open_bytes = std::max<size_t>((n + kPage - 1) / kPage, 1) * kPage;
  const size_t mapped = open_bytes + (g_strict ? kPage : 0);
  auto* base = static_cast<char*>(
      mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (base == MAP_FAILED) return nullptr;
  char* data = base;
  if (g_strict) {  // NaN everywhere, and the end against a page that faults
    std::memset(base, 0xFF, open_bytes);
    if (mprotect(base + open_bytes, kPage, PROT_NONE) != 0) die("mprotect failed");
    data = base + open_bytes - std::max<size_t>(n, 256);
  }
  if (g_guard && !r.open && mprotect(base, open_bytes, PROT_NONE) != 0) die("mprotect failed");
  r.maps[data] = {base, open_bytes, mapped, bytes, current_device()};
  return data;
}

void device_free(void* p) {
  if (!p) return;
  if (!g_guard && !g_strict) return std::free(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.maps.find(static_cast<const char*>(p));
  if (it == r.maps.end()) die("cudaFree of a pointer cudaMalloc did not return");
  munmap(it->second.base, it->second.mapped);
  r.maps.erase(it);
}

bool is_device_pointer(const void* p) {
  if (!g_strict) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return find(r, p) != nullptr;
}

void check_range(const void* p, size_t bytes, bool device, const char* what) {
  if (!g_strict || bytes == 0) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const char* c = static_cast<const char*>(p);
  const auto* a = find(r, c);
  char msg[256];
  if (device && !a) {
    std::snprintf(msg, sizeof msg, "%s: %p is not in any device allocation", what, p);
    die(msg);
  }
  if (device && a->second.device != current_device()) {
    std::snprintf(msg, sizeof msg,
                  "%s: memory of GPU %d touched by a host thread whose current device is GPU %d "
                  "(cudaSetDevice on this thread first)",
                  what, a->second.device, current_device());
    die(msg);
  }
  if (device && c + bytes > a->first + a->second.bytes) {
    std::snprintf(msg, sizeof msg,
                  "%s: %zu bytes at offset %td run past the end of a %zu-byte device allocation",
                  what, bytes, c - a->first, a->second.bytes);
    die(msg);
  }
  if (!device) {
    auto next = r.maps.lower_bound(c);
    if (a || (next != r.maps.end() && next->first < c + bytes)) {
      std::snprintf(msg, sizeof msg, "%s: the host range %p + %zu bytes is device memory", what,
                    p, bytes);
      die(msg);
    }
  }
}

DeviceAccess::DeviceAccess() {
  if (!g_guard) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.open++ == 0) protect_all(r, PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  if (!g_guard) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (--r.open == 0) protect_all(r, PROT_NONE);
}

// ---- launches ----
namespace {

constexpr size_t kSmemDefault = 48 << 10, kSmemMax = 227 << 10;  // sm_90, per block
std::mutex g_attr_mu;
std::map<const void*, int> g_max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize

void check_launch(Dim3 grid, Dim3 block, size_t smem, const void* kernel) {
  const size_t threads = (size_t)block.x * block.y * block.z;
  char msg[200];
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) {
    std::snprintf(msg, sizeof msg, "a block of %u x %u x %u threads (sm_90: at most 1024 x 1024 "
                  "x 64, and 1024 in all)", block.x, block.y, block.z);
    die(msg);
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535) {
    std::snprintf(msg, sizeof msg, "a grid of %u x %u x %u blocks (sm_90: 1..2^31-1 x 1..65535 "
                  "x 1..65535)", grid.x, grid.y, grid.z);
    die(msg);
  }
  int opt_in = 0;
  {
    std::lock_guard<std::mutex> lock(g_attr_mu);
    auto it = g_max_dynamic_smem.find(kernel);
    if (kernel && it != g_max_dynamic_smem.end()) opt_in = it->second;
  }
  if (smem > kSmemMax || (smem > kSmemDefault && smem > (size_t)opt_in && g_strict)) {
    std::snprintf(msg, sizeof msg, "%zu bytes of dynamic shared memory: over 48 KiB needs "
                  "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                  "bytes) first (this kernel's: %d), and sm_90 allows at most 227 KiB", smem,
                  opt_in);
    die(msg);
  }
}

}  // namespace

bool set_max_dynamic_smem(const void* kernel, int bytes) {
  if (bytes < 0 || (size_t)bytes > kSmemMax) return false;
  std::lock_guard<std::mutex> lock(g_attr_mu);
  g_max_dynamic_smem[kernel] = bytes;
  return true;
}

void* dynamic_shared() {
  if (!t_sched || !t_sched->current) die("dynamic shared memory read outside a kernel launch");
  return t_sched->smem.data();
}

void launch(Dim3 grid, Dim3 block, const std::function<void()>& body, size_t smem,
            const void* kernel) {
  if (t_sched) die("a kernel launched from inside a kernel");
  check_launch(grid, block, smem, kernel);
  DeviceAccess access;
  const size_t threads = (size_t)block.x * block.y * block.z;
  Scheduler s;
  s.body = &body;
  s.rng.seed(g_seed.load());
  static std::atomic<uint64_t> launches{0};
  s.launch = ++launches;
  s.fibers.resize(threads);
  for (Fiber& f : s.fibers) {
    if (!t_stacks.free.empty()) {
      f.stack = t_stacks.free.back();
      t_stacks.free.pop_back();
      continue;
    }
    f.stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f.stack == MAP_FAILED) die("no memory for fiber stacks");
  }
  t_sched = &s;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        size_t i = 0;
        for (unsigned tz = 0; tz < block.z; ++tz)
          for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx, ++i) {
              Fiber& f = s.fibers[i];
              f.index = {Dim3(tx, ty, tz), Dim3(bx, by, bz), block, grid};
              f.linear = (int)i;
              f.state = State::kReady;
              f.mma_count = 0;
              f.gather_count = 0;
              f.async.count = 0;  // copies a thread never waited for end with its block
              f.async.committed = 0;
              if (i % kWarp == 0 && s.warp_mma.size() > i / kWarp) s.warp_mma[i / kWarp].count = 0;
              prepare(f.ctx, f.stack, kStack, entry);
            }
        // Each block's dynamic shared memory starts as garbage on a GPU: NaN here.
        s.smem.assign((smem + 3) / 4, g_strict ? std::numeric_limits<float>::quiet_NaN() : 0.f);
        s.block_epoch = 0;
        s.warp_epochs.assign((threads + kWarp - 1) / kWarp, 0);
        run_block(s);
        ++s.block;
      }
  t_sched = nullptr;
  for (Fiber& f : s.fibers) t_stacks.free.push_back(f.stack);
}

uint64_t memory_yields() { return t_memory_yields; }

namespace detail {

bool access_context(AccessContext* c) {
  const Scheduler* s = t_sched;
  if (!s || !s->current) return false;
  const Fiber& f = *s->current;
  c->launch = s->launch;
  c->block = s->block;
  c->thread = (uint32_t)f.linear;
  c->block_epoch = s->block_epoch;
  c->warp_epoch = s->warp_epochs[(size_t)f.linear / kWarp];
  c->stack_lo = static_cast<const char*>(f.stack);
  c->stack_hi = c->stack_lo + kStack;
  return true;
}

void yield_at_memory_operation() {
  Scheduler& s = *t_sched;
  if ((s.rng() & 3) != 0) return;  // one operation in four gives way, by the launch's seed
  ++t_memory_yields;
  jump(s.current->ctx, s.main);  // stays ready: the others of this round run first
}

}  // namespace detail

void sync_block() { yield(State::kAtBlockBarrier); }

namespace {
// Strict mode: a warp-synchronous call's mask names the caller and its source lane, and the
// source lane exists and has not exited (CUDA C++ Programming Guide, "Warp Shuffle Functions":
// otherwise the value read is undefined; naming exited lanes in the mask is allowed). Lanes
// [first, end) of s.fibers are the warp's.
void check_mask(const Scheduler& s, size_t first, size_t end, size_t lane, int src_lane,
                unsigned mask) {
  std::string bad;
  if (!(mask >> lane & 1)) {
    bad = "whose mask leaves out the calling lane " + std::to_string(lane);
  } else if (src_lane >= 0 && src_lane < kWarp) {
    const std::string src = std::to_string(src_lane);
    if (!(mask >> src_lane & 1))
      bad = "whose mask leaves out the source lane " + src;
    else if (first + src_lane >= end)
      bad = "reading lane " + src + ", which this block's last warp does not have";
    else if (s.fibers[first + src_lane].state == State::kDone)
      bad = "reading lane " + src + ", which has exited";
  }
  if (!bad.empty()) {
    char m[32];
    std::snprintf(m, sizeof m, " (mask 0x%08x)", mask);
    die("a warp shuffle or __syncwarp " + bad + m + ": undefined on a GPU");
  }
}
}  // namespace

uint64_t warp_exchange(uint64_t value, int src_lane, unsigned mask) {
  Scheduler& s = *t_sched;
  if (!s.current) die("a warp shuffle outside a kernel launch");
  Fiber* me = s.current;
  me->posted = value;
  me->fence = src_lane < 0;
  yield(State::kAtWarpBarrier);  // every live lane has posted
  const auto [first, end] = warp_of(s, (size_t)me->linear);
  if (g_strict) check_mask(s, first, end, (size_t)me->linear - first, src_lane, mask);
  const size_t src = first + (size_t)src_lane;  // src_lane < 0 (__syncwarp): reads nothing
  const uint64_t got = src_lane >= 0 && src < end && s.fibers[src].state != State::kDone
                           ? s.fibers[src].posted
                           : value;
  yield(State::kAtWarpBarrier);  // every live lane has read before anyone posts again
  return got;
}

void warp_gather(uint64_t value, uint64_t (&all)[32]) {
  Scheduler& s = *t_sched;
  if (!s.current) die("ldmatrix outside a kernel launch");
  Fiber* me = s.current;
  const unsigned slot = me->gather_count++ % 2;
  me->gathered[slot] = value;
  me->fence = false;
  yield(State::kAtWarpBarrier);  // every live lane has posted
  if (value % 16 != 0) die("ldmatrix given a row address that is not 16-byte aligned");
  if (is_device_pointer(reinterpret_cast<const void*>(value)))
    die("ldmatrix given a row address in device memory, not shared memory");
  const auto [first, end] = warp_of(s, (size_t)me->linear);
  for (size_t f = first; f < end; ++f)  // a lane that has read may be one ahead, none behind
    if (end - first != kWarp || s.fibers[f].gather_count < me->gather_count)
      die("ldmatrix reached by only some lanes of the warp: .aligned needs all 32 together");
  for (size_t f = first; f < end; ++f) all[f - first] = s.fibers[f].gathered[slot];
}

AsyncCopies& async_copies() {
  if (!t_sched || !t_sched->current) die("cp.async outside a kernel launch");
  return t_sched->current->async;
}
void kernel_fault(const char* what) { die(what); }

namespace {
float half_bits_to_f32(uint32_t bits, bool bf16) {
  if (bf16) {
    bits <<= 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return f16_to_f32(static_cast<uint16_t>(bits));
}
// Element i (0 low, 1 high) of the 16-bit pair in r, as fp32.
float pair_element(uint32_t r, int i, bool bf16) {
  return half_bits_to_f32(r >> (16 * i) & 0xffffu, bf16);
}
}  // namespace

void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf16) {
  Scheduler& s = *t_sched;
  if (!s.current) die("mma.sync outside a kernel launch");
  Fiber* me = s.current;
  const unsigned slot = me->mma_count++ % 2;
  std::memcpy(me->mma[slot].a, a, sizeof me->mma[slot].a);
  std::memcpy(me->mma[slot].b, b, sizeof me->mma[slot].b);
  me->fence = false;
  yield(State::kAtWarpBarrier);  // every live lane has posted its fragments
  const auto [first, end] = warp_of(s, (size_t)me->linear);
  if (end - first != kWarp) die("mma.sync in a warp of fewer than 32 threads: undefined on a GPU");
  const size_t warp = first / kWarp;
  if (s.warp_mma.size() <= warp) s.warp_mma.resize(warp + 1);
  Scheduler::WarpMma& w = s.warp_mma[warp];
  if (w.count != me->mma_count) {  // the first lane here: A B from the fragments
    for (size_t f = first; f < end; ++f)  // none has read yet, so none is ahead
      if (s.fibers[f].mma_count != me->mma_count)
        die("mma.sync reached by only some lanes of the warp: .aligned needs all 32 together");
    float A[16][16], B[16][8];
    for (int lane = 0; lane < kWarp; ++lane) {
      const Fiber::MmaFragments& f = s.fibers[first + lane].mma[slot];
      const int g = lane / 4, t = lane % 4;
      for (int j = 0; j < 4; ++j) {  // a[j]: row g + 8 (j % 2), columns 2t + 8 (j / 2) + {0, 1}
        const int r = g + 8 * (j % 2), c = 2 * t + 8 * (j / 2);
        A[r][c] = pair_element(f.a[j], 0, bf16), A[r][c + 1] = pair_element(f.a[j], 1, bf16);
      }
      for (int j = 0; j < 2; ++j) {  // b[j]: rows 2t + 8 j + {0, 1}, column g
        const int k = 2 * t + 8 * j;
        B[k][g] = pair_element(f.b[j], 0, bf16), B[k + 1][g] = pair_element(f.b[j], 1, bf16);
      }
    }
    for (int r = 0; r < 16; ++r) {  // each sum over k in order (n innermost: vectorised)
      float sum[8] = {};
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 8; ++n) sum[n] += A[r][k] * B[k][n];
      std::memcpy(w.ab[r], sum, sizeof sum);
    }
    w.count = me->mma_count;
  }
  const int lane = me->linear - (int)first, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) d[i] += w.ab[g + 8 * (i / 2)][2 * t + i % 2];
}

}  // namespace zt::emu

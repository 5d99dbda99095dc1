#include "model/cuda/emu/cuda_emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

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
};

// One launch in progress on this OS thread.
struct Scheduler {
  Context main;
  std::vector<Fiber> fibers;  // one per thread of the current block
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::mt19937_64 rng;
};

thread_local Scheduler* t_sched = nullptr;

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
      for (size_t i = first; i < end; ++i)
        if (s.fibers[i].state == State::kAtWarpBarrier) s.fibers[i].state = State::kReady;
      released = true;
    }
  }
  if (released) return true;
  if (all_block) {
    for (Fiber& f : s.fibers)
      if (f.state == State::kAtBlockBarrier) f.state = State::kReady;
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

// ---- device memory and its guard ----
namespace {

struct Guard {
  std::mutex mu;
  std::map<void*, size_t> maps;  // guarded allocations: address -> mapped bytes
  int open = 0;                  // DeviceAccess objects alive
};
Guard& guard() {
  static Guard* g = new Guard;  // never destroyed: frees may come from static destructors
  return *g;
}
const bool g_guard = [] {
  const char* v = std::getenv("ZT_CUDA_EMU_GUARD");
  return v && std::string(v) == "1";
}();

void protect_all(Guard& g, int prot) {
  for (auto& [p, n] : g.maps)
    if (mprotect(p, n, prot) != 0) die("mprotect failed on emulated device memory");
}

}  // namespace

bool guard_enabled() { return g_guard; }

void* device_alloc(size_t bytes) {
  const size_t n = (bytes + 255) / 256 * 256 + 256;
  if (!g_guard) return std::aligned_alloc(256, n);
  const size_t page = 4096, mapped = (n + page - 1) / page * page;
  Guard& g = guard();
  std::lock_guard<std::mutex> lock(g.mu);
  void* p = mmap(nullptr, mapped, g.open ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  g.maps[p] = mapped;
  return p;
}

void device_free(void* p) {
  if (!p) return;
  if (!g_guard) return std::free(p);
  Guard& g = guard();
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.maps.find(p);
  if (it == g.maps.end()) die("cudaFree of a pointer cudaMalloc did not return");
  munmap(it->first, it->second);
  g.maps.erase(it);
}

DeviceAccess::DeviceAccess() {
  if (!g_guard) return;
  Guard& g = guard();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.open++ == 0) protect_all(g, PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  if (!g_guard) return;
  Guard& g = guard();
  std::lock_guard<std::mutex> lock(g.mu);
  if (--g.open == 0) protect_all(g, PROT_NONE);
}

void launch(Dim3 grid, Dim3 block, const std::function<void()>& body) {
  if (t_sched) die("a kernel launched from inside a kernel");
  DeviceAccess access;
  const size_t threads = (size_t)block.x * block.y * block.z;
  if (threads == 0 || threads > 1024) die("block size must be 1..1024 threads");
  Scheduler s;
  s.body = &body;
  s.rng.seed(g_seed.load());
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
              prepare(f.ctx, f.stack, kStack, entry);
            }
        run_block(s);
      }
  t_sched = nullptr;
  for (Fiber& f : s.fibers) t_stacks.free.push_back(f.stack);
}

void sync_block() { yield(State::kAtBlockBarrier); }

uint64_t warp_exchange(uint64_t value, int src_lane) {
  Scheduler& s = *t_sched;
  if (!s.current) die("a warp shuffle outside a kernel launch");
  Fiber* me = s.current;
  me->posted = value;
  yield(State::kAtWarpBarrier);  // every live lane has posted
  const auto [first, end] = warp_of(s, (size_t)me->linear);
  const size_t src = first + (size_t)src_lane;
  const uint64_t got = src < end && s.fibers[src].state != State::kDone ? s.fibers[src].posted
                                                                         : value;
  yield(State::kAtWarpBarrier);  // every live lane has read before anyone posts again
  return got;
}

}  // namespace zt::emu

// The strict emulation's race detector and memory-operation interleaving (ZT_CUDA_EMU_STRICT=1).
//
// The kernels' translation units are compiled with -fsanitize=thread (model/CMakeLists.txt), but
// linked without ThreadSanitizer's runtime: the compiler's calls before every load and store
// (__tsan_read4, __tsan_write8, ...) come here. Inside a kernel, for each byte of memory that is
// not the thread's own stack, the last write and the last read are kept with who made them (the
// launch, the block, the thread, and the block's and its warp's barrier intervals then). Two
// accesses of one block are ordered when one thread made both, or a __syncthreads lies between
// them, or, in one warp, a __syncwarp does (a shuffle does not order memory). Reported, and the
// program stopped:
//   - a write and a read or write by another thread of the block, unordered (a missing
//     __syncthreads or __syncwarp: shared or global memory alike);
//   - two blocks of one launch accessing one device memory address, one of them writing
//     (blocks run in no set order; shared memory is each block's own).
// Atomics are not instrumented (cuda_emu.h), so they neither race nor order. Before each access
// a thread may give way to the others (one time in four, by the launch's seed), so code that
// relies on warp-synchronous execution also shows as a wrong result in some order.
// Outside strict mode every hook returns at once.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "model/cuda/emu/cuda_emu.h"

namespace zt::emu {
namespace {

struct Access {
  uint64_t launch = 0;  // 0: none
  uint64_t block, block_epoch, warp_epoch;
  uint32_t thread;
  void* pc;
};
struct Cell {
  Access write, read;
  bool readers = false;  // more than one thread read since the last ordering point
};
// Per OS thread: launches run on the thread that makes them. Keyed by address (bytes).
thread_local std::unordered_map<uintptr_t, Cell> t_shadow;
thread_local uint64_t t_shadow_launch = 0;

bool same_warp(const Access& a, const Access& b) { return a.thread / 32 == b.thread / 32; }
// a happened before b (both of this launch and block).
bool ordered(const Access& a, const Access& b) {
  return a.thread == b.thread || a.block_epoch != b.block_epoch ||
         (same_warp(a, b) && a.warp_epoch != b.warp_epoch);
}

// "file:line < its caller's file:line < ..." for a program counter, innermost first (kernels
// are often inlined), by addr2line: the program stops anyway.
std::string where(void* pc) {
  Dl_info info;
  if (!dladdr(pc, &info) || !info.dli_fname) return "?";
  char cmd[512];
  std::snprintf(cmd, sizeof cmd, "addr2line -f -C -i -e '%s' %p 2>/dev/null", info.dli_fname,
                (void*)((char*)pc - (char*)info.dli_fbase - 1));
  std::string out, fn;
  if (FILE* f = popen(cmd, "r")) {
    char buf[1024];
    for (int i = 0; fgets(buf, sizeof buf, f) && i < 8; ++i) {  // function, file:line, ...
      std::string l(buf);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      if (i % 2 == 0) {
        fn = l;
      } else if (i < 6) {  // the location (addr2line's names of inlined frames are unreliable)
        const std::string at = l.substr(l.rfind('/') + 1);
        out += (out.empty() ? "" : " < ") + (at.starts_with("??") ? fn : at);
      }
    }
    pclose(f);
  }
  return out.empty() ? "?" : out;
}

[[noreturn]] void report(const char* what, uintptr_t addr, const Access& now, bool now_writes,
                         const Access& before, bool before_wrote) {
  std::fprintf(stderr,
               "CUDA emulation: a data race: %s.\n"
               "  block %llu thread %u %s %#lx in %s\n"
               "  block %llu thread %u %s it in %s\n",
               what, (unsigned long long)now.block, now.thread, now_writes ? "writes" : "reads",
               (unsigned long)addr, where(now.pc).c_str(), (unsigned long long)before.block,
               before.thread, before_wrote ? "wrote" : "read", where(before.pc).c_str());
  std::abort();
}

void check(uintptr_t addr, Cell& c, const Access& a, bool write) {
  // Another block's accesses in this launch: of device memory, a race when either side writes
  // (blocks run in no set order); of shared memory (each block's own), history to forget.
  const bool other_w = c.write.launch == a.launch && c.write.block != a.block;
  const bool other_r = c.read.launch == a.launch && c.read.block != a.block;
  if ((other_w || (other_r && write)) && is_device_pointer(reinterpret_cast<void*>(addr))) {
    if (other_w && write)
      report("two blocks of one launch write the same address (no atomic)", addr, a, true,
             c.write, true);
    if (other_w)
      report("a block reads what another block of the launch wrote", addr, a, false, c.write,
             true);
    report("a block writes what another block of the launch read", addr, a, true, c.read, false);
  }
  if (other_w) c.write = Access{};
  if (other_r) c.read = Access{}, c.readers = false;

  const Access& w = c.write;
  if (w.launch == a.launch && !ordered(w, a))
    report("another thread of the block wrote this address with no __syncthreads or __syncwarp "
           "between", addr, a, write, w, true);
  const Access& r = c.read;
  const bool same_interval = r.launch == a.launch && r.block_epoch == a.block_epoch;
  // Several readers in one barrier interval: a __syncwarp orders the writer after its own
  // warp's reads only, so any write in that interval races with one of them.
  if (write && r.launch == a.launch &&
      ((r.thread != a.thread && !ordered(r, a)) || (c.readers && same_interval)))
    report("another thread of the block read this address with no __syncthreads or __syncwarp "
           "between", addr, a, true, r, false);
  if (write) {
    c.write = a;
  } else {
    c.readers = same_interval && (r.thread != a.thread || c.readers);
    c.read = a;
  }
}

std::atomic<bool> g_detect{true};

void access(void* p, size_t size, bool write, void* pc) {
  if (!strict_enabled()) return;
  detail::AccessContext ctx;
  if (!detail::access_context(&ctx)) return;
  const char* c = static_cast<const char*>(p);
  if (c >= ctx.stack_lo && c < ctx.stack_hi) return;  // the thread's own
  detail::yield_at_memory_operation();  // (intervals end only at barriers: ctx still holds)
  if (!g_detect.load(std::memory_order_relaxed)) return;
  if (t_shadow_launch != ctx.launch) {
    t_shadow.clear();
    t_shadow_launch = ctx.launch;
  }
  const Access a{ctx.launch, ctx.block, ctx.block_epoch, ctx.warp_epoch, ctx.thread, pc};
  for (size_t i = 0; i < size; ++i) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(c) + i;
    check(addr, t_shadow[addr], a, write);
  }
}

}  // namespace

void set_race_detection(bool on) { g_detect = on; }

}  // namespace zt::emu

// The calls -fsanitize=thread puts in the instrumented code.
#define ZT_HOOK(n)                                                                        \
  void __tsan_read##n(void* p) { zt::emu::access(p, n, false, __builtin_return_address(0)); } \
  void __tsan_write##n(void* p) { zt::emu::access(p, n, true, __builtin_return_address(0)); } \
  void __tsan_unaligned_read##n(void* p) {                                                \
    zt::emu::access(p, n, false, __builtin_return_address(0));                            \
  }                                                                                       \
  void __tsan_unaligned_write##n(void* p) {                                               \
    zt::emu::access(p, n, true, __builtin_return_address(0));                             \
  }
extern "C" {
ZT_HOOK(1)
ZT_HOOK(2)
ZT_HOOK(4)
ZT_HOOK(8)
ZT_HOOK(16)
void __tsan_read_range(void* p, unsigned long n) {
  zt::emu::access(p, n, false, __builtin_return_address(0));
}
void __tsan_write_range(void* p, unsigned long n) {
  zt::emu::access(p, n, true, __builtin_return_address(0));
}
// Atomics (in host code the instrumented files include: gtest, shared_ptr): done, not tracked.
#define ZT_ATOMICS(bits, T)                                                                     \
  T __tsan_atomic##bits##_load(const volatile T* a, int) {                                     \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                              \
  }                                                                                             \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                                  \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                  \
  }                                                                                             \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                                  \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                        \
  }                                                                                             \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) {                                 \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                         \
  }                                                                                             \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) {                                 \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                         \
  }                                                                                             \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) {                                 \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                         \
  }                                                                                             \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) {                                  \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                          \
  }                                                                                             \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) {                                 \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                         \
  }                                                                                             \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {      \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);   \
  }                                                                                             \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {        \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
  }                                                                                             \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {            \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);         \
    return c;                                                                                   \
  }
ZT_ATOMICS(8, uint8_t)
ZT_ATOMICS(16, uint16_t)
ZT_ATOMICS(32, uint32_t)
ZT_ATOMICS(64, uint64_t)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}

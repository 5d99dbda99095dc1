#include "common/cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace zt {
namespace {

constexpr int kSlots = 16, kPath = 4096;
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<int> count{0};
  char dir[kPath];
  char prefix[64];
};
Slot g_slots[kSlots];
std::once_flag g_handlers;

void on_signal(int sig) {
  run_cleanups();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int register_cleanup_dir(const char* dir, const char* prefix) {
  std::call_once(g_handlers, [] {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      ::sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  });
  if (std::strlen(dir) + 80 >= (size_t)kPath || std::strlen(prefix) >= 64) return -1;
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.used.load()) continue;
    std::strcpy(s.dir, dir);
    std::strcpy(s.prefix, prefix);
    s.count = 0;
    bool expected = false;
    if (s.used.compare_exchange_strong(expected, true)) return i;
  }
  return -1;
}

void set_cleanup_count(int slot, int count) {
  if (slot >= 0) g_slots[slot].count = count;
}

void unregister_cleanup_dir(int slot) {
  if (slot >= 0) g_slots[slot].used = false;
}

void run_cleanups() {
  for (Slot& s : g_slots) {
    if (!s.used.load()) continue;
    char path[kPath + 96];
    const size_t n = std::strlen(s.dir), p = std::strlen(s.prefix);
    for (int k = s.count.load() - 1; k >= 0; --k) {
      std::memcpy(path, s.dir, n);
      path[n] = '/';
      std::memcpy(path + n + 1, s.prefix, p);
      char digits[16];
      int d = 0, v = k;
      do digits[d++] = (char)('0' + v % 10), v /= 10;
      while (v > 0);
      size_t at = n + 1 + p;
      while (d > 0) path[at++] = digits[--d];
      path[at] = '\0';
      ::unlink(path);
    }
    ::rmdir(s.dir);
    s.used = false;
  }
}

}  // namespace zt

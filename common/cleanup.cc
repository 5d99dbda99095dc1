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
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 registered
  char dir[kPath];
};
Slot g_slots[kSlots];
std::once_flag g_handlers;
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
struct sigaction g_previous[3];

void on_signal(int sig) {
  run_cleanups();
  for (int i = 0; i < 3; ++i) {
    if (kSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);  // someone else's handler (e.g. the MPI runtime's)
      return;
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int register_cleanup_dir(const char* dir) {
  std::call_once(g_handlers, [] {
    for (int i = 0; i < 3; ++i) {
      ::sigaction(kSignals[i], nullptr, &g_previous[i]);
      if (g_previous[i].sa_handler == SIG_IGN) continue;  // nohup and friends: leave it ignored
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      ::sigemptyset(&sa.sa_mask);
      ::sigaction(kSignals[i], &sa, nullptr);
    }
  });
  if (std::strlen(dir) >= (size_t)kPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::strcpy(g_slots[i].dir, dir);
    g_slots[i].state = 2;
    return i;
  }
  return -1;
}

void unregister_cleanup_dir(int slot) {
  if (slot >= 0) g_slots[slot].state = 0;
}

void run_cleanups() {
  for (Slot& s : g_slots) {
    int expected = 2;
    if (s.state.compare_exchange_strong(expected, 1)) {
      if (::unlink(s.dir) != 0) ::rmdir(s.dir);  // a file, else an (empty) directory
      s.state = 0;
    }
  }
}

}  // namespace zt

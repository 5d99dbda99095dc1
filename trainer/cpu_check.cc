// Before anything else runs: the portable build (x86-64-v3, CMakeLists.txt) on a CPU that lacks
// AVX2, FMA or F16C would die with SIGILL somewhere in start-up, saying nothing. This file is
// compiled for the x86-64 baseline and its constructor runs first (priority 101), so such a CPU
// gets a sentence and exit code 2 instead. Not in a -DZT_NATIVE=ON build (built where it runs).
#include <unistd.h>

#include <cstring>

namespace {

__attribute__((constructor(101))) void require_x86_64_v3() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v3")) return;
  const char msg[] =
      "error: this zerotrain was built for x86-64-v3 CPUs (AVX2, FMA, F16C) and this CPU lacks "
      "them; build it on this machine with `cmake -DZT_NATIVE=ON` (scripts/setup.sh passes "
      "CMake options through ZT_CMAKE_ARGS)\n";
  [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
  ::_exit(2);
}

}  // namespace

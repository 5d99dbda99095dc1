#include "common/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

namespace zt {
namespace {

struct Target {
  std::string point;  // empty: no fault point armed
  long pass = 1;
};

const Target& target() {
  static const Target t = [] {
    Target t;
    const char* v = std::getenv("ZEROTRAIN_FAULT_POINT");
    if (!v || !*v) return t;
    t.point = v;
    if (const size_t colon = t.point.find(':'); colon != std::string::npos) {
      t.pass = std::strtol(t.point.c_str() + colon + 1, nullptr, 10);
      t.point.resize(colon);
    }
    return t;
  }();
  return t;
}

}  // namespace

bool forced_overflow() {
  static const std::set<long> steps = [] {
    std::set<long> s;
    const char* v = std::getenv("ZEROTRAIN_FORCE_OVERFLOW");
    for (const char* p = v; p && *p;) {
      char* end = nullptr;
      s.insert(std::strtol(p, &end, 10));
      p = *end == ',' ? end + 1 : end + std::strlen(end);
    }
    return s;
  }();
  if (steps.empty()) return false;
  static std::atomic<long> calls{0};
  return steps.count(++calls) > 0;
}

bool fault_fires(const char* point) {
  const Target& t = target();
  if (t.point.empty() || t.point != point) return false;
  static std::atomic<long> passes{0};
  return ++passes >= t.pass;
}

void fault_point(const char* point) {
  if (!fault_fires(point)) return;
  const char* action = std::getenv("ZEROTRAIN_FAULT_ACTION");
  ::kill(::getpid(), action && std::strcmp(action, "stop") == 0 ? SIGSTOP : SIGKILL);
}

}  // namespace zt

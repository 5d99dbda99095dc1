// Wall-clock timing for progress lines and wall_clock_breakdown.
#pragma once

#include <chrono>

namespace zt {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  // Milliseconds since construction or the last reset().
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace zt

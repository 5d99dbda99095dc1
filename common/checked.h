// Sizes (bytes, elements) that cannot wrap. int64 arithmetic on a size passes 2^63 - 1 only for
// 8 EiB, more than any machine holds, yet an estimate multiplies user-given counts (micro-batch x
// sequence x hidden x layers, Psi x ranks) that get there; wrapped, such a size turns negative
// and "fits". Here a result past int64 saturates at kSizeOverflow and stays there through every
// later +, - , * and /, so a whole formula is checked by looking at its result once.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>

namespace zt {

inline constexpr int64_t kSizeOverflow = std::numeric_limits<int64_t>::max();

// a * b, or kSizeOverflow when the product passes int64 or either factor is kSizeOverflow.
// Sizes are >= 0; a negative product that passes int64 saturates as well.
constexpr int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a == kSizeOverflow || b == kSizeOverflow || __builtin_mul_overflow(a, b, &r))
    return kSizeOverflow;
  return r;
}
// a + b, likewise.
constexpr int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a == kSizeOverflow || b == kSizeOverflow || __builtin_add_overflow(a, b, &r))
    return kSizeOverflow;
  return r;
}

// An int64 size whose arithmetic saturates (checked_mul, checked_add): write a formula on Size
// values as on integers, then ask overflowed() of its result. Division and subtraction keep an
// overflowed value overflowed (its true value is unknown, only that it is too large).
struct Size {
  int64_t v = 0;
  constexpr Size(int64_t x = 0) : v(x) {}  // NOLINT: implicit, so formulas mix ints and Sizes
  constexpr bool overflowed() const { return v == kSizeOverflow; }
  friend constexpr Size operator*(Size a, Size b) { return checked_mul(a.v, b.v); }
  friend constexpr Size operator+(Size a, Size b) { return checked_add(a.v, b.v); }
  friend constexpr Size operator-(Size a, Size b) {
    return a.overflowed() || b.overflowed() ? kSizeOverflow : a.v - b.v;
  }
  friend constexpr Size operator/(Size a, Size b) {
    return a.overflowed() || b.overflowed() ? kSizeOverflow : a.v / b.v;
  }
  Size& operator+=(Size b) { return *this = *this + b; }
  Size& operator*=(Size b) { return *this = *this * b; }
  friend constexpr auto operator<=>(Size a, Size b) = default;
};

}  // namespace zt

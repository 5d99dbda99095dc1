// Math that the compiler can vectorise without -ffast-math (glibc only exposes its vector expf
// under fast-math, and the CPU backend is the numerical reference, so we keep IEEE semantics
// everywhere else).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace zt {

// e^x in fp32, relative error below 3e-7 on [-87, 88] (tested against std::exp); inputs
// outside are clamped (softmax feeds x - max <= 0). Range reduction x = k ln2 + r with
// |r| <= ln2/2 (ln2 split in two parts, Cody & Waite), then a degree-6 polynomial for e^r and
// 2^k assembled in the exponent bits.
inline float exp_fast(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float shifter = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

}  // namespace zt

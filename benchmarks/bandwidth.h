// The bandwidth reference the optimizer benchmarks divide by: an Adam step's own streams (fp32
// gradient read, master weights and both moments read and written; or a bf16 gradient read and
// a bf16 working copy written) with trivial arithmetic. 28 bytes per parameter either way.
#pragma once

#include <omp.h>

#include <bit>
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace zt::bench {

// One pass of the Adam access pattern over n elements; bf16 selects the 16-bit variant. The
// streams are declared unaliased so the compiler vectorises the loops without run-time checks.
inline void adam_pattern(float* __restrict p, float* __restrict m, float* __restrict v,
                         const float* __restrict g32, const uint16_t* __restrict g16,
                         uint16_t* __restrict out16, size_t n, bool bf16) {
  if (!bf16) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) {
      const float g = g32[i];
      p[i] += g;
      m[i] += g;
      v[i] += g;
    }
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float g = bf16_to_f32(g16[i]);
    p[i] += g;
    m[i] += g;
    v[i] += g;
    out16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(p[i]) >> 16);
  }
}

}  // namespace zt::bench

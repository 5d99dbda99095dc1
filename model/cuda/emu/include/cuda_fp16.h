// fp16 as the CUDA emulation provides it (see cuda_bf16.h): round to nearest even.
#pragma once

#include <cstdint>

#include "common/dtype.h"

struct __half {
  uint16_t x;
};
inline __half __float2half_rn(float f) { return {zt::f32_to_f16(f)}; }
inline float __half2float(__half h) { return zt::f16_to_f32(h.x); }

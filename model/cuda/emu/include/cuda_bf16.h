// bf16 as the CUDA emulation provides it: the storage type and the two conversions model/cuda/
// uses, rounding to nearest even as CUDA's __float2bfloat16_rn (common/dtype.h's scalar path,
// whose rounding tests/unit/dtype_convert_test.cc checks).
#pragma once

#include <cstdint>

#include "common/dtype.h"

struct __nv_bfloat16 {
  uint16_t x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {zt::f32_to_bf16(f)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return zt::bf16_to_f32(h.x); }

#include "common/simd.h"

#include <cstdlib>
#include <string>

namespace zt {

std::string_view simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

bool cpu_supports(SimdLevel l) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  switch (l) {
    case SimdLevel::kScalar: return true;
    case SimdLevel::kAvx2: return avx2;
    case SimdLevel::kAvx512: return avx512;
    case SimdLevel::kAvx512Bf16: return avx512 && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

SimdLevel cpu_simd_level() {
  static const SimdLevel level = [] {
    SimdLevel best = SimdLevel::kScalar;
    for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16})
      if (cpu_supports(l)) best = l;
    if (const char* env = std::getenv("ZT_SIMD")) {
      for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512,
                          SimdLevel::kAvx512Bf16})
        if (simd_level_name(l) == env && l < best) best = l;
    }
    return best;
  }();
  return level;
}

}  // namespace zt

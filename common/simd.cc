#include "common/simd.h"

#include <cstdio>
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
#if defined(__clang__) && __clang_major__ < 16
  const bool f16c = true;  // clang < 16 cannot ask (tests/fuzz builds with it); AVX2 CPUs have it
#else
  const bool f16c = __builtin_cpu_supports("f16c");
#endif
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#if defined(ZT_EMULATE_AVX512)
  const bool avx512 = avx2, avx512bf16 = avx2;  // SIMDe stands in (common/simd_emulation.h)
#else
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const bool avx512bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  switch (l) {
    case SimdLevel::kScalar: return true;
    case SimdLevel::kAvx2: return avx2;
    case SimdLevel::kAvx512: return avx512;
    case SimdLevel::kAvx512Bf16: return avx512bf16;
  }
  return false;
}

SimdLevel cpu_simd_level() {
  static const SimdLevel level = [] {
    SimdLevel best = SimdLevel::kScalar;
    for (SimdLevel l : {SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16})
      if (cpu_supports(l)) best = l;
    if (const char* env = std::getenv("ZT_SIMD")) {
      bool known = false;
      for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512,
                          SimdLevel::kAvx512Bf16}) {
        if (simd_level_name(l) != env) continue;
        known = true;
        if (l < best) best = l;
      }
      if (!known)
        std::fprintf(stderr,
                     "warning: ZT_SIMD=%s is not one of scalar, avx2, avx512, avx512bf16; "
                     "using %s\n",
                     env, std::string(simd_level_name(best)).c_str());
    }
    return best;
  }();
  return level;
}

}  // namespace zt

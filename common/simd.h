// The SIMD instruction sets the CPU kernels that touch every parameter (dtype conversions, CPU
// Adam, norms) choose between at run time. Every path is compiled into every build (GCC target
// attributes) and tested against the scalar one on the machine that runs the tests, the AVX-512
// ones also through SIMDe on any AVX2 machine (common/simd_emulation.h); ZT_SIMD selects a lower
// one. (The rest of the build targets x86-64-v3, or this machine with -DZT_NATIVE=ON.)
#pragma once

#include <string_view>

namespace zt {

enum class SimdLevel {
  kScalar,      // portable C++
  kAvx2,        // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  kAvx512,      // AVX-512 F + BW + VL (Skylake-SP, Zen 4)
  kAvx512Bf16,  // kAvx512 + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4)
};

std::string_view simd_level_name(SimdLevel l);
// Whether this CPU (cpuid) and the OS (saved vector state) support `l`.
bool cpu_supports(SimdLevel l);
// The best supported level, decided once per process. The environment variable ZT_SIMD
// (scalar, avx2, avx512, avx512bf16) lowers it, e.g. to benchmark or compare paths; a level
// above the CPU's is ignored, an unknown name warns once.
SimdLevel cpu_simd_level();

}  // namespace zt

// The AVX-512 kernels on a CPU without AVX-512, for tests only: with ZT_EMULATE_AVX512 defined,
// common/simd_kernels.h maps the AVX-512 intrinsics to SIMDe's portable ones (Debian's
// libsimde-dev) and cpu_supports() says yes, so the kernels' own source runs, lane by lane, on
// any AVX2 machine (tests/CMakeLists.txt builds avx512_emulated_test this way). CI has no
// AVX-512, and the dispatch is at run time: without this, no test there would reach that code.
//
// SIMDe 0.7.4 lacks eight intrinsics the kernels use; they are written here from the Intel SDM's
// definitions. The fp16 conversions run F16C on each half (the same rounding as AVX-512's
// VCVTPH2PS / VCVTPS2PH); VCVTNEPS2BF16 follows the SDM's convert_fp32_to_bfloat16: NaN keeps
// its top half and gets the quiet bit, a denormal input becomes a zero of its sign, the rest
// rounds to nearest even.
#pragma once

#if !defined(ZT_EMULATE_AVX512)
#error "common/simd_emulation.h is only for the ZT_EMULATE_AVX512 test build"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

namespace zt::simd::emulated {

template <typename To, typename From>
inline To bits(const From& f) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &f, sizeof(t));
  return t;
}

struct I32x16 { int32_t v[16]; };
struct U16x16 { uint16_t v[16]; };
struct F32x16 { float v[16]; };

// VPMOVDW: each 32-bit lane truncated to its low 16 bits.
inline __m256i cvtepi32_epi16(simde__m512i a) {
  const I32x16 in = bits<I32x16>(a);
  U16x16 out;
  for (int i = 0; i < 16; ++i) out.v[i] = static_cast<uint16_t>(in.v[i]);
  return bits<__m256i>(out);
}
// VPMOVZXWD: 16 unsigned 16-bit lanes widened to 32 bits.
inline simde__m512i cvtepu16_epi32(__m256i a) {
  const U16x16 in = bits<U16x16>(a);
  I32x16 out;
  for (int i = 0; i < 16; ++i) out.v[i] = in.v[i];
  return bits<simde__m512i>(out);
}
// VCVTNEPS2BF16 (no MXCSR: nearest even, denormals in as zero, NaN quieted).
inline __m256i cvtneps_pbh(simde__m512 a) {
  const F32x16 in = bits<F32x16>(a);
  U16x16 out;
  for (int i = 0; i < 16; ++i) {
    const uint32_t u = bits<uint32_t>(in.v[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      out.v[i] = static_cast<uint16_t>((u >> 16) | 0x40);
    else if ((u & 0x7f800000u) == 0)
      out.v[i] = static_cast<uint16_t>((u >> 16) & 0x8000);
    else
      out.v[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
  }
  return bits<__m256i>(out);
}
inline simde__m512 cvtph_ps(__m256i a) {
  const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(a));
  const __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
  return simde_mm512_insertf32x8(simde_mm512_castps256_ps512(lo), hi, 1);
}
inline simde__m512d cvtps_pd(__m256 a) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
  return simde_mm512_insertf64x4(simde_mm512_castpd256_pd512(lo), hi, 1);
}
// The low and high eight lanes.
inline __m256 low_half(simde__m512 a) { return simde_mm512_castps512_ps256(a); }
inline __m256 high_half(simde__m512 a) {
  __m256 h;
  std::memcpy(&h, reinterpret_cast<const char*>(&a) + sizeof(h), sizeof(h));
  return h;
}
// VMOVNTPS stores as any store (the hint is about caches, not values).
inline void stream_ps(float* p, simde__m512 a) { simde_mm512_storeu_ps(p, a); }
// VPTESTNMD: lane i set where (a & b) has no bit set.
inline simde__mmask16 testn_epi32_mask(simde__m512i a, simde__m512i b) {
  const I32x16 x = bits<I32x16>(a), y = bits<I32x16>(b);
  simde__mmask16 m = 0;
  for (int i = 0; i < 16; ++i)
    if ((x.v[i] & y.v[i]) == 0) m = static_cast<simde__mmask16>(m | (1u << i));
  return m;
}

}  // namespace zt::simd::emulated

#undef _mm512_cvtepi32_epi16
#undef _mm512_cvtepu16_epi32
#undef _mm512_cvtneps_pbh
#undef _mm512_cvtph_ps
#undef _mm512_cvtps_pd
#undef _mm512_stream_ps
#undef _mm512_testn_epi32_mask
#undef _mm512_cvtps_ph
#define _mm512_cvtepi32_epi16 zt::simd::emulated::cvtepi32_epi16
#define _mm512_cvtepu16_epi32 zt::simd::emulated::cvtepu16_epi32
#define _mm512_cvtneps_pbh zt::simd::emulated::cvtneps_pbh
#define _mm512_cvtph_ps zt::simd::emulated::cvtph_ps
#define _mm512_cvtps_pd zt::simd::emulated::cvtps_pd
#define _mm512_stream_ps zt::simd::emulated::stream_ps
#define _mm512_testn_epi32_mask zt::simd::emulated::testn_epi32_mask
// The rounding argument must be a constant, hence a macro; each half by F16C.
#define _mm512_cvtps_ph(a, rounding)                                                        \
  zt::simd::emulated::bits<__m256i>(                                                        \
      _mm256_set_m128i(_mm256_cvtps_ph(zt::simd::emulated::high_half(a), (rounding)),      \
                       _mm256_cvtps_ph(zt::simd::emulated::low_half(a), (rounding))))

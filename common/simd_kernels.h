// Vector loads and stores of fp32 / bf16 / fp16 data for the CPU kernels that stream every
// parameter (common/dtype.cc conversions, model/cpu/cpu_adam.cc). Each function is compiled for
// one instruction set (a GCC target attribute) and may only be called from code compiled for
// that set or a wider one, after cpu_supports() said yes (common/simd.h).
//
// Rounding is bit-identical to the scalar conversions in common/dtype.h: fp32 -> bf16 rounds
// to nearest even with integer arithmetic (NaN -> its top half with the quiet bit set, as
// f32_to_bf16); fp32 -> fp16 uses F16C / AVX-512's VCVTPS2PH with round-to-nearest-even, which
// matches f32_to_f16 for every input (NaN keeps its top payload bits and gets the quiet bit).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

#define ZT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#if defined(ZT_EMULATE_AVX512)
// The test build that runs the AVX-512 kernels through SIMDe (common/simd_emulation.h).
#include "common/simd_emulation.h"
#define ZT_TARGET_AVX512 ZT_TARGET_AVX2
#define ZT_TARGET_AVX512BF16 ZT_TARGET_AVX2
#else
#define ZT_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define ZT_TARGET_AVX512BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace zt::simd {

// ---- AVX2: 8 elements ----

ZT_TARGET_AVX2 inline __m256 avx2_load_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
ZT_TARGET_AVX2 inline __m256 avx2_load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
ZT_TARGET_AVX2 inline void avx2_store_bf16(uint16_t* p, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
  // Every lane is below 2^16, so the unsigned saturating pack is exact.
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
ZT_TARGET_AVX2 inline void avx2_store_f16(uint16_t* p, __m256 x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// ---- AVX-512: 16 elements ----

ZT_TARGET_AVX512 inline __m512 avx512_load_bf16(const uint16_t* p) {
  const __m512i w =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
ZT_TARGET_AVX512 inline __m512 avx512_load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// Round-to-nearest-even fp32 -> bf16 bits in 16 lanes, integer arithmetic (exact for all inputs).
ZT_TARGET_AVX512 inline __m256i avx512_round_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
}
ZT_TARGET_AVX512 inline void avx512_store_bf16(uint16_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), avx512_round_bf16(x));
}
ZT_TARGET_AVX512 inline void avx512_store_f16(uint16_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// VCVTNEPS2BF16 rounds to nearest even and quiets NaN as f32_to_bf16 does, but treats denormal
// inputs as zero (Intel SDM); those lanes take the integer result, so the output stays exact.
ZT_TARGET_AVX512BF16 inline void avx512bf16_store_bf16(uint16_t* p, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
                             _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
  __m256i r = (__m256i)_mm512_cvtneps_pbh(x);
  if (denormal) r = _mm256_mask_blend_epi16(denormal, r, avx512_round_bf16(x));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), r);
}

// ---- typed access: element i onwards of a buffer of dtype T, as a vector of fp32 ----

template <DType T>
ZT_TARGET_AVX2 inline __m256 avx2_load(const void* p, size_t i) {
  if constexpr (T == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  if constexpr (T == DType::kBF16) return avx2_load_bf16(static_cast<const uint16_t*>(p) + i);
  if constexpr (T == DType::kF16) return avx2_load_f16(static_cast<const uint16_t*>(p) + i);
}
template <DType T>
ZT_TARGET_AVX2 inline void avx2_store(void* p, size_t i, __m256 x) {
  if constexpr (T == DType::kF32) _mm256_storeu_ps(static_cast<float*>(p) + i, x);
  if constexpr (T == DType::kBF16) avx2_store_bf16(static_cast<uint16_t*>(p) + i, x);
  if constexpr (T == DType::kF16) avx2_store_f16(static_cast<uint16_t*>(p) + i, x);
}
template <DType T>
ZT_TARGET_AVX512 inline __m512 avx512_load(const void* p, size_t i) {
  if constexpr (T == DType::kF32) return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  if constexpr (T == DType::kBF16) return avx512_load_bf16(static_cast<const uint16_t*>(p) + i);
  if constexpr (T == DType::kF16) return avx512_load_f16(static_cast<const uint16_t*>(p) + i);
}
// bf16 with integer rounding; AVX512_BF16 callers may use avx512bf16_store_bf16 instead.
template <DType T>
ZT_TARGET_AVX512 inline void avx512_store(void* p, size_t i, __m512 x) {
  if constexpr (T == DType::kF32) _mm512_storeu_ps(static_cast<float*>(p) + i, x);
  if constexpr (T == DType::kBF16) avx512_store_bf16(static_cast<uint16_t*>(p) + i, x);
  if constexpr (T == DType::kF16) avx512_store_f16(static_cast<uint16_t*>(p) + i, x);
}

}  // namespace zt::simd

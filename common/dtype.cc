#include "common/dtype.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "common/simd_kernels.h"

namespace zt {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
  }
  return "?";
}

absl::StatusOr<DType> parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp16" || s == "float16") return DType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(s), "': use fp32, bf16 or fp16"));
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  // NaN: quiet, keeping the top payload bits (what F16C's VCVTPS2PH does).
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (mag < 0x38800000u) {  // subnormal half (or zero): scale into the 2^-24 grid
    float a;
    std::memcpy(&a, &mag, 4);
    const float q = std::nearbyint(a * 16777216.0f);  // ties to even under default rounding
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits (nearest even).
  mag += 0xc8000000u;  // (15 - 127) << 23
  mag += 0xfffu + ((mag >> 13) & 1u);
  return static_cast<uint16_t>(sign | (mag >> 13));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(man), -24);
    if (sign) out = -out;
    return out;
  }
  // Inf, NaN (made quiet, as F16C's VCVTPH2PS does) or a normal number.
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man ? 0x400000u : 0u) | (man << 13))
                         : (sign | ((exp + 112u) << 23) | (man << 13));
  std::memcpy(&out, &u, 4);
  return out;
}

namespace {

constexpr size_t kChunk = 1 << 15;  // elements per OpenMP piece (a multiple of 16)

// One contiguous run of a conversion at one SIMD level. Pairs without a vector path (fp16 <->
// bf16, never on a hot path) go element by element through fp32, which is exact.
void convert_scalar(const void* src, DType st, void* dst, DType dt, size_t n) {
  for (size_t i = 0; i < n; ++i) store_f32(dst, dt, i, load_f32(src, st, i));
}

ZT_TARGET_AVX2 void convert_avx2(const void* src, DType st, void* dst, DType dt, size_t n) {
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  auto* d32 = static_cast<float*>(dst);
  size_t i = 0;
  if (st == DType::kF32 && dt == DType::kBF16) {
    for (; i + 8 <= n; i += 8) simd::avx2_store_bf16(d16 + i, _mm256_loadu_ps(s32 + i));
  } else if (st == DType::kF32 && dt == DType::kF16) {
    for (; i + 8 <= n; i += 8) simd::avx2_store_f16(d16 + i, _mm256_loadu_ps(s32 + i));
  } else if (st == DType::kBF16 && dt == DType::kF32) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d32 + i, simd::avx2_load_bf16(s16 + i));
  } else if (st == DType::kF16 && dt == DType::kF32) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d32 + i, simd::avx2_load_f16(s16 + i));
  }
  const size_t es = dtype_size(st), ed = dtype_size(dt);
  convert_scalar(static_cast<const char*>(src) + i * es, st, static_cast<char*>(dst) + i * ed, dt,
                 n - i);
}

template <bool kBf16Instr>
ZT_TARGET_AVX512BF16 void convert_avx512(const void* src, DType st, void* dst, DType dt, size_t n,
                                         bool stream) {
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  auto* d32 = static_cast<float*>(dst);
  size_t i = 0;
  if (st == DType::kF32 && dt == DType::kBF16) {
    for (; i + 16 <= n; i += 16) {
      if constexpr (kBf16Instr)
        simd::avx512bf16_store_bf16(d16 + i, _mm512_loadu_ps(s32 + i));
      else
        simd::avx512_store_bf16(d16 + i, _mm512_loadu_ps(s32 + i));
    }
  } else if (st == DType::kF32 && dt == DType::kF16) {
    for (; i + 16 <= n; i += 16) simd::avx512_store_f16(d16 + i, _mm512_loadu_ps(s32 + i));
  } else if (st == DType::kBF16 && dt == DType::kF32) {
    if (stream) {  // non-temporal: no read-for-ownership of a destination larger than the caches
      for (; i + 16 <= n; i += 16) _mm512_stream_ps(d32 + i, simd::avx512_load_bf16(s16 + i));
      _mm_sfence();
    }
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d32 + i, simd::avx512_load_bf16(s16 + i));
  } else if (st == DType::kF16 && dt == DType::kF32) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d32 + i, simd::avx512_load_f16(s16 + i));
  }
  const size_t es = dtype_size(st), ed = dtype_size(dt);
  convert_scalar(static_cast<const char*>(src) + i * es, st, static_cast<char*>(dst) + i * ed, dt,
                 n - i);
}

void convert_run(SimdLevel level, const void* src, DType st, void* dst, DType dt, size_t n,
                 bool stream) {
  switch (level) {
    case SimdLevel::kScalar: return convert_scalar(src, st, dst, dt, n);
    case SimdLevel::kAvx2: return convert_avx2(src, st, dst, dt, n);
    // Only the bf16 store differs between the two AVX-512 levels; the template keeps the
    // plain-AVX-512 instantiation free of AVX512_BF16 instructions.
    case SimdLevel::kAvx512: return convert_avx512<false>(src, st, dst, dt, n, stream);
    case SimdLevel::kAvx512Bf16: return convert_avx512<true>(src, st, dst, dt, n, stream);
  }
}

}  // namespace

void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n, SimdLevel level) {
  if (src_t == dst_t) {
    std::memcpy(dst, src, n * dtype_size(src_t));
    return;
  }
  const size_t es = dtype_size(src_t), ed = dtype_size(dst_t);
  // Streaming stores pay off once the output is well past the last-level cache and aligned.
  const bool stream = n * ed >= (size_t{64} << 20) && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
  for_each_chunk(n, kChunk, [&](size_t, size_t begin, size_t end) {
    convert_run(level, static_cast<const char*>(src) + begin * es, src_t,
                static_cast<char*>(dst) + begin * ed, dst_t, end - begin, stream);
  });
}

void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n) {
  convert(src, src_t, dst, dst_t, n, cpu_simd_level());
}

namespace {

void scale_add_scalar(void* y, DType yt, const float* x, float alpha, bool acc, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float ax = alpha * x[i];
    store_f32(y, yt, i, acc ? ax + load_f32(y, yt, i) : ax);
  }
}

template <DType Y>
ZT_TARGET_AVX512 void scale_add_avx512(void* y, const float* x, float alpha, bool acc, size_t n) {
  const __m512 a = _mm512_set1_ps(alpha);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_mul_ps(a, _mm512_loadu_ps(x + i));
    if (acc) v = _mm512_add_ps(v, simd::avx512_load<Y>(y, i));
    simd::avx512_store<Y>(y, i, v);
  }
  scale_add_scalar(static_cast<char*>(y) + i * dtype_size(Y), Y, x + i, alpha, acc, n - i);
}

template <DType Y>
ZT_TARGET_AVX2 void scale_add_avx2(void* y, const float* x, float alpha, bool acc, size_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(a, _mm256_loadu_ps(x + i));
    if (acc) v = _mm256_add_ps(v, simd::avx2_load<Y>(y, i));
    simd::avx2_store<Y>(y, i, v);
  }
  scale_add_scalar(static_cast<char*>(y) + i * dtype_size(Y), Y, x + i, alpha, acc, n - i);
}

template <DType Y>
void scale_add_run(SimdLevel level, void* y, const float* x, float alpha, bool acc, size_t n) {
  switch (level) {
    case SimdLevel::kScalar: return scale_add_scalar(y, Y, x, alpha, acc, n);
    case SimdLevel::kAvx2: return scale_add_avx2<Y>(y, x, alpha, acc, n);
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx512Bf16: return scale_add_avx512<Y>(y, x, alpha, acc, n);
  }
}

}  // namespace

void scale_add(void* y, DType yt, const float* x, float alpha, bool accumulate, size_t n) {
  scale_add(y, yt, x, alpha, accumulate, n, cpu_simd_level());
}

void scale_add(void* y, DType yt, const float* x, float alpha, bool accumulate, size_t n,
               SimdLevel level) {
  auto run = yt == DType::kF32    ? scale_add_run<DType::kF32>
             : yt == DType::kBF16 ? scale_add_run<DType::kBF16>
                                  : scale_add_run<DType::kF16>;
  for_each_chunk(n, kChunk, [&](size_t, size_t begin, size_t end) {
    run(level, static_cast<char*>(y) + begin * dtype_size(yt), x + begin, alpha, accumulate,
        end - begin);
  });
}

}  // namespace zt

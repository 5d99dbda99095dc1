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

// One contiguous run of a conversion, element by element through fp32 (exact).
void convert_scalar(const void* src, DType st, void* dst, DType dt, size_t n) {
  for (size_t i = 0; i < n; ++i) store_f32(dst, dt, i, load_f32(src, st, i));
}

// Pairs with a vector path: fp32 <-> bf16 and fp32 <-> fp16 (S source, D destination dtype).
template <DType S, DType D>
ZT_TARGET_AVX2 void convert_avx2(const void* src, void* dst, size_t n, bool /*stream*/) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) simd::avx2_store<D>(dst, i, simd::avx2_load<S>(src, i));
  convert_scalar(static_cast<const char*>(src) + i * dtype_size(S), S,
                 static_cast<char*>(dst) + i * dtype_size(D), D, n - i);
}

// kBf16Instr: round to bf16 with VCVTNEPS2BF16. The plain-AVX-512 instantiation uses no
// AVX512_BF16 instruction.
template <DType S, DType D, bool kBf16Instr>
ZT_TARGET_AVX512BF16 void convert_avx512(const void* src, void* dst, size_t n, bool stream) {
  size_t i = 0;
  if constexpr (D == DType::kF32) {
    if (stream) {  // non-temporal: no read-for-ownership of a destination larger than the caches
      for (; i + 16 <= n; i += 16)
        _mm512_stream_ps(static_cast<float*>(dst) + i, simd::avx512_load<S>(src, i));
      _mm_sfence();
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 v = simd::avx512_load<S>(src, i);
    if constexpr (D == DType::kBF16 && kBf16Instr)
      simd::avx512bf16_store_bf16(static_cast<uint16_t*>(dst) + i, v);
    else
      simd::avx512_store<D>(dst, i, v);
  }
  convert_scalar(static_cast<const char*>(src) + i * dtype_size(S), S,
                 static_cast<char*>(dst) + i * dtype_size(D), D, n - i);
}

using ConvertFn = void (*)(const void*, void*, size_t, bool);

template <DType S, DType D>
ConvertFn convert_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: break;
    case SimdLevel::kAvx2: return convert_avx2<S, D>;
    case SimdLevel::kAvx512: return convert_avx512<S, D, false>;
    case SimdLevel::kAvx512Bf16: return convert_avx512<S, D, true>;
  }
  return [](const void* src, void* dst, size_t n, bool) { convert_scalar(src, S, dst, D, n); };
}

// The kernel for one (level, source, destination); pairs without a vector path (fp16 <-> bf16,
// never on a hot path) go element by element through fp32, which is exact.
ConvertFn convert_fn(SimdLevel level, DType st, DType dt) {
  using T = DType;
  if (st == T::kF32 && dt == T::kBF16) return convert_fn<T::kF32, T::kBF16>(level);
  if (st == T::kF32 && dt == T::kF16) return convert_fn<T::kF32, T::kF16>(level);
  if (st == T::kBF16 && dt == T::kF32) return convert_fn<T::kBF16, T::kF32>(level);
  if (st == T::kF16 && dt == T::kF32) return convert_fn<T::kF16, T::kF32>(level);
  if (st == T::kBF16) return convert_fn<T::kBF16, T::kF16>(SimdLevel::kScalar);
  return convert_fn<T::kF16, T::kBF16>(SimdLevel::kScalar);
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
  const ConvertFn fn = convert_fn(level, src_t, dst_t);
  for_each_chunk(n, kChunk, [&](size_t, size_t begin, size_t end) {
    fn(static_cast<const char*>(src) + begin * es, static_cast<char*>(dst) + begin * ed,
       end - begin, stream);
  });
}

void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n) {
  convert(src, src_t, dst, dst_t, n, cpu_simd_level());
}

void convert_serial(const void* src, DType src_t, void* dst, DType dst_t, size_t n) {
  if (src_t == dst_t) return (void)std::memcpy(dst, src, n * dtype_size(src_t));
  convert_fn(cpu_simd_level(), src_t, dst_t)(src, dst, n, false);
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

namespace {
auto scale_add_for(DType yt) {
  return yt == DType::kF32    ? scale_add_run<DType::kF32>
         : yt == DType::kBF16 ? scale_add_run<DType::kBF16>
                              : scale_add_run<DType::kF16>;
}
}  // namespace

void scale_add_serial(void* y, DType yt, const float* x, float alpha, bool accumulate, size_t n) {
  scale_add_for(yt)(cpu_simd_level(), y, x, alpha, accumulate, n);
}

void scale_add(void* y, DType yt, const float* x, float alpha, bool accumulate, size_t n,
               SimdLevel level) {
  auto run = scale_add_for(yt);
  for_each_chunk(n, kChunk, [&](size_t, size_t begin, size_t end) {
    run(level, static_cast<char*>(y) + begin * dtype_size(yt), x + begin, alpha, accumulate,
        end - begin);
  });
}

}  // namespace zt

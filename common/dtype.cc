#include "common/dtype.h"

#include <cmath>

#include "absl/strings/str_cat.h"

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
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
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
  uint32_t u =
      exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
  std::memcpy(&out, &u, 4);
  return out;
}

void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n) {
  if (src_t == dst_t) {
    std::memcpy(dst, src, n * dtype_size(src_t));
    return;
  }
  // Go through fp32: at most one rounding, since fp32 holds every bf16/fp16 value exactly.
  auto load = [&](size_t i) -> float {
    switch (src_t) {
      case DType::kF32: return static_cast<const float*>(src)[i];
      case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(src)[i]);
    }
    return 0.f;
  };
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (dst_t) {
      case DType::kF32: static_cast<float*>(dst)[i] = v; break;
      case DType::kBF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
      case DType::kF16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
    }
  }
}

}  // namespace zt

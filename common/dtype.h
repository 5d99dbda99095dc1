// Storage dtypes and conversions. Compute is always fp32; bf16/fp16 are storage formats
// for working parameters and gradients (mixed precision; docs/architecture.md "Offload").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/simd.h"

namespace zt {

enum class DType { kF32, kBF16, kF16 };

// Bytes per element: 4, 2, 2.
constexpr size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }

// A read-only typed view of device memory: a pointer and its dtype (shapes travel as the
// kernels' int arguments, as in llm.c). Parameters reach the kernels this way, as stored: a GPU
// feeds bf16 weights to its tensor cores, the CPU backend widens them (Backend::weight_dtype).
// Converts implicitly from a const float*; + moves by elements; null when data is.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  TensorView() = default;
  TensorView(const float* p) : data(p) {}  // NOLINT: fp32 pointers are views
  TensorView(std::nullptr_t) {}            // NOLINT
  TensorView(const void* p, DType t) : data(p), dtype(t) {}
  TensorView operator+(size_t elements) const {
    return {static_cast<const char*>(data) + elements * dtype_size(dtype), dtype};
  }
  explicit operator bool() const { return data != nullptr; }
  // The fp32 pointer of an fp32 view (null otherwise): for kernels that take only fp32.
  const float* f32() const { return dtype == DType::kF32 ? static_cast<const float*>(data) : nullptr; }
};
// The writable twin of TensorView: a pointer and its dtype, for activations and their gradients
// (fp32 on the CPU backend; bf16/fp16 on a GPU running mixed precision, Backend::
// activation_dtype) and for weight gradients (Backend::grad_dtype). Converts implicitly from a
// float* and to a TensorView.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kF32;
  TensorRef() = default;
  TensorRef(float* p) : data(p) {}  // NOLINT: fp32 pointers are views
  TensorRef(std::nullptr_t) {}      // NOLINT
  TensorRef(void* p, DType t) : data(p), dtype(t) {}
  TensorRef operator+(size_t elements) const {
    return {static_cast<char*>(data) + elements * dtype_size(dtype), dtype};
  }
  operator TensorView() const { return {data, dtype}; }  // NOLINT: a writable view reads too
  explicit operator bool() const { return data != nullptr; }
  size_t bytes(size_t elements) const { return elements * dtype_size(dtype); }
};
std::string_view dtype_name(DType t);
// Parses "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; error names the accepted spellings.
absl::StatusOr<DType> parse_dtype(std::string_view s);

// fp32 -> bf16 with round-to-nearest-even (NaN stays NaN), as PyTorch's .to(torch.bfloat16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE half conversions (round-to-nearest-even; overflow -> inf), as numpy's float16; NaN
// stays NaN with its sign and top payload bits, quiet (as F16C's VCVTPS2PH).
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// Element i of a buffer of dtype t, as fp32 (exact); and its store, rounding to nearest even.
// The host twins of load_as_f32 / store_from_f32 in model/cuda/cuda_common.cuh.
inline float load_f32(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.f;
}
inline void store_f32(void* p, DType t, size_t i, float x) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = x; break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(x); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = f32_to_f16(x); break;
  }
}

// Converts n elements between storage formats; `src`/`dst` point at n elements of their dtype.
// Vectorised at the best SIMD level of this CPU (common/simd.h), or at `level` (which the CPU
// must support); every level gives the same bits as the scalar functions above. OpenMP over
// 32K-element chunks.
void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n);
void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n, SimdLevel level);
// The same on the calling thread only: for a caller already inside a parallel region.
void convert_serial(const void* src, DType src_t, void* dst, DType dst_t, size_t n);

// y (n, y_t) = alpha * x (n, fp32) + (accumulate ? y : 0), in fp32 (alpha * x rounded, then the
// sum rounded, no fused multiply-add) and rounded once to y_t. Gradient averaging and
// accumulation into a 16-bit buffer in one pass; vectorised and OpenMP-parallel as convert().
void scale_add(void* y, DType y_t, const float* x, float alpha, bool accumulate, size_t n);
void scale_add(void* y, DType y_t, const float* x, float alpha, bool accumulate, size_t n,
               SimdLevel level);
// The same on the calling thread only: for a caller already inside a parallel region.
void scale_add_serial(void* y, DType y_t, const float* x, float alpha, bool accumulate, size_t n);

}  // namespace zt

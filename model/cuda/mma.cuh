// Tensor-core matrix multiply-accumulate for the kernels, one spelling on the GPU and in the
// CUDA emulation: mma.sync m16n8k16 with 16-bit operands (bf16 or fp16) and fp32 accumulation
// (sm_80 and later, Hopper included), and the 16-bit pairs its fragments hold.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and t = lane % 4:
//   A (16x16, row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
//                         a[3] = A[g+8][2t+8..]
//   B (16x8, "col"):      b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   C/D (16x8, fp32):     c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t],
//                         c[3] = C[g+8][2t+1]
// so a C tile of two adjacent n-tiles is, rounded to 16 bits, the A fragment of the next product
// (FlashAttention-2's P = softmax(S) feeding P V without leaving registers).
#pragma once

#include <cstdint>
#include <type_traits>

#include "model/cuda/cuda_common.cuh"

namespace zt {

// The 16-bit operand types: bits, and fp32 <-> bits rounding to nearest even.
template <class T>
__device__ __forceinline__ uint16_t to_bits(float f) {
#ifdef ZT_CUDA_EMU
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(f).x;
  else
    return __float2half_rn(f).x;
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  else
    return __half_as_ushort(__float2half_rn(f));
#endif
}
template <class T>
__device__ __forceinline__ float from_bits(uint16_t b) {
#ifdef ZT_CUDA_EMU
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return bf16_to_f32(b);
  else
    return f16_to_f32(b);
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(__ushort_as_bfloat16(b));
  else
    return __half2float(__ushort_as_half(b));
#endif
}
// Two values as one fragment register: lo in the low half (the lower column or row).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return (uint32_t)to_bits<T>(lo) | (uint32_t)to_bits<T>(hi) << 16;
}

// d (16x8 fp32) += a (16x16) b (16x8), T = __nv_bfloat16 or __half. Every lane of the warp must
// call it together (.sync.aligned); no mask, no divergence.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
#ifdef ZT_CUDA_EMU
  emu::mma_m16n8k16(d, a, b, std::is_same_v<T, __nv_bfloat16>);
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// Fragment loads from a row-major 16-bit tile in shared memory (`ld` elements per row, even;
// row and col even where a pair is read):
// the A fragment of rows r0..r0+15, columns c0..c0+15;
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int r0,
                                       int c0) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  auto at = [&](int r, int c) { return *reinterpret_cast<const uint32_t*>(tile + r * ld + c); };
  a[0] = at(r0 + g, c0 + 2 * t);
  a[1] = at(r0 + g + 8, c0 + 2 * t);
  a[2] = at(r0 + g, c0 + 2 * t + 8);
  a[3] = at(r0 + g + 8, c0 + 2 * t + 8);
}
// the B fragment whose column n is the tile's row n0 + n and whose k runs along the tile's
// columns k0..k0+15 (B = tile^T: a K tile for Q K^T, or a transposed tile).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const uint16_t* tile, int ld, int n0,
                                       int k0) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const uint16_t* row = tile + (n0 + g) * ld + k0 + 2 * t;
  b[0] = *reinterpret_cast<const uint32_t*>(row);
  b[1] = *reinterpret_cast<const uint32_t*>(row + 8);
}

}  // namespace zt

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

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (PTX ISA, "ldmatrix"): four 8x8 matrices of
// 16-bit elements from shared memory, lane l giving the address of row l % 8 of matrix l / 8
// (16-byte aligned). Lane (g = lane / 4, t = lane % 4) receives in r[i] the pair M_i[g][2t..2t+1];
// with kTrans, the pair M_i[2t][g], M_i[2t+1][g] (the matrix transposed on the way). Every lane
// of the warp calls it together.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#ifdef ZT_CUDA_EMU
  uint64_t rows[32];
  emu::warp_gather(reinterpret_cast<uint64_t>(row), rows);
  const int lane = emu::lane_id(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    auto at = [&](int m) { return reinterpret_cast<const uint16_t*>(rows[8 * i + m]); };
    r[i] = kTrans ? (uint32_t)at(2 * t)[g] | (uint32_t)at(2 * t + 1)[g] << 16
                  : *reinterpret_cast<const uint32_t*>(at(g) + 2 * t);
  }
#else
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#endif
}

// Fragment loads from a row-major 16-bit tile in shared memory (`ld` elements a row, a multiple
// of 8, so that rows start 16-byte aligned; rows and columns multiples of 8):
// the A fragment of rows r0..r0+15, columns c0..c0+15 (matrices: rows +0/+8 by columns +0/+8);
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int r0,
                                       int c0) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4<false>(a, tile + (r0 + lane % 16) * ld + c0 + lane / 16 * 8);
}
// the B fragments of two n-tiles (b[j]: B's columns n0 + 8 j ..) with k0..k0+15, where B is the
// tile transposed (B[k][n] = tile[n][k]: a K tile for Q K^T) ...
__device__ __forceinline__ void load_b2(uint32_t (&b)[2][2], const uint16_t* tile, int ld, int n0,
                                        int k0) {
  const int lane = threadIdx.x % 32;
  uint32_t r[4];
  ldmatrix_x4<false>(r, tile + (n0 + lane % 8 + lane / 16 * 8) * ld + k0 + lane / 8 % 2 * 8);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}
// ... or the tile itself (B[k][n] = tile[k][n]: a V tile for P V), transposed by ldmatrix.
__device__ __forceinline__ void load_b2_trans(uint32_t (&b)[2][2], const uint16_t* tile, int ld,
                                              int n0, int k0) {
  const int lane = threadIdx.x % 32;
  uint32_t r[4];
  ldmatrix_x4<true>(r, tile + (k0 + lane % 8 + lane / 8 % 2 * 8) * ld + n0 + lane / 16 * 8);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

}  // namespace zt

// Element-wise kernels with their dtype known at compile time and 128-bit memory accesses: each
// thread loads 16 bytes of every operand (8 bf16 / fp16 values, or 4 fp32), computes in fp32 and
// stores 16 bytes, so a warp moves 512 contiguous bytes per access (llm.c's Packed128). The
// kernels of activations.cu and cuda_backend.cu take this path when every operand has one dtype
// and starts on a 16-byte boundary; otherwise the per-element kernels that read the dtype at run
// time (cuda_common.cuh's load_as_f32).
#pragma once

#include <cstdint>
#include <type_traits>

#include "model/cuda/cuda_common.cuh"

namespace zt {

// 16 bytes of T.
template <class T>
struct alignas(16) Pack16 {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

template <class T>
__device__ __forceinline__ float to_f32(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}
template <class T>
__device__ __forceinline__ T from_f32(float x) {  // round to nearest even
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}

// Calls f(T-tag) for the C++ type of dtype t.
template <class F>
void with_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kF32: return f(float{});
    case DType::kBF16: return f(__nv_bfloat16{});
    case DType::kF16: return f(__half{});
  }
}

// Whether every pointer starts on a 16-byte boundary.
inline bool aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// out[i] = op(a[i], b[i]) for i < n (b may be null: op(a[i], 0)), every operand of type T:
// thread k handles elements [k kN, (k + 1) kN), 16 bytes a load, one element at a time past the
// last whole pack.
template <class T, class Op>
__global__ void map2_kernel(T* out, const T* a, const T* b, size_t n, Op op) {
  constexpr int kN = Pack16<T>::kN;
  const size_t i0 = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * kN;
  if (i0 >= n) return;
  if (i0 + kN <= n) {
    const Pack16<T> pa = *reinterpret_cast<const Pack16<T>*>(a + i0);
    Pack16<T> pb{};
    if (b) pb = *reinterpret_cast<const Pack16<T>*>(b + i0);
    Pack16<T> po;
#pragma unroll
    for (int k = 0; k < kN; ++k)
      po.v[k] = from_f32<T>(op(to_f32(pa.v[k]), b ? to_f32(pb.v[k]) : 0.f));
    *reinterpret_cast<Pack16<T>*>(out + i0) = po;
  } else {
    for (size_t i = i0; i < n; ++i) out[i] = from_f32<T>(op(to_f32(a[i]), b ? to_f32(b[i]) : 0.f));
  }
}

// Launches map2_kernel for dtype t on `stream` when out, a and b (null allowed) are 16-byte
// aligned; false (nothing launched) otherwise.
template <class Op>
bool map2(cudaStream_t stream, DType t, void* out, const void* a, const void* b, size_t n, Op op) {
  if (n == 0 || !aligned16({out, a, b})) return false;
  with_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    const size_t packs = (n + Pack16<T>::kN - 1) / Pack16<T>::kN;
    launch_kernel(map2_kernel<T, Op>, blocks_for(packs), kThreads, stream, static_cast<T*>(out),
                  static_cast<const T*>(a), static_cast<const T*>(b), n, op);
  });
  return true;
}

}  // namespace zt

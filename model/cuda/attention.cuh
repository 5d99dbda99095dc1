// What the two attention kernel families of the CUDA backend share: the shape and indexing of
// qkv / out (Backend::attention_forward), and the tensor-core family's entry points
// (model/cuda/attention_mma.cu); the fp32 family and the choice between them are attention.cu's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/dtype.h"

namespace zt {

struct AttnShape {
  int B, T, NH, KVH, hd, row, group;  // row = (NH + 2 KVH) hd elements per token of qkv
  float scale;                        // 1 / sqrt(hd)
  const int* pos;  // packed rows: (B,T) positions within the examples (device), or null
  // The first key query t of sequence b attends: its example's first token (0 unpacked).
  // Non-decreasing in t, so a tile of queries needs no key before its first query's. Clamped
  // at 0: positions past t (a caller's bug; Transformer checks them) read no row before 0.
  __device__ int first_key(int b, int t) const {
    return pos ? max(0, t - pos[(size_t)b * T + t]) : 0;
  }
  __host__ __device__ size_t q(int b, int t, int h) const {
    return ((size_t)b * T + t) * row + (size_t)h * hd;
  }
  __host__ __device__ size_t k(int b, int t, int kvh) const { return q(b, t, NH + kvh); }
  __host__ __device__ size_t v(int b, int t, int kvh) const { return q(b, t, NH + KVH + kvh); }
  __host__ __device__ size_t o(int b, int t, int h) const {
    return ((size_t)b * T + t) * NH * hd + (size_t)h * hd;
  }
};

// Whether the tensor-core kernels take activations of dtype t with head size hd: bf16 or fp16,
// hd <= 128 (padded with zeros up to the next of 32, 64, 80, 96, 128).
bool mma_attention_supports(DType t, int hd);
// Forward: out (B,T,NH*hd) and lse (B,NH,T, natural log), as Backend::attention_forward.
void mma_attention_forward(cudaStream_t stream, TensorRef out, float* lse, TensorView qkv,
                           const AttnShape& s);
// Backward: dqkv += the gradient, from dout, qkv, the forward's lse and d_rows (B, NH, T):
// D_t = dout_t . out_t.
void mma_attention_backward(cudaStream_t stream, TensorRef dqkv, const float* d_rows,
                            TensorView dout, TensorView qkv, const float* lse, const AttnShape& s);

}  // namespace zt

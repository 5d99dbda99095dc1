// The norms' backward in one pass over tiles of rows: dx, and the column sums of the parameter
// gradients over the tile's rows (dout x xhat for the weight; dout for LayerNorm's bias) into a
// partial per tile, which column_sum.cuh's second pass adds in tile order. The weight and bias
// gradients' own pass read dout and inp again: 4 passes over N x C (3 reads, dx's write) in place
// of 6. The same bits on every run (no atomics). Equations in model/cpu/layernorm.cc and
// rmsnorm.cc.
#pragma once

#include "model/cuda/column_sum.cuh"
#include "model/cuda/cuda_backend.cuh"

namespace zt {

constexpr int kNormTileRows = 32;  // rows a block: N = 8192 makes 256 blocks
constexpr int kNormTileWarps = 4;  // each takes rows warp, warp + 4, ... of the tile

// Rows [tile kNormTileRows, +kNormTileRows) of N; kLayer: LayerNorm (mean, and a bias: K = 2),
// else RMSNorm (K = 1). dinp (N, C) += dx. With partials, each warp sums its rows' K summands
// into shared-memory rows of its own (lane l owns columns l, l + 32, ..., so no barrier), then
// the block adds the warps' rows in warp order into partials (tiles, K, C); null: dx only.
template <bool kLayer>
__global__ void norm_backward_tile_kernel(TensorRef dinp, float* partials, TensorView dout,
                                          TensorView inp, TensorView w, const float* mean,
                                          const float* rstd, int N, int C) {
  constexpr int K = kLayer ? 2 : 1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool sums = partials != nullptr;
  float* acc = sums ? dynamic_smem<float>() + (size_t)warp * K * C : nullptr;  // this warp's rows
  for (int k = 0; sums && k < K; ++k)  // (lane l zeroes the columns it adds to)
    for (int c = lane; c < C; c += 32) acc[k * C + c] = 0.f;
  const int end = min(N, ((int)blockIdx.x + 1) * kNormTileRows);
  for (int row = blockIdx.x * kNormTileRows + warp; row < end; row += kNormTileWarps) {
    const size_t x = (size_t)row * C;
    const float m = kLayer ? mean[row] : 0.f, r = rstd[row];
    float a = 0.f, b = 0.f;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (load_as_f32(inp, x + c) - m) * r;
      const float dxhat = load_as_f32(dout, x + c) * load_as_f32(w, c);
      a += dxhat;
      b += dxhat * xhat;
    }
    const float mean_dxhat = kLayer ? warp_sum(a) / C : 0.f, mean_dxhat_xhat = warp_sum(b) / C;
    for (int c = lane; c < C; c += 32) {
      const float dy = load_as_f32(dout, x + c), xhat = (load_as_f32(inp, x + c) - m) * r;
      add_from_f32(dinp, x + c, r * (dy * load_as_f32(w, c) - mean_dxhat - xhat * mean_dxhat_xhat));
      if (!sums) continue;
      acc[c] += dy * xhat;
      if (kLayer) acc[C + c] += dy;
    }
  }
  if (!sums) return;  // (the whole block)
  __syncthreads();
  const float* rows = dynamic_smem<float>();
  for (int i = threadIdx.x; i < K * C; i += blockDim.x) {  // i = k C + c
    float t = 0.f;
    for (int k = 0; k < kNormTileWarps; ++k) t += rows[(size_t)k * K * C + i];
    partials[(size_t)blockIdx.x * K * C + i] = t;
  }
}

// The tiles' partials (tiles, K, C) as column_sums reads its rows: tile n's K values of column c.
template <int K>
struct TilePartials {
  const float* p;
  int C;
  __device__ void operator()(int n, int c, float (&v)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = p[((size_t)n * K + k) * C + c];
  }
};

// dinp += dx; dw += the weight gradient, db (LayerNorm; null for RMSNorm) += the bias's, on
// `stream`: the tile kernel, then the tiles' partials summed over the tiles by column_sums' two
// passes (a block per 32 columns and 256 tiles, then the few sums of those: parallel where one
// thread a column adding every tile in turn would take N / 32 dependent loads). Where 4 warps' rows
// of K C floats pass a block's shared memory (C over 14,528 for RMSNorm, 7,264 for LayerNorm), dx
// alone, and false: the caller sums the gradients in two passes (CudaBackend::norm_param_grads).
template <bool kLayer>
bool norm_backward_tiles(CudaBackend* be, cudaStream_t stream, TensorRef dinp, float* dw, float* db,
                         TensorView dout, TensorView inp, TensorView w, const float* mean,
                         const float* rstd, int N, int C) {
  constexpr int K = kLayer ? 2 : 1;
  const size_t smem = (size_t)kNormTileWarps * K * C * sizeof(float);
  const int tiles = (N + kNormTileRows - 1) / kNormTileRows;
  if (smem > kMaxBlockSmem) {
    if (N > 0)
      launch_kernel(norm_backward_tile_kernel<kLayer>, tiles, kNormTileWarps * 32, stream, dinp,
                    nullptr, dout, inp, w, mean, rstd, N, C);
    return false;
  }
  if (N <= 0) return true;
  DeviceBuffer partials(be, (size_t)tiles * K * C * sizeof(float), MemCategory::kWorkspace);
  allow_smem(norm_backward_tile_kernel<kLayer>, smem);
  launch_kernel_smem(norm_backward_tile_kernel<kLayer>, tiles, kNormTileWarps * 32, smem, stream,
                     dinp, partials.f32(), dout, inp, w, mean, rstd, N, C);
  ColumnSumDst<K> dst;
  dst.p[0] = dw;
  if constexpr (kLayer) dst.p[1] = db;
  column_sums<K>(be, stream, dst, TilePartials<K>{partials.f32(), C}, tiles, C);
  return true;
}

}  // namespace zt

// Sums over the rows of an (N, C) array, column by column, in two fixed-order passes: the
// weight-gradient reductions of the bias, the norms' weight and bias (llm.c's and apex's
// scheme). Pass 1: a block of 32 columns x 8 row lanes sums a tile of kTileRows rows (lane y
// takes rows y, y + 8, ...; then the 8 lane sums in order) into partials (tiles, K, C). Pass 2:
// one thread per column adds the tiles' partials in order to dst. The same inputs give the same
// bits on every run (no atomics); the order differs from the CPU backend's row-by-row sum, so
// the two agree to fp32 rounding.
#pragma once

#include "model/cuda/cuda_backend.cuh"

namespace zt {

constexpr int kColumnTileRows = 256;

// Op: a __device__ callable op(n, c, float (&v)[K]) writing row n, column c's K values.
template <int K, class Op>
__global__ void column_partials_kernel(float* partials, Op op, int N, int C) {
  __shared__ float lanes[K][8][32];
  const int c = blockIdx.x * 32 + threadIdx.x, tile = blockIdx.y;
  const int end = min(N, (tile + 1) * kColumnTileRows);
  float s[K] = {};
  if (c < C)
    for (int n = tile * kColumnTileRows + threadIdx.y; n < end; n += 8) {
      float v[K];
      op(n, c, v);
#pragma unroll
      for (int k = 0; k < K; ++k) s[k] += v[k];
    }
#pragma unroll
  for (int k = 0; k < K; ++k) lanes[k][threadIdx.y][threadIdx.x] = s[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float t = 0.f;
    for (int y = 0; y < 8; ++y) t += lanes[k][y][threadIdx.x];
    partials[((size_t)tile * K + k) * C + c] = t;
  }
}

template <int K>
struct ColumnSumDst {
  float* p[K];  // null: that output is not wanted
};

// dst.p[k][c] += sum over tiles of partials[tile][k][c], in tile order.
template <int K>
__global__ void column_sum_kernel(ColumnSumDst<K> dst, const float* partials, int tiles, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    if (!dst.p[k]) continue;
    float t = 0.f;
    for (int i = 0; i < tiles; ++i) t += partials[((size_t)i * K + k) * C + c];
    dst.p[k][c] += t;
  }
}

// dst.p[k][c] += sum_n op(n, c)[k] for the N rows, in the two passes above; partials in `be`'s
// workspace (ceil(N / 256) K C floats). Nothing happens for N = 0.
template <int K, class Op>
void column_sums(CudaBackend* be, cudaStream_t stream, ColumnSumDst<K> dst, Op op, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const int tiles = (N + kColumnTileRows - 1) / kColumnTileRows;
  DeviceBuffer partials(be, (size_t)tiles * K * C * sizeof(float), MemCategory::kWorkspace);
  launch_kernel(column_partials_kernel<K, Op>, dim3((C + 31) / 32, tiles), dim3(32, 8), stream,
                partials.f32(), op, N, C);
  launch_kernel(column_sum_kernel<K>, blocks_for(C), kThreads, stream, dst,
                (const float*)partials.f32(), tiles, C);
}

}  // namespace zt

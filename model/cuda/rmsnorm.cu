// RMSNorm, one warp per row (equations in model/cpu/rmsnorm.cc). The backward takes the weight
// gradient's partial sums in the same pass as dx (rmsnorm_backward_tile_kernel), so dout and inp
// are read once for both; column_sum.cuh's second pass adds the tiles' partials.
#include "model/cuda/column_sum.cuh"
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

// With residual non-null, inp (N,C) += residual first, in place (as layernorm.cu).
__global__ void rmsnorm_forward_kernel(TensorRef out, float* rstd, TensorRef inp,
                                       TensorView residual, TensorView w, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t x = (size_t)row * C;  // the row's first element
  if (residual.data)
    for (int c = lane; c < C; c += 32)
      store_from_f32(inp, x + c, load_as_f32(inp, x + c) + load_as_f32(residual, x + c));
  float s = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float v = load_as_f32(inp, x + c);
    s += v * v;
  }
  const float r = rsqrtf(warp_sum(s) / C + eps);
  for (int c = lane; c < C; c += 32)
    store_from_f32(out, x + c, load_as_f32(inp, x + c) * r * load_as_f32(w, c));
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_kernel(TensorRef dinp, TensorView dout, TensorView inp,
                                        TensorView w, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t x = (size_t)row * C;
  const float r = rstd[row];
  float s = 0.f;
  for (int c = lane; c < C; c += 32)
    s += load_as_f32(dout, x + c) * load_as_f32(w, c) * load_as_f32(inp, x + c) * r;
  const float mean_dxhat_xhat = warp_sum(s) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = load_as_f32(inp, x + c) * r;
    add_from_f32(dinp, x + c,
                 r * (load_as_f32(dout, x + c) * load_as_f32(w, c) - xhat * mean_dxhat_xhat));
  }
}

constexpr int kTileRows = 32;   // rows a block: N = 8192 makes 256 blocks
constexpr int kTileWarps = 4;   // each takes rows warp, warp + 4, ... of the tile
constexpr size_t kMaxTileSmem = 227u << 10;  // kTileWarps x C floats: C up to 14,528

// Rows [tile kTileRows, +kTileRows) of N: dx as rmsnorm_backward_kernel, and the weight
// gradient's column sums over the tile's rows, dout x xhat, into partials (tiles, C). Each warp
// sums its rows into a shared-memory row of its own (lane l owns columns l, l + 32, ..., so no
// barrier), then the block adds the warps' rows in warp order: a fixed order, the same bits on
// every run.
__global__ void rmsnorm_backward_tile_kernel(TensorRef dinp, float* partials, TensorView dout,
                                             TensorView inp, TensorView w, const float* rstd,
                                             int N, int C) {
  float* acc = dynamic_smem<float>() + (size_t)(threadIdx.x / 32) * C;  // this warp's row
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int c = lane; c < C; c += 32) acc[c] = 0.f;
  const int end = min(N, ((int)blockIdx.x + 1) * kTileRows);
  for (int row = blockIdx.x * kTileRows + warp; row < end; row += kTileWarps) {
    const size_t x = (size_t)row * C;
    const float r = rstd[row];
    float s = 0.f;
    for (int c = lane; c < C; c += 32)
      s += load_as_f32(dout, x + c) * load_as_f32(w, c) * load_as_f32(inp, x + c) * r;
    const float mean_dxhat_xhat = warp_sum(s) / C;
    for (int c = lane; c < C; c += 32) {
      const float dy = load_as_f32(dout, x + c), xhat = load_as_f32(inp, x + c) * r;
      add_from_f32(dinp, x + c, r * (dy * load_as_f32(w, c) - xhat * mean_dxhat_xhat));
      acc[c] += dy * xhat;
    }
  }
  __syncthreads();
  const float* rows = dynamic_smem<float>();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float t = 0.f;
    for (int k = 0; k < kTileWarps; ++k) t += rows[(size_t)k * C + c];
    partials[(size_t)blockIdx.x * C + c] = t;
  }
}

}  // namespace

void CudaBackend::rmsnorm_forward(TensorRef out, float* rstd, TensorView inp, TensorView w, int N,
                                  int C, float eps) {
  // Without a residual the kernel only reads inp.
  const TensorRef x(const_cast<void*>(inp.data), inp.dtype);
  launch_kernel(rmsnorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, rstd, x,
                TensorView(), w, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::residual_rmsnorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                           float* rstd, TensorView w, int N, int C, float eps) {
  launch_kernel(rmsnorm_forward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, out, rstd, x,
                residual, w, N, C, eps);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::rmsnorm_backward(TensorRef dinp, TensorRef dw_g, TensorView dout, TensorView inp,
                                   TensorView w, const float* rstd, int N, int C) {
  float* dw = grad_f32(dw_g);
  if (N <= 0) return;
  const size_t smem = (size_t)kTileWarps * C * sizeof(float);
  if (smem <= kMaxTileSmem) {  // one pass for dx and the tiles' partials, then their sum
    const int tiles = (N + kTileRows - 1) / kTileRows;
    DeviceBuffer partials(this, (size_t)tiles * C * sizeof(float), MemCategory::kWorkspace);
    allow_smem(rmsnorm_backward_tile_kernel, smem);
    launch_kernel_smem(rmsnorm_backward_tile_kernel, tiles, kTileWarps * 32, smem, stream_, dinp,
                       partials.f32(), dout, inp, w, rstd, N, C);
    launch_kernel(column_sum_kernel<1>, blocks_for(C), kThreads, stream_, ColumnSumDst<1>{{dw}},
                  (const float*)partials.f32(), tiles, C);
    return;
  }
  launch_kernel(rmsnorm_backward_kernel, blocks_for((size_t)N * 32), kThreads, stream_, dinp, dout,
                inp, w, rstd, N, C);
  ZT_CHECK_CUDA(cudaGetLastError());
  norm_param_grads(dw, nullptr, dout, inp, nullptr, rstd, N, C);  // fixed order, no atomics
}

}  // namespace zt
